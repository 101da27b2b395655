#!/usr/bin/env bash
# One device call: the seed's stages twice with the bundle's one quill binary, arm A with ARM_A's train flags and arm
# B with ARM_B's (e.g. ARM_B="--grouped-wgrad-form pingpong --attention-bias-rows kernels": the kernels on trial,
# ops/kernel_trials.h, against the defaults), one after the other on the same GPU. Each arm is seed-stages-call.sh
# (the three stages at the GPU's memory settings, or CASES), its outputs under $OUT/a and $OUT/b; then the arms'
# compute per micro-batch side by side.
#   here:   scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests quill grouped_bench attention_bench
#   device: run(carry=["build/gpu-bundle.tgz"], command="tar -xzf build/gpu-bundle.tgz -C build &&
#           ARM_B='--grouped-wgrad-form pingpong' bash scripts/gpu/two-arms-call.sh")
# Environment: ARM_A [none], ARM_B [none], CASES, CASE_TIMEOUT, TRAIN_EXTRA (both arms; seed-stages-call.sh), TESTS
# (a cuda_tests filter, run once first, with arm A).
set -uo pipefail
dir=$(dirname "$0")
# shellcheck source=scripts/gpu/bundle-env.sh
source "$dir/bundle-env.sh"
top=$OUT
mkdir -p "$top"
{
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
echo "quill $(cat "$B/COMMIT" 2>/dev/null); A: '${ARM_A:-}'; B: '${ARM_B:-}'; $(date -u +%FT%TZ)"
} | tee "$top/ab.txt"
for arm in a b; do
  flags=${ARM_A:-}
  tests=${TESTS:-}
  if [ "$arm" = b ]; then flags=${ARM_B:-}; tests=""; fi
  OUT=$top/$arm TESTS=$tests TRAIN_EXTRA="${TRAIN_EXTRA:-} $flags" bash "$dir/seed-stages-call.sh" > /dev/null 2>&1
  echo "$arm rc $?" | tee -a "$top/ab.txt"
  grep -E "^rank|train rc|cuda_tests" "$top/$arm/seed-stages.txt" | tee -a "$top/ab.txt"
  grep -E "tokens/s/GPU|compute is" "$top/$arm/project.txt" 2>/dev/null | tee -a "$top/ab.txt"
done
