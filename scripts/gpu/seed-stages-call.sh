#!/usr/bin/env bash
# One device call (issue 40, must-show 1 and 2): the seed's three stage kinds (`--simulate-rank 0 / 8 / 24` of TP4 SP
# PP4 12/10/10/10 EP8 DP2, Inkling-Small, random weights, balanced routing), each with its per-op table, and
# `quill project --global-batch 128` of the three. On an H200: bf16 moments, no offload, selective recompute and the
# experts' weight-gradient pairs (*-bf16sp, stage 0 planned with 2.92 GiB free); on an 80 GB GPU the memory settings
# that fit there (*-bf16fu: the whole optimizer state offloaded, every layer recomputed). 16 rows per step (8
# micro-batches), 4 steps: step 0 warm-up, steps 1-2 measured, step 3 profiled.
#   here:   scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests quill grouped_bench
#   device: run(carry=["build/gpu-bundle.tgz"], command="tar -xzf build/gpu-bundle.tgz -C build && bash scripts/gpu/seed-stages-call.sh")
# Environment: CASES [by the GPU's memory, above], CASE_TIMEOUT [150], TESTS [none: a cuda_tests filter run first,
# its log in $OUT/tests.log and its summary at the top of seed-stages.txt].
# Back: $OUT/seed-stages.txt (the call's log), $OUT/cases.tar.gz (per case: plan, summary, collectives, metrics,
# projection, the profiled step's op table; one archive: the device tool brings back a limited count of files),
# $OUT/project.txt.
set -uo pipefail
# shellcheck source=scripts/gpu/bundle-env.sh
source "$(dirname "$0")/bundle-env.sh"
gpu_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
if [ "${gpu_mib:-0}" -lt 100000 ]; then default="first-bf16fu middle-bf16fu last-bf16fu"
else default="first-bf16sp middle-bf16sp last-bf16sp"; fi
read -ra cases <<< "${CASES:-$default}"
mkdir -p "$OUT"
{
if [ -n "${TESTS:-}" ]; then
  timeout 200 "$B/bin/cuda_tests" --gtest_filter="$TESTS" > "$OUT/tests.log" 2>&1
  rc=$?
  echo "cuda_tests ($TESTS) rc $rc: $(grep -cE '^\[       OK' "$OUT/tests.log") passed, $(grep -cE '^\[  FAILED' "$OUT/tests.log") failed lines"
fi
GLOBAL_BATCH=16 STEPS=4 WARMUP=1 PROFILE_STEP=3 CASE_TIMEOUT=${CASE_TIMEOUT:-150} \
  bash "$(dirname "$0")/seed-projection.sh" "${cases[@]}" 2>&1 | grep -E "^rank|train rc|error|refused|^fits|^= device"
dirs=()
for c in "${cases[@]}"; do [ -f "$OUT/$c/summary.json" ] && dirs+=("$OUT/$c"); done
((${#dirs[@]})) && "$Q" project --global-batch 128 "${dirs[@]}" 2>&1 | tee "$OUT/project.txt" | head -20
for c in "${cases[@]}"; do
  echo "== $c: the profiled step's ops, largest first"
  head -2 "$OUT/$c/op_profile_step3.txt" 2>/dev/null | cut -c1-160
  awk '/^op +kind/{f=1} f' "$OUT/$c/op_profile_step3.txt" 2>/dev/null | head -32  # by op
done
} 2>&1 | tee "$OUT/seed-stages.txt"
# One archive of the cases' folders (the device tool brings back only so many files).
tar -czf "$OUT/cases.tar.gz" -C "$OUT" "${cases[@]}" 2>/dev/null && for c in "${cases[@]}"; do rm -rf "${OUT:?}/$c"; done
