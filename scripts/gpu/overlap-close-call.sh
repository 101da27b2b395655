#!/usr/bin/env bash
# One device call on an H200 for issue 41's must-show 2 and 3, in the issue's own setting, plus the selective-recompute
# case the gather-order fix (071cc40) is for and the expert weight-gradient pairs under every overlap:
#   o/  the seed's three stage kinds (*-bf16o: bf16 moments, offload 0.1, no recompute), timed stand-ins, every
#       overlap off and on, and `quill project` of each arm (standin-overlap-call.sh): step, hidden share per group
#   s/  stage 0 with selective recompute (first-bf16s), every overlap on: the hidden share the fix changes (68.0%
#       before it, bench/results/2026-12-06-h200-standin-overlap/)
#   p/  stage 0 (first-bf16s), every overlap on, --moe-expert-wgrad-micro-batches 2 off and on (stage-ab-call.sh)
# About 400 s on an H200 (an 80 GB card does not fit stage 0 without offload).
#   here:   scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests grouped_bench quill
#   device: run(needs_h200=true, carry=["build/gpu-bundle.tgz"],
#               command="tar -xzf build/gpu-bundle.tgz -C build && bash scripts/gpu/overlap-close-call.sh")
# Back: $OUT/o/standin-overlap.{txt,tar.gz}, $OUT/s/standin-overlap.{txt,tar.gz}, $OUT/p/pairs.{txt,tar.gz}.
set -uo pipefail
O=${OUT:-/tmp/out}
overlap='--simulate-comm-time --overlap-grad-reduce --overlap-param-gather --tp-comm-overlap --moe-shared-expert-overlap --delay-wgrad-compute'
OUT=$O/o CASES='first-bf16o middle-bf16o last-bf16o' ARMS='timed overlap' bash scripts/gpu/standin-overlap-call.sh > /dev/null 2>&1
OUT=$O/s CASES=first-bf16s ARMS=overlap bash scripts/gpu/standin-overlap-call.sh > /dev/null 2>&1
OUT=$O/p NAME=pairs CASES=first-bf16s ARMS='off on' ON='--moe-expert-wgrad-micro-batches 2' BASE_EXTRA="$overlap" \
  KEYS=moe_expert_wgrad_micro_batches OPS='grouped_linear_backward_weight|gather_rows_from_pair' \
  bash scripts/gpu/stage-ab-call.sh > /dev/null 2>&1
grep -E "hidden|tokens/s|MFU|rank|train rc|refused|error" "$O/o/standin-overlap.txt" | tail -40
grep -E "hidden|tokens|rank|refused|error" "$O/s/standin-overlap.txt" | tail -12
tail -30 "$O/p/pairs.txt"
