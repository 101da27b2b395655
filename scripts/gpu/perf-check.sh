#!/usr/bin/env bash
# One device call's check-and-benchmark pass on one H200 (issue 4): the CUDA op tests, the attention and
# routed-expert GEMM micro-benchmarks, optionally the slice parity run against transformers (PARITY=1), then
# the slice benchmark (quill only; PHASES="ceilings init rows quill1 quill8 peer report" adds the transformers
# arm). Build and bundle here first:
#   cmake --build build-cuda -j2
#   scripts/gpu-bundle.sh build-cuda build-cuda/gpu-bundle cuda_tests attention_bench grouped_bench
#   git describe --always --dirty > build-cuda/gpu-bundle/COMMIT
# then: run(carry=["build-cuda/gpu-bundle"], command="bash scripts/gpu/perf-check.sh")
# The device tool returns at most 8 files from $OUT: the key ones stay (slice-bench.txt/json, cuda_tests.log,
# slice-compare.txt), everything else is packed into extras.tar.gz. About 4 minutes with a cold machine, 8 with
# PARITY=1 (the reference trains once: REF_REPEAT=0).
set -uo pipefail
B=${BUNDLE:-build-cuda/gpu-bundle}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/$B/lib:${LD_LIBRARY_PATH:-} NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
cat "$B/COMMIT" 2>/dev/null
echo "== CUDA op tests"; timeout 150 "$B/bin/cuda_tests" --gtest_brief=1 > "$OUT/cuda_tests.log" 2>&1; echo "rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  \]" "$OUT/cuda_tests.log" | head -20
echo "== attention"; timeout 60 "$B/bin/attention_bench" | tee "$OUT/attention_bench.txt"
echo "== routed-expert GEMMs (GPU time and host issue time)"; timeout 60 "$B/bin/grouped_bench" | head -7 | tee "$OUT/grouped_bench.txt"
if [ "${PARITY:-0}" = 1 ]; then
  echo "== parity: slice, 2 x 4,096-token rows, 20 steps, against transformers"
  QUILL=$B/bin/quill OUT="$OUT" REF_REPEAT=0 timeout "${PARITY_S:-330}" bash tools/parity/run_parity.sh configs/slice.json \
    /tmp/rows4096 4096 2 > "$OUT/parity.log" 2>&1
  echo "parity rc $?"
  grep -E "convergence|strict|max rel|correlation|PASS|FAIL|worst" "$OUT/slice-compare.txt" 2>/dev/null | head -12 || tail -20 "$OUT/parity.log"
fi
echo "== slice"; QUILL=$B/bin/quill OUT=$OUT BUDGET_S=${BUDGET_S:-240} PHASES=${PHASES:-"ceilings init rows quill1 quill8 report"} \
  bash bench/slice/run.sh > "$OUT/slice.log" 2>&1
grep -A10 "^category" "$OUT/slice-bench.txt" | head -24; tail -9 "$OUT/slice-bench.txt"
cd "$OUT" && ls | grep -v -E '^(slice-bench\.(txt|json)|cuda_tests\.log|slice-compare\.txt|extras\.tar\.gz)$' > /tmp/extras.list
tar czf extras.tar.gz -T /tmp/extras.list && xargs rm -rf < /tmp/extras.list
