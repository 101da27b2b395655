#!/usr/bin/env bash
# One device call (issues 40, 42, 43): the experts' weight-gradient kernel with two stagings (Form::kN128Prefetch: the
# next tile's old gradient loads while this tile is added and stored), the attention backward without the frozen
# table's gradient, and the FP8 grouped kernel with two products in flight, on whichever one-GPU machine comes.
# (Run at 9e38fbe: bench/results/2026-12-06-h100-wgrad-stagings-fp8-promotion/. The two-stagings form and the two
# products were measured slower and deleted in e5cef85; the script's phases still run on what is left.)
# Phases, most wanted first, each skipped when fewer than its seconds are left of LIMIT [420]:
#   1. tests: GroupedWgradWgmma.* (ThePrefetchFormGivesThe128WideFormsBits), the attention backward (the frozen table
#      on every path, the local and global seed-sized cases against the CPU, the wgmma backward), the determinism
#      test; stop if one fails
#   2. grouped_bench --no-fp8 at 32 experts x 384 rows: "(wgmma 128 wide, two stagings)" against the other forms
#   3. attention_bench at a TP4 rank's 8 q / 2 kv heads: "backward, table frozen" against the backward with it
#   4. the FP8 grouped kernel's tests (Fp8Cuda.*, GroupedGemmWgmma.Fp8*), apart so that a failure there costs the rest
#      nothing; if they pass, grouped_bench's FP8 arms at 384 rows (the kernel's last figures, quill 36cc9ee: 0.565 /
#      0.319 / 0.351 / 0.569 ms)
#   5. grouped_bench --no-fp8 at 768 rows (the two-stagings form against the 256-wide one)
#   6. the seed's last stage (last-bf16h on 80 GB, last-bf16s on an H200), one arm, step 3 profiled: the attention
#      backward without the table's gradient against the last measured (82.8 ms per step, 124.3 ms per micro-batch)
#   here:   scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests grouped_bench quill attention_bench
#   device: run(carry=["build/gpu-bundle.tgz"], command="tar -xzf build/gpu-bundle.tgz -C build && bash scripts/gpu/wgrad-prefetch-call.sh")
# Back (written as it goes, so that a call cut short still returns what ran): $OUT/wgrad-prefetch.txt (the log) and
# $OUT/wgrad-prefetch.tar.gz (every file: the device tool returns at most 8).
set -uo pipefail
# shellcheck source=scripts/gpu/bundle-env.sh
source "$(dirname "$0")/bundle-env.sh"
R=/tmp/wgrad-prefetch
LIMIT=${LIMIT:-420}
rm -rf "$R"
mkdir -p "$OUT" "$R"
keep() { tar -czf "$OUT/wgrad-prefetch.tar.gz" -C "$R" . 2>/dev/null; }
left() { echo $((LIMIT - SECONDS)); }
seed_counts() { printf "$1 %.0s" $(seq 32); }
{
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "quill $(cat "$B/COMMIT"); $(date -u +%FT%TZ)"
timeout 150 "$B/bin/cuda_tests" --gtest_filter='GroupedWgradWgmma.*:CudaAttention.AFrozen*:CudaAttention/CudaAttentionTest.*realistic*:CudaAttention/CudaAttentionTest.*d64_T300_window5_E7:*CudaAttentionWgBackward*:CudaDeterminism.TheSameTrainingTwiceGivesTheSameBits' \
  > "$R/cuda_tests.log" 2>&1
rc=$?
echo "cuda_tests rc $rc"
grep -E "^\[  (PASSED|FAILED)|FAILED  \]|forms differ|Failure" "$R/cuda_tests.log" | head -20
keep
if [ $rc -ne 0 ]; then echo "tests failed: no timing"; exit 1; fi
read -ra counts <<< "$(seed_counts 384)"
timeout 80 "$B/bin/grouped_bench" --no-fp8 "${counts[@]}" > "$R/grouped-bench-384.txt" 2>&1
echo "-- 32 experts x 384 rows"; grep -E "^backward weight|gate/up dw" "$R/grouped-bench-384.txt"
keep
timeout 60 "$B/bin/attention_bench" --heads 8:2 --no-wgmma > "$R/attention-bench-8-2.txt" 2>&1
echo "-- attention_bench --heads 8:2"; cat "$R/attention-bench-8-2.txt"
keep
date -u +%T
if [ "$(left)" -gt 60 ]; then
  timeout 60 "$B/bin/cuda_tests" --gtest_filter='Fp8Cuda.*:GroupedGemmWgmma.Fp8*:GroupedGemmWgmma.ShapesItDoesNotTakeFallBackToCublasLt' \
    > "$R/cuda_tests_fp8.log" 2>&1
  rc=$?
  echo "FP8 cuda_tests rc $rc"
  grep -E "^\[  (PASSED|FAILED)|FAILED  \]|Failure" "$R/cuda_tests_fp8.log" | head -12
  if [ $rc -eq 0 ]; then
    timeout 80 "$B/bin/grouped_bench" "${counts[@]}" > "$R/grouped-bench-fp8-384.txt" 2>&1
    echo "-- FP8, 32 experts x 384 rows"; grep -E "^fp8" "$R/grouped-bench-fp8-384.txt"
  fi
  keep
fi
if [ "$(left)" -gt 50 ]; then
  read -ra counts <<< "$(seed_counts 768)"
  timeout 80 "$B/bin/grouped_bench" --no-fp8 "${counts[@]}" > "$R/grouped-bench-768.txt" 2>&1
  echo "-- 32 experts x 768 rows"; grep -E "^backward weight|gate/up dw" "$R/grouped-bench-768.txt"
  keep
fi
date -u +%T
if [ "$(left)" -gt 110 ]; then
  mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
  if [ "${mib:-0}" -gt 100000 ]; then case=last-bf16s; extra=""; memory=""; else
    case=last-bf16h; extra="--recompute-granularity selective --recompute-modules moe_act"; memory=140GiB; fi
  # shellcheck disable=SC2086
  DEVICE_MEMORY=$memory TRAIN_EXTRA="$extra" OUT=$R/stage GLOBAL_BATCH=16 STEPS=4 WARMUP=1 PROFILE_STEP=3 \
    CASE_TIMEOUT=$(($(left) - 10)) timeout $(($(left) - 5)) bash scripts/gpu/seed-projection.sh $case 2>&1 |
    grep -E "^rank|train rc|error|refused"
  f=$R/stage/$case/op_profile_step3.txt
  [ -f "$f" ] && sed -n '/^by op:/,$p' "$f" | head -24
  keep
fi
date -u +%T
} 2>&1 | tee "$OUT/wgrad-prefetch.txt"
keep
