#!/usr/bin/env bash
# Nsight Compute on the routed experts' GEMMs at a seed rank's shapes (issues 40 and 43: 32 experts x ROWS rows
# [384; 768 is the weight-gradient pairs' shape], hidden 4,096, expert width 2,048), one launch of each kernel
# grouped_bench calls, to say what bounds each:
#   grouped_wgrad_kernel, gate/up accumulating (the 14th launch of that kernel: grouped_bench times each arm with one
#     warm-up, 7 timed calls and 5 host-issue calls, and the down arm comes first), and the same launch of the
#     ping-pong experiment's grouped_wgrad_pingpong_kernel
#   grouped_gemm_kernel (bf16 forward gate/up, the 2nd launch) and grouped_gemm_fp8_kernel (FP8 forward gate/up, 2nd)
# The sections: speed of light, memory workload (DRAM and L2 throughput), compute workload, warp stalls.
#   here:   scripts/gpu-bundle.sh build build/gpu-bundle cuda_tests grouped_bench quill attention_bench
#   device: run(carry=["build/gpu-bundle.tgz"], command="tar -xzf build/gpu-bundle.tgz -C build && bash scripts/gpu/ncu-grouped-seed.sh")
# Back: $OUT/ncu-grouped-seed.txt (the summary lines), $OUT/ncu-grouped-<name>.txt (each kernel's full report).
set -uo pipefail
# shellcheck source=scripts/gpu/bundle-env.sh
source "$(dirname "$0")/bundle-env.sh"
NCU=${NCU:-/usr/local/cuda/bin/ncu}
mkdir -p "$OUT"
read -ra counts <<< "$(printf "${ROWS:-384} %.0s" $(seq 32))"
{
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "quill $(cat "$B/COMMIT"); $(date -u +%FT%TZ)"
while read -r name kernel skip; do
  timeout 120 "$NCU" -k "regex:$kernel" --launch-skip "$skip" -c 1 --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section WarpStateStats --section Occupancy \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
    "$B/bin/grouped_bench" "${counts[@]}" > "$OUT/ncu-grouped-$name.txt" 2>&1
  echo "== $name ($kernel, launch $((skip + 1))): ncu rc $?"
  grep -E "grouped_.*kernel|Duration|DRAM Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|Compute \(SM\) Throughput|Memory Throughput|Mem Busy|Max Bandwidth|L2 Hit Rate|Issue Slots Busy|Executed Ipc A|Warp Cycles Per Issued|Achieved Occupancy|ERR" \
    "$OUT/ncu-grouped-$name.txt" | head -24
  # The stall reasons, cycles per issued instruction each (the largest first).
  grep -E "issue_stalled" "$OUT/ncu-grouped-$name.txt" | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' \
    | awk '$NF+0 >= 0.1 {print $1, $NF}' | sort -k2 -g -r | head -8
done <<'EOF'
wgrad-acc grouped_wgrad_kernel 13
wgrad-pingpong-acc grouped_wgrad_pingpong_kernel 13
bf16-forward grouped_gemm_kernel 1
fp8-forward grouped_gemm_fp8_kernel 1
EOF
date -u +%T
} 2>&1 | tee "$OUT/ncu-grouped-seed.txt"
