#!/usr/bin/env bash
# Issue 7's GPU figure, for one call on the `nvidia-h200-x2` machine: the slice trained with DP2
# (mpirun, NCCL, one GPU per rank) and on one GPU, same rows, same global batch; losses side by side
# and the per-GPU tokens/s of both (scaling efficiency = DP2 tokens/s per GPU / one GPU's).
# Carry the bundle from `scripts/gpu-bundle.sh build-cuda .gpu`. Measured: bench/results/2026-11-30-callA/.
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/.gpu/lib:${LD_LIBRARY_PATH:-} NCCL_NVLS_ENABLE=0
Q=$PWD/.gpu/bin/quill
OUT=${OUT:-/tmp/out}
W=/tmp/dp2
T=${ROW_TOKENS:-4096} GB=${GLOBAL_BATCH:-4} STEPS=${STEPS:-12}
mkdir -p "$OUT" "$W"
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
python3 tools/parity/make_init.py --config configs/slice.json --seed 1234 --out "$W/init" > "$W/init.log" 2>&1 || { tail "$W/init.log"; exit 2; }
"$Q" data synth --overwrite --conversations 20000 --row-tokens "$T" --out "$W/rows" > /dev/null
flags=(train --init "$W/init" --rows "$W/rows" --device cuda --steps "$STEPS" --global-batch "$GB" --lr 3e-4
       --min-lr 3e-5 --warmup-fraction 0.1 --weight-decay 0.1 --beta2 0.95 --overwrite --quiet --warmup-steps 3)
CUDA_VISIBLE_DEVICES=0 "$Q" "${flags[@]}" --out "$W/one" > "$W/one.log" 2>&1 || { tail "$W/one.log"; exit 3; }
mpirun --allow-run-as-root -np 2 -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE "$Q" "${flags[@]}" --dp 2 --out "$W/two" \
  > "$W/two.log" 2>&1 || { tail -30 "$W/two.log"; exit 4; }
cp "$W/one/metrics.jsonl" "$OUT/dp1-metrics.jsonl"; cp "$W/two/metrics.jsonl" "$OUT/dp2-metrics.jsonl"
python3 - "$W" <<'PY' | tee "$OUT/dp2.txt"
import json, statistics, sys
w = sys.argv[1]
load = lambda d: [json.loads(l) for l in open(f"{w}/{d}/metrics.jsonl")]
one, two = load("one"), load("two")
print("step  loss 1 GPU  loss DP2   rel diff")
for a, b in zip(one, two):
    print(f"{a['step']:4d}  {a['loss']:.6f}  {b['loss']:.6f}  {abs(a['loss'] - b['loss']) / abs(a['loss']):.2e}")
med = lambda rows: statistics.median(r["step_time_s"] for r in rows[3:])
tok = one[0]["tokens"]
t1, t2 = tok / med(one), tok / med(two) / 2
print(f"tokens/s per GPU: one GPU {t1:.0f}, DP2 {t2:.0f}; scaling efficiency {100 * t2 / t1:.1f}% (median of steps >= 3)")
PY
