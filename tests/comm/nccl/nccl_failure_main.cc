// An NCCL collective that can never complete (rank 1 never calls it): the watchdog must end the
// process within the timeout, naming the rank, the communicator and the operation. One thread per
// GPU, no launcher. Prints "SKIP: ..." and exits 0 without two GPUs (CTest marks it skipped).
#include <chrono>
#include <cstdio>
#include <thread>

#include "comm/nccl/nccl_comm.h"
#include "nccl_test_util.h"

using namespace quill;

int main() {
  if (test::cuda_device_count() < 2) {
    std::printf("SKIP: needs two GPUs\n");
    return 0;
  }
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  std::thread peers[2];
  for (int r = 0; r < 2; ++r)
    peers[r] = std::thread([&, r] {
      cudaSetDevice(r);
      cudaStream_t stream;
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
      CommOptions options;
      options.timeout_s = 2;
      NcclComm comm(id, 2, r, stream, options, "world");
      if (r == 1) {
        std::this_thread::sleep_for(std::chrono::seconds(60));  // never joins the all-reduce
        return;
      }
      test::CudaMallocAllocator gpu;
      Tensor t = Tensor::empty({8}, DType::F32, gpu);
      comm.all_reduce(t, ReduceOp::Sum);
      cudaStreamSynchronize(stream);
      std::printf("rank 0: the all-reduce completed without its peer\n");
    });
  for (auto& p : peers) p.join();
  return 0;
}
