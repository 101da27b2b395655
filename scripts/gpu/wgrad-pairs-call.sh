#!/usr/bin/env bash
# One device call (issue 40; docs/decisions/expert-wgrad-pairs.md): --moe-expert-wgrad-micro-batches 2 against 1 on
# a seed stage under --simulate-rank (TP4 SP PP4 12/10/10/10 EP8 DP2, balanced routing, 16 rows per step = 8
# micro-batches, 4 steps, step 0 warm-up), the arms in A B B A order on one warm machine; the first two arms
# profile step 3 (left out of their medians), so the grouped weight gradient and the merge are timed per op.
# First the merge kernel's tests (CudaGatherRows.*).
#   here:   scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests grouped_bench quill && git rev-parse --short HEAD > build/gpu-bundle/COMMIT
#   device: run(needs_h200=true, carry=["build/gpu-bundle"], command="bash scripts/gpu/wgrad-pairs-call.sh")
# Environment [defaults]: CASES [first-bf16s: stage 0, bf16 moments, no offload, selective recompute; with the
#   pairs 2.75 GiB free on an H200 (quill plan)]; ARMS ["off pairs pairs off"]; BASE_EXTRA [none]: flags for
#   every arm. On an 80 GB H100: CASES=last-bf16h DEVICE_MEMORY=140GiB BASE_EXTRA="--recompute-granularity
#   selective --recompute-modules moe_act" (the last stage with the pairs then plans 78.75 GiB).
# Back: $OUT/wgrad-pairs.txt (the call's log) and $OUT/wgrad-pairs.tar.gz (each arm's summary, metrics, profile).
set -uo pipefail
OUT=${OUT:-/tmp/out}
B=$PWD/build/gpu-bundle
export LD_LIBRARY_PATH=$B/lib:${LD_LIBRARY_PATH:-} NCCL_NVLS_ENABLE=0
CASES=${CASES:-first-bf16s}
ARMS=${ARMS:-"off pairs pairs off"}
BASE_EXTRA=${BASE_EXTRA:-}
R=/tmp/wgrad-pairs
mkdir -p "$OUT" "$R"
{
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "quill $(cat "$B/COMMIT"); $(date -u +%FT%TZ); cases $CASES; arms $ARMS; every arm: ${BASE_EXTRA:-(nothing more)}"
"$B/bin/cuda_tests" --gtest_filter='CudaGatherRows.*' > "$R/cuda_tests.log" 2>&1
tail -1 "$R/cuda_tests.log"
i=0
for arm in $ARMS; do
  i=$((i + 1))
  extra=$BASE_EXTRA
  [ "$arm" = pairs ] && extra="$extra --moe-expert-wgrad-micro-batches 2"
  profile=""
  [ $i -le 2 ] && profile=3
  echo "=== arm $i: $arm ($extra)"
  # shellcheck disable=SC2086
  TRAIN_EXTRA="$extra" Q=${Q:-$B/bin/quill} OUT=$R/$i-$arm GLOBAL_BATCH=16 STEPS=4 WARMUP=1 PROFILE_STEP=$profile \
    CASE_TIMEOUT=${CASE_TIMEOUT:-170} bash scripts/gpu/seed-projection.sh $CASES 2>&1 | grep -E "^rank|train rc|error|refused|^fits"
  for c in $CASES; do
    python3 scripts/gpu/run_steps.py "$R/$i-$arm/$c" --keys moe_expert_wgrad_micro_batches
    f=$R/$i-$arm/$c/op_profile_step3.txt
    [ -f "$f" ] && sed -n '/^by op:/,$p' "$f" | grep -E "^op |^grouped_linear_backward_weight|^gather_rows_from_pair|^grouped_linear_(forward|backward_input)"
  done
done
tar -czf "$OUT/wgrad-pairs.tar.gz" -C "$R" . 2>/dev/null
} 2>&1 | tee "$OUT/wgrad-pairs.txt"
