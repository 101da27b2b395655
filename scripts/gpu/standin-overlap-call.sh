#!/usr/bin/env bash
# One device call (issue 41, item 5): the first GPU run of the timed stand-ins (--simulate-comm-time,
# docs/simulate-rank.md). The seed's stage 0 and last stage (bf16 moments, offload 0.1: the *-bf16o cases of
# scripts/gpu/seed-projection.sh; the middle stage too), each run three ways on the same warm machine:
#   plain     the loopback alone (the collectives cost nothing: the figure the projection starts from)
#   timed     every collective also takes its modelled time on a stand-in (overlaps off)
#   overlap   timed, with every overlap quill has: --overlap-grad-reduce --overlap-param-gather (data
#             parallelism), --tp-comm-overlap (sequence parallelism), --moe-shared-expert-overlap and
#             --delay-wgrad-compute (the token exchanges)
# Each: 16 rows per step (8 micro-batches), 3 steps, step 0 warm-up, step 1 measured, step 2 profiled (the
# collectives table says how much of each group's time ran under compute); then `quill project` of each arm's
# stages at the seed's 128 rows per step (the timed arms: the step as measured beside the none-overlapped one,
# and the hidden share per group).
#   here:   scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests grouped_bench quill
#   device: run(carry=["build/gpu-bundle"], command="bash scripts/gpu/standin-overlap-call.sh")
# On an 80 GB H100: CASES="last-bf16h" DEVICE_MEMORY=140GiB. OVERLAP_FLAGS replaces the overlap arm's flags;
# ARMS ["plain timed overlap"] picks the arms (in that order).
# Back: $OUT/standin-overlap.txt (the call's log) and $OUT/standin-overlap.tar.gz (each case's summary.json,
# collectives.json, metrics.jsonl, op profile and log).
set -uo pipefail
OUT=${OUT:-/tmp/out}
B=$PWD/build/gpu-bundle
export LD_LIBRARY_PATH=$B/lib:${LD_LIBRARY_PATH:-} NCCL_NVLS_ENABLE=0
CASES=${CASES:-"first-bf16o middle-bf16o last-bf16o"}
R=/tmp/standin-overlap
mkdir -p "$OUT" "$R"
run_arm() {  # arm name, then the extra quill train flags
  local arm=$1; shift
  echo "=== $arm: $*"
  # shellcheck disable=SC2086
  TRAIN_EXTRA="$*" Q=${Q:-$B/bin/quill} OUT=$R/$arm GLOBAL_BATCH=16 STEPS=3 WARMUP=1 PROFILE_STEP=${PROFILE_STEP-2} CASE_TIMEOUT=${CASE_TIMEOUT:-150} \
    bash scripts/gpu/seed-projection.sh $CASES 2>&1 | grep -E "^rank|train rc|error|refused"
  for c in $CASES; do
    python3 scripts/gpu/run_steps.py "$R/$arm/$c" --keys simulated_comm_time
    grep -A14 -E "^collectives on their" "$R/$arm/$c/op_profile_step2.txt" 2>/dev/null | head -16
  done
  dirs=()
  for c in $CASES; do [ -f "$R/$arm/$c/summary.json" ] && dirs+=("$R/$arm/$c"); done
  if ((${#dirs[@]})); then
    "${Q:-$B/bin/quill}" project --global-batch "${PROJECT_BATCH:-128}" "${dirs[@]}" > "$R/$arm/project.txt" 2>&1
    cat "$R/$arm/project.txt"
  fi
  tar -czf "$OUT/standin-overlap.tar.gz" -C "$R" . 2>/dev/null
}
{
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "quill $(cat "$B/COMMIT"); $(date -u +%FT%TZ); cases $CASES"
ARMS=${ARMS:-"plain timed overlap"}
for arm in $ARMS; do
  case $arm in
    plain) run_arm plain ;;
    timed) run_arm timed --simulate-comm-time ;;
    overlap)
      # shellcheck disable=SC2086
      run_arm overlap --simulate-comm-time ${OVERLAP_FLAGS:---overlap-grad-reduce --overlap-param-gather \
        --tp-comm-overlap --moe-shared-expert-overlap --delay-wgrad-compute} ;;
    *) echo "unknown arm $arm (plain, timed, overlap)" ;;
  esac
done
date -u +%T
} 2>&1 | tee "$OUT/standin-overlap.txt"
tar -czf "$OUT/standin-overlap.tar.gz" -C "$R" . 2>/dev/null
