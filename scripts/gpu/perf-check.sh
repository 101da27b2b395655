#!/usr/bin/env bash
# One device call's check-and-benchmark pass on one H200 (issue 4): the CUDA op tests, the attention and
# routed-expert GEMM micro-benchmarks, then the slice benchmark (quill only; add "peer" to PHASES for the
# transformers arm). Build and bundle here first:
#   cmake --build build-cuda -j2
#   scripts/gpu-bundle.sh build-cuda build-cuda/gpu-bundle cuda_tests attention_bench grouped_bench
#   git describe --always --dirty > build-cuda/gpu-bundle/COMMIT
# then: run(carry=["build-cuda/gpu-bundle"], command="bash scripts/gpu/perf-check.sh")
# Results land in $OUT (the device tool returns at most 8 files: the slice's own files are left to run.sh's
# report; keep the call's output). About 4 minutes with a cold machine.
set -uo pipefail
B=${BUNDLE:-build-cuda/gpu-bundle}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/$B/lib:${LD_LIBRARY_PATH:-} NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
cat "$B/COMMIT" 2>/dev/null
echo "== CUDA op tests"; timeout 120 "$B/bin/cuda_tests" --gtest_brief=1 > "$OUT/cuda_tests.log" 2>&1; echo "rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  \]" "$OUT/cuda_tests.log" | head -20
echo "== attention"; timeout 60 "$B/bin/attention_bench" | tee "$OUT/attention_bench.txt"
echo "== routed-expert GEMMs (GPU time and host issue time)"; timeout 60 "$B/bin/grouped_bench" | head -7 | tee "$OUT/grouped_bench.txt"
echo "== slice"; QUILL=$B/bin/quill OUT=$OUT BUDGET_S=${BUDGET_S:-240} PHASES=${PHASES:-"ceilings init rows quill1 quill8 report"} \
  bash bench/slice/run.sh > "$OUT/slice.log" 2>&1
grep -A10 "^category" "$OUT/slice-bench.txt" | head -24; tail -9 "$OUT/slice-bench.txt"
