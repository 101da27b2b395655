#!/usr/bin/env bash
# One device call for the parallel runtime (issue 14) on one H200: the CUDA op tests of this build,
# data parallelism on one GPU (two ranks, device tensors staged through host memory) against one
# rank with the optimizer state per rank, and the slice benchmark (gb1, gb8) of this build and of
# the base build in the same call.
# Here, first:
#   cmake --build build -j2 && scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests
#   git describe --always --dirty > build/gpu-bundle/COMMIT
#   the base build's bundle in .gpu-base/ (bin/, lib/, COMMIT) with that commit's bench/, tools/,
#   configs/ in .gpu-base/src/
# then: run(carry=["build/gpu-bundle", ".gpu-base"], command="bash scripts/gpu/runtime-check.sh")
set -uo pipefail
OUT=${OUT:-/tmp/out}
NEW=$PWD/build/gpu-bundle
BASE=$PWD/.gpu-base
WORK=/tmp/slice-work
PARTS=${PARTS:-"tests dp slice"}  # which parts run
has() { [[ " $PARTS " == *" $1 "* ]]; }
mkdir -p "$OUT/arms"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/arms/env.txt"
echo "new $(cat "$NEW/COMMIT"), base $(cat "$BASE/COMMIT"), $(date -u +%FT%TZ)" | tee -a "$OUT/arms/env.txt"

if has tests; then
echo "== CUDA op tests (new)"
LD_LIBRARY_PATH=$NEW/lib timeout 150 "$NEW/bin/cuda_tests" --gtest_brief=1 > "$OUT/cuda_tests.log" 2>&1
echo "rc $?"; grep -E "^\[  (PASSED|FAILED)|FAILED  \]" "$OUT/cuda_tests.log" | head -20
fi

Q=$NEW/bin/quill
export LD_LIBRARY_PATH=$NEW/lib
if has dp; then
echo "== data parallelism on one GPU: 1 rank vs 2 ranks (--comm mpi), tiny, 10 steps"
"$Q" data synth --overwrite --conversations 2000 --row-tokens 128 --out /tmp/rows-tiny > /dev/null
flags=(train --config configs/tiny.json --rows /tmp/rows-tiny --seed 1 --steps 10 --global-batch 4 --lr 1e-2
       --min-lr 1e-3 --warmup-fraction 0.1 --quiet --device cuda --overwrite)
timeout 120 "$Q" "${flags[@]}" --out /tmp/dp1 > /tmp/dp1.log 2>&1; echo "dp1 rc $?"
timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 "$Q" "${flags[@]}" --dp 2 --out /tmp/dp2 \
  < /dev/null > /tmp/dp2.log 2>&1; echo "dp2 rc $?"; tail -3 /tmp/dp2.log
python3 - > "$OUT/dp2.txt" <<'PY'
import json
def rows(p):
    try: return [json.loads(l) for l in open(p + "/metrics.jsonl")]
    except Exception as e: return []
a, b = rows("/tmp/dp1"), rows("/tmp/dp2")
print("step  loss-dp1    loss-dp2    rel       gnorm-dp1  gnorm-dp2  rel")
wl = wg = 0
for x, y in zip(a, b):
    dl = abs(x["loss"] - y["loss"]) / abs(x["loss"]); dg = abs(x["grad_norm"] - y["grad_norm"]) / abs(x["grad_norm"])
    wl, wg = max(wl, dl), max(wg, dg)
    print(f"{x['step']:4d}  {x['loss']:.6f}  {y['loss']:.6f}  {dl:.2e}  {x['grad_norm']:.5f}  {y['grad_norm']:.5f}  {dg:.2e}")
print(f"steps {min(len(a), len(b))}: max rel loss diff {wl:.3e}, max rel grad-norm diff {wg:.3e}")
for name in ("dp1", "dp2"):
    try:
        s = json.load(open(f"/tmp/{name}/summary.json"))
        print(name, "optimizer state bytes of rank 0:", json.dumps(s.get("optimizer_state_bytes_rank0")),
              "peak_gpu_bytes", s.get("peak_gpu_bytes"))
    except Exception as e:
        print(name, "no summary:", e)
PY
cat "$OUT/dp2.txt"
cp /tmp/dp1.log /tmp/dp2.log "$OUT/arms/" 2>/dev/null
fi

if has slice; then
echo "== slice: new build"
WORK=$WORK OUT=$OUT/arms/new QUILL=$Q BUDGET_S=230 STEPS8=8 PHASES="ceilings init rows quill1 quill8 report" \
  COMMIT=$(cat "$NEW/COMMIT") bash bench/slice/run.sh > "$OUT/arms/slice-new.log" 2>&1
tail -12 "$OUT/arms/new/slice-bench.txt" 2>/dev/null
python3 -c "import json; print('new summary gb1:', json.load(open('$WORK/quill-gb1/summary.json')).get('optimizer_state_bytes_rank0'))" 2>/dev/null
echo "== slice: base build"
(cd "$BASE/src" && WORK=$WORK OUT=$OUT/arms/base QUILL=$BASE/bin/quill BUDGET_S=170 STEPS8=8 REUSE_INIT=1 \
  PHASES="quill1 quill8 report" COMMIT=$(cat "$BASE/COMMIT") bash bench/slice/run.sh > "$OUT/arms/slice-base.log" 2>&1)
tail -12 "$OUT/arms/base/slice-bench.txt" 2>/dev/null
cp "$OUT/arms/new/slice-bench.txt" "$OUT/new-slice-bench.txt" 2>/dev/null
cp "$OUT/arms/base/slice-bench.txt" "$OUT/base-slice-bench.txt" 2>/dev/null
fi
tar -C "$OUT" -czf "$OUT/arms.tar.gz" arms && rm -rf "$OUT/arms"
ls -la "$OUT"
