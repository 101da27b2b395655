#!/usr/bin/env bash
# One device call: a performance option against its absence on seed stages under --simulate-rank (TP4 SP PP4
# 12/10/10/10 EP8 DP2, balanced routing, 16 rows per step = 8 micro-batches, 4 steps, step 0 warm-up), the arms in
# the order ARMS gives (A B B A by default: drift between arms shows) on one warm machine; the first two arms profile
# step 3 (left out of their medians), so the ops the option changes are timed per op. First an optional gtest filter
# of cuda_tests.
#   here:   scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests quill
#   device: run(needs_h200=true, carry=["build/gpu-bundle.tgz"], command="tar -xzf build/gpu-bundle.tgz -C build && ON='--grouped-gemm-kernel wgmma' KEYS=grouped_gemm_kernel OPS='grouped_linear_(forward|backward_input)' bash scripts/gpu/stage-ab-call.sh")
# Environment [defaults]: ON (the "on" arm's flags; required); CASES [first-bf16s: stage 0, bf16 moments, no
#   offload, selective recompute]; ARMS ["off on on off"]; BASE_EXTRA [none]: flags for every arm; TESTS [none]: a
#   gtest filter run first; KEYS: summary.json keys printed per arm; OPS: a regex of the profile's "by op" rows to
#   print; NAME [stage-ab]: the names of what comes back. On an 80 GB H100: CASES=last-bf16h DEVICE_MEMORY=140GiB
#   BASE_EXTRA="--recompute-granularity selective --recompute-modules moe_act".
# The log ends with each later arm's losses and gradient norms against the first arm's (scripts/gpu/same_numbers.py).
# Back: $OUT/$NAME.txt (the call's log) and $OUT/$NAME.tar.gz (each arm's summary, metrics, profile).
set -uo pipefail
# shellcheck source=scripts/gpu/bundle-env.sh
source "$(dirname "$0")/bundle-env.sh"
: "${ON:?give ON, the flags of the arm being measured}"
CASES=${CASES:-first-bf16s}
ARMS=${ARMS:-"off on on off"}
BASE_EXTRA=${BASE_EXTRA:-}
NAME=${NAME:-stage-ab}
R=/tmp/$NAME
rm -rf "$R"
mkdir -p "$OUT" "$R"
{
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "quill $(cat "$B/COMMIT"); $(date -u +%FT%TZ); cases $CASES; arms $ARMS; on: $ON; every arm: ${BASE_EXTRA:-(nothing more)}"
if [ -n "${TESTS:-}" ]; then
  "$B/bin/cuda_tests" --gtest_filter="$TESTS" > "$R/cuda_tests.log" 2>&1
  tail -1 "$R/cuda_tests.log"
fi
i=0
for arm in $ARMS; do
  i=$((i + 1))
  extra=$BASE_EXTRA
  [ "$arm" = on ] && extra="$extra $ON"
  profile=""
  [ $i -le 2 ] && [ "$DEVICE" = cuda ] && profile=3  # (the CPU backend has no profiler: a dry run)
  echo "=== arm $i: $arm ($extra)"
  # shellcheck disable=SC2086
  TRAIN_EXTRA="$extra" OUT=$R/$i-$arm GLOBAL_BATCH=16 STEPS=4 WARMUP=1 PROFILE_STEP=$profile \
    CASE_TIMEOUT=${CASE_TIMEOUT:-170} bash scripts/gpu/seed-projection.sh $CASES 2>&1 | grep -E "^rank|train rc|error|refused|^fits"
  for c in $CASES; do
    # shellcheck disable=SC2086
    python3 scripts/gpu/run_steps.py "$R/$i-$arm/$c" --keys ${KEYS:-}
    f=$R/$i-$arm/$c/op_profile_step3.txt
    [ -f "$f" ] && [ -n "${OPS:-}" ] && sed -n '/^by op:/,$p' "$f" | grep -E "^op |^(${OPS})"
  done
done
# Whether the arms computed the same numbers (a performance path must; a numerics option says how far it moves them).
for c in $CASES; do
  python3 scripts/gpu/same_numbers.py "$R"/*-*/"$c"
done
tar -czf "$OUT/$NAME.tar.gz" -C "$R" . 2>/dev/null
} 2>&1 | tee "$OUT/$NAME.txt"
