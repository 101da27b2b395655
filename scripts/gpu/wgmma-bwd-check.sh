#!/usr/bin/env bash
# One device call (issue 23): the Hopper attention backward (src/ops/cuda/attention_wg_backward.cu) on one
# H200. Each step in its own process, so a kernel that traps (every mbarrier wait traps after ~4 s) costs
# only its own row:
#   1. one small case (no bias, one tile), then every case against the CPU (tests/cuda/attention_wg_backward_test.cc);
#   2. the same bits on two runs, the comparison with the mma.sync backward on the slice's shapes;
#   3. attention_bench (forward and backward rows, the wgmma ones with their largest differences);
#   4. the attention op tests with the mma.sync backward (its host code was refactored) and with
#      QUILL_ATTENTION_WGMMA_BWD=1 (every head-dim-128 backward through the new kernel).
# Here first: cmake --build build -j2 && scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests attention_bench
# Then: run(carry=["build/gpu-bundle"], command="bash scripts/gpu/wgmma-bwd-check.sh")
# Environment [defaults]: OUT [/tmp/out], BENCH [1]: 0 skips attention_bench.
set -uo pipefail
OUT=${OUT:-/tmp/out}
B=$PWD/build/gpu-bundle
export LD_LIBRARY_PATH=$B/lib:${LD_LIBRARY_PATH:-}
T=$B/bin/cuda_tests
mkdir -p "$OUT"
one() {  # one gtest filter in its own process: rc and the lines that say what failed
  local name=$1 filter=$2 limit=$3
  shift 3
  env "$@" timeout "$limit" "$T" --gtest_brief=1 --gtest_filter="$filter" > "$OUT/wgb-$name.log" 2>&1
  local rc=$?
  echo "$name ($filter${*:+, $*}): rc $rc; $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/wgb-$name.log" | tr '\n' ' ')"
  [ $rc = 0 ] || grep -E -B2 -A8 'Failure|error|trap' "$OUT/wgb-$name.log" | head -60
}
{
echo "quill $(cat "$B/COMMIT"); $(date -u +%FT%TZ)"
one small 'CudaAttentionWgBackward/CudaAttentionWgBackwardTest.MatchesCpu/T64_one_tile_no_bias' 60
one cases 'CudaAttentionWgBackward/*' 200
one bits-vs-mma 'CudaAttentionWgBackward.*' 150
if [ "${BENCH:-1}" = 1 ]; then
  date +%T; timeout 150 "$B/bin/attention_bench" > "$OUT/wgb-attention-bench.txt" 2>&1; echo "attention_bench rc $?"
  cat "$OUT/wgb-attention-bench.txt"
fi
one ops-mma 'CudaAttention.*:CudaAttention/*' 150
one ops-routed 'CudaAttention.*:CudaAttention/*' 150 QUILL_ATTENTION_WGMMA_BWD=1
date +%T
} 2>&1 | tee "$OUT/wgmma-bwd-check.txt"
