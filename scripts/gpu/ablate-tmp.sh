set -uo pipefail
B=$PWD/build/gpu-bundle; export LD_LIBRARY_PATH=$B/lib:${LD_LIBRARY_PATH:-}
mkdir -p $OUT
timeout 60 $B/bin/cuda_tests --gtest_brief=1 --gtest_filter='CudaAttentionWgBackward/*window2*' 2>&1 | tail -2
for ab in 0 1 2 4 7; do
  echo "== ablate $ab"; QUILL_WG_BWD_ABLATE=$ab timeout 100 $B/bin/attention_bench 2>&1 | grep "backward wgmma"
done
NCU=/usr/local/cuda/bin/ncu
timeout 200 $NCU -k regex:attention_wg_backward_kernel --launch-skip 15 -c 1 --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy $B/bin/attention_bench > $OUT/ncu-bwd-global.txt 2>&1; echo "ncu rc $?"
grep -E "Duration|Throughput|Pipe|Tensor|Registers Per|Achieved Occupancy|Stall|Warp Cycles|Issued|ERR|Shared" $OUT/ncu-bwd-global.txt | head -60
