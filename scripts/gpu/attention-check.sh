#!/usr/bin/env bash
# Attention only (issue 4): the attention op tests and bench/attention/attention_bench on one H200.
# Bundle as scripts/gpu/perf-check.sh says; run(carry=["build-cuda/gpu-bundle"], command="bash scripts/gpu/attention-check.sh").
set -uo pipefail
B=${BUNDLE:-build-cuda/gpu-bundle}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/$B/lib:${LD_LIBRARY_PATH:-}
cat "$B/COMMIT" 2>/dev/null
timeout 120 "$B/bin/cuda_tests" --gtest_filter='*ttention*' --gtest_brief=1 > "$OUT/attention_tests.log" 2>&1; echo "attention tests rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  \]" "$OUT/attention_tests.log" | head -20
timeout 60 "$B/bin/attention_bench" | tee "$OUT/attention_bench.txt"
