#!/usr/bin/env bash
# One device call (issue 40; docs/decisions/expert-wgrad-pairs.md): --moe-expert-wgrad-micro-batches 2 against 1 on
# a seed stage under --simulate-rank, by scripts/gpu/stage-ab-call.sh (A B B A, the first two arms profiled), after
# the merge kernel's tests (CudaGatherRows.*).
#   here:   scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests quill
#   device: run(needs_h200=true, carry=["build/gpu-bundle.tgz"], command="tar -xzf build/gpu-bundle.tgz -C build && bash scripts/gpu/wgrad-pairs-call.sh")
# Environment [defaults]: CASES [first-bf16s: stage 0, bf16 moments, no offload, selective recompute; with the
#   pairs 2.75 GiB free on an H200 (quill plan)]; ARMS ["off pairs pairs off"]; BASE_EXTRA [none]. On an 80 GB H100:
#   CASES=last-bf16h DEVICE_MEMORY=140GiB BASE_EXTRA="--recompute-granularity selective --recompute-modules moe_act".
# Back: $OUT/wgrad-pairs.txt and $OUT/wgrad-pairs.tar.gz (each arm's summary, metrics, profile).
set -uo pipefail
ARMS=${ARMS:-"off pairs pairs off"}
ARMS=${ARMS//pairs/on} ON="--moe-expert-wgrad-micro-batches 2" TESTS='CudaGatherRows.*' NAME=wgrad-pairs \
  KEYS=moe_expert_wgrad_micro_batches OPS='grouped_linear_backward_weight|gather_rows_from_pair|grouped_linear_(forward|backward_input)' \
  exec bash "$(dirname "$0")/stage-ab-call.sh"
