#!/usr/bin/env bash
# One device call (issues 40 and 43), any GPU: the checks of two changes of 2026-12-06 that only a GPU can make.
#   1. CudaGatherRows.*: ops::gather_rows_from_pair (the merge of --moe-expert-wgrad-micro-batches 2) against the CPU.
#   2. FP8 under --simulate-rank with data parallelism and every device allocation poisoned with 0xff (a NaN in
#      bf16): the transient bf16 copies' peer blocks, which the loopback's gather leaves as they are, start each
#      optimizer step zeroed now (bf486c0); before, they were the allocator's leftovers and the second step NaN.
#      Every step's loss and gradient norm must be finite.
#   3. --moe-expert-wgrad-micro-batches 2 on the GPU (tests/fixtures/configs/determinism.json, 4 micro-batches per
#      step, 3 steps): twice the same bits, and within fp32 rounding of one GEMM per micro-batch.
#   4. The seed's stage with and without the pairs (scripts/gpu/wgrad-pairs-call.sh; PAIRS_CASES [first-bf16ru: every
#      layer recomputed and offload 0.7, which fits an 80 GB H100 with the pairs], PAIRS_ARMS ["off pairs"]).
#   here:   scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests grouped_bench quill && git rev-parse --short HEAD > build/gpu-bundle/COMMIT
#   device: run(carry=["build/gpu-bundle"], command="bash scripts/gpu/pairs-fp8-check.sh")
# Back: $OUT/pairs-fp8-check.txt, and wgrad-pairs.txt / wgrad-pairs.tar.gz from part 4.
set -uo pipefail
# shellcheck source=scripts/gpu/bundle-env.sh
source "$(dirname "$0")/bundle-env.sh"
W=/tmp/pairs-fp8
mkdir -p "$OUT" "$W"
steps() {  # a run directory's losses and gradient norms, one line
  python3 -c "
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1] + '/metrics.jsonl')]
print('  ' + ', '.join(f\"step {r['step']}: loss {r['loss']!r} norm {r['grad_norm']!r}\" for r in rows))
print('  finite' if all(math.isfinite(r['loss']) and math.isfinite(r['grad_norm']) for r in rows) else '  NOT FINITE')
" "$1"
}
{
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "quill $(cat "$B/COMMIT"); $(date -u +%FT%TZ)"
echo "== 1. CudaGatherRows.*"
"$B/bin/cuda_tests" --gtest_filter='CudaGatherRows.*' 2>&1 | tail -1
"$Q" data synth --overwrite --conversations 400 --row-tokens 2048 --max-rows 32 --out "$W/rows" > /dev/null || exit 1
train=("$Q" train --config tests/fixtures/configs/determinism.json --rows "$W/rows" --seed 3 --steps 3 --global-batch 4
       --lr 1e-3 --device cuda --quiet --overwrite)
echo "== 2. FP8, --dp 2 --simulate-rank 0, allocations poisoned with 0xff"
QUILL_POISON_DEVICE_MEMORY=255 "${train[@]}" --dp 2 --simulate-rank 0 --fp8-format e4m3 --fp8-recipe blockwise \
  --out "$W/fp8-sim" > "$W/fp8-sim.log" 2>&1
echo "  rc $?"; tail -2 "$W/fp8-sim.log" | grep -E "error" ; steps "$W/fp8-sim"
echo "== 3. --moe-expert-wgrad-micro-batches 2 on the GPU"
for run in off pairs-a pairs-b; do
  extra=(); [ "$run" != off ] && extra=(--moe-expert-wgrad-micro-batches 2)
  "${train[@]}" "${extra[@]}" --out "$W/$run" > "$W/$run.log" 2>&1
  echo "  $run: rc $?"; steps "$W/$run"
done
python3 - "$W" <<'PY'
import json, sys
w = sys.argv[1]
m = {r: [json.loads(l) for l in open(f"{w}/{r}/metrics.jsonl")] for r in ("off", "pairs-a", "pairs-b")}
same = all(a["loss"] == b["loss"] and a["grad_norm"] == b["grad_norm"] for a, b in zip(m["pairs-a"], m["pairs-b"]))
print(f"  pairs twice: {'the same bits' if same else 'DIFFERENT'}")
for a, b in zip(m["pairs-a"], m["off"]):
    print(f"  step {a['step']}: loss rel diff {abs(a['loss'] - b['loss']) / abs(b['loss']):.2e}, "
          f"norm rel diff {abs(a['grad_norm'] - b['grad_norm']) / abs(b['grad_norm']):.2e} against one GEMM per micro-batch")
PY
} 2>&1 | tee "$OUT/pairs-fp8-check.txt"
echo "== 4. the seed's stage, pairs off and on" | tee -a "$OUT/pairs-fp8-check.txt"
CASES=${PAIRS_CASES:-first-bf16ru} ARMS=${PAIRS_ARMS:-"off pairs"} CASE_TIMEOUT=${CASE_TIMEOUT:-230} \
  bash scripts/gpu/wgrad-pairs-call.sh > /dev/null 2>&1
tail -n +3 "$OUT/wgrad-pairs.txt" | tee -a "$OUT/pairs-fp8-check.txt"
