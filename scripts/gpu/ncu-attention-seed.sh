#!/usr/bin/env bash
# Nsight Compute on the attention at a seed rank's shapes (issue 42: TP4's 8 q / 2 kv heads, T = 8,192, head dim
# 128, bias rank 16), the kernels ops::attention_forward / attention_backward route to today (attention_wg.h): the
# mma.sync kernels for a local layer (window 512), the wgmma kernels for a global one.
#   1. The op's kernels, each with its mean duration (ncu --print-summary per-kernel over the first LAUNCHES [300]
#      launches of attention_bench --heads 8:2: the local layer's 13 forward and 13 backward calls, then the global
#      layer's): how much of each op is the core kernel and how much its bias GEMMs, tau rows, dQ finish, dot.
#   2. Each core kernel's first launch in detail (speed of light, tensor pipe, warp stalls, occupancy, launch,
#      memory): attention_tc_forward/backward (the local layer's first call), attention_wg_forward/backward (the
#      global layer's first call).
#   here:   scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests attention_bench quill
#   device: run(carry=["build/gpu-bundle.tgz"], command="tar -xzf build/gpu-bundle.tgz -C build && bash scripts/gpu/ncu-attention-seed.sh")
# Back: $OUT/ncu-summary.txt, $OUT/ncu-<kernel>.txt, $OUT/attention-bench-8-2.txt (the unprofiled times first).
set -uo pipefail
# shellcheck source=scripts/gpu/bundle-env.sh
source "$(dirname "$0")/bundle-env.sh"
NCU=${NCU:-/usr/local/cuda/bin/ncu}
mkdir -p "$OUT"
{
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "quill $(cat "$B/COMMIT"); $(date -u +%FT%TZ)"
timeout 120 "$B/bin/attention_bench" --heads 8:2 > "$OUT/attention-bench-8-2.txt" 2>&1
head -4 "$OUT/attention-bench-8-2.txt"
timeout 240 "$NCU" --metrics gpu__time_duration.sum -c "${LAUNCHES:-300}" --print-summary per-kernel \
  "$B/bin/attention_bench" --heads 8:2 > "$OUT/ncu-summary.txt" 2>&1
echo "ncu summary rc $?"
grep -E "^  [A-Za-z_].*\(|gpu__time_duration|Invocations" "$OUT/ncu-summary.txt" | head -60
for kern in attention_tc_forward_kernel attention_tc_backward_kernel attention_wg_forward_kernel attention_wg_backward_kernel; do
  timeout 150 "$NCU" -k "regex:$kern" -c 1 --section SpeedOfLight --section ComputeWorkloadAnalysis \
    --section WarpStateStats --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
    "$B/bin/attention_bench" --heads 8:2 > "$OUT/ncu-$kern.txt" 2>&1
  echo "== $kern: ncu rc $?"
  grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|Executed Ipc A|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Size|Grid Size|Warp Cycles Per Issued|ERR" \
    "$OUT/ncu-$kern.txt" | head -20
  # The stall reasons, cycles per issued instruction each (the largest first).
  grep -E "issue_stalled" "$OUT/ncu-$kern.txt" | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' \
    | awk '$NF+0 >= 0.1 {print $1, $NF}' | sort -k2 -g -r | head -8
done
date -u +%T
} 2>&1 | tee "$OUT/ncu-attention-seed.txt"
