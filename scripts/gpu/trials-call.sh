#!/usr/bin/env bash
# One device call (issues 40, 42): the kernels on trial (src/ops/kernel_trials.h) and the session's GPU changes,
# tested, benchmarked and raced in the seed's first stage.
#   1. the tests of the paths both arms take (SHARED_TESTS: the router, the regroup index, the route plan, the row
#      gathers), then wgrad-form-call.sh with TESTS (the weight-gradient forms, the bias rows), grouped_bench at 384
#      and 768 rows, attention_bench at a TP4 rank's heads;
#   2. two-arms-call.sh on the seed's first stage (H200: first-bf16sp; H100: first-bf16fu with the weight-gradient
#      pairs), arm A the defaults, arm B every trial whose tests passed (none left: no race): the weight gradient's
#      ping-pong form, the bias-row kernels, the wide attention forward, the attention backward's producer form. A failed test of a path
#      both arms take (the router, the regroup index, the route plan) skips the race; so does RACE=0 (a short call).
# Time: the tests and benchmarks take ~5 minutes since the attention forms joined (both forms of every attention
# test, two attention_bench builds), the race ~5.5: give RACE=0 and race in a second call (two-arms-call.sh with the
# ARM_B this script would build) when the call limit is 10 minutes.
#   here:   scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests quill grouped_bench attention_bench
#   device: run(carry=["build/gpu-bundle.tgz"], command="tar -xzf build/gpu-bundle.tgz -C build && bash scripts/gpu/trials-call.sh")
# Back: $OUT/forms (tests-shared.log, tests.log, wgrad-form.txt), $OUT/ab (ab.txt and each arm's seed-stages outputs), $OUT/all.tgz.
set -uo pipefail
dir=$(dirname "$0")
base=$OUT
export NCCL_NVLS_ENABLE=0
mkdir -p "$base/forms"
# The paths both arms take first, in a process of their own (a trial kernel that traps leaves its process's context
# unusable, failing every later test there).
# shellcheck source=scripts/gpu/bundle-env.sh
source "$dir/bundle-env.sh"
shared=$base/forms/tests-shared.log
timeout 150 "$B/bin/cuda_tests" --gtest_filter="${SHARED_TESTS:-CudaRouter*:CudaRegroupIndex.*:CudaGatherRows.*:*CudaRoutePlan*}" \
  > "$shared" 2>&1
echo "shared tests rc $?: $(grep -E '^\[  (PASSED|FAILED)' "$shared" | head -5 | tr '\n' ' ')"
OUT=$base/forms TESTS=${TESTS:-'GroupedWgradWgmma.*:CudaAttentionBiasRows.*:*CudaAttentionWg*'} \
  WGRAD_ROWS=${WGRAD_ROWS:-'384 768'} ATTENTION_HEADS=${ATTENTION_HEADS:-8:2} bash "$dir/wgrad-form-call.sh"
log=$base/forms/tests.log
failed() { grep -qE "^\[  FAILED  \] $1" "$2"; }
ran() { grep -qE "^\[       OK \] $1" "$log"; }  # ran and passed (at least one of the tests named)
# Arm B: every trial whose tests ran and passed (printed even without a race, for a race in another call).
arm_b=""
ran 'GroupedWgradWgmma.ThePingpongFormGivesTheHalfStagingsBits' && ! failed 'GroupedWgradWgmma.ThePingpong' "$log" \
  && arm_b="$arm_b --grouped-wgrad-form pingpong"
ran 'CudaAttentionBiasRows' && ! failed 'CudaAttentionBiasRows' "$log" && arm_b="$arm_b --attention-bias-rows kernels"
# The attention forms: every test of the form passed (the forward's wide rows run with each CudaAttentionWg test).
ran 'CudaAttentionWg/CudaAttentionWgTest.WideFormMatchesCpu' && ! failed 'CudaAttentionWg[/.]' "$log" \
  && arm_b="$arm_b --attention-forward-form wide"
ran 'CudaAttentionWgBackward.TheProducerFormGivesTheConsumersFormsBitsAtATp4RanksShape' \
  && ! failed '.*TheProducerForm' "$log" && ! failed 'CudaAttentionWgBackward' "$log" \
  && arm_b="$arm_b --attention-backward-form producer"
echo "ARM_B='$arm_b'" | tee "$base/arm-b.txt"
if [ "${RACE:-1}" != 1 ]; then
  echo "RACE=${RACE}: no race" | tee "$base/race-skipped.txt"
elif ! grep -qE "^\[==========\] .* ran\." "$log"; then
  # The untimed waits of the attention forms hang instead of trapping: a killed test run names no failure.
  echo "the trials' tests did not finish (a hang, or the time ran out): no race" | tee "$base/race-skipped.txt"
elif ! grep -qE "^\[  PASSED  \]" "$shared" || grep -qE "^\[  FAILED  \]" "$shared"; then
  echo "a path both arms take failed its tests (or they did not run): no race" | tee "$base/race-skipped.txt"
else
  if nvidia-smi | grep -q H200; then c=first-bf16sp; x=''; else c=first-bf16fu; x='--moe-expert-wgrad-micro-batches 2'; fi
  OUT=$base/ab ARM_B="$arm_b" CASES=${CASES:-$c} CASE_TIMEOUT=${CASE_TIMEOUT:-110} TRAIN_EXTRA="$x" \
    timeout "${RACE_TIMEOUT:-330}" bash "$dir/two-arms-call.sh"
fi
tar -czf "$base/all.tgz" -C "$base" forms ab 2>/dev/null
ls "$base"
