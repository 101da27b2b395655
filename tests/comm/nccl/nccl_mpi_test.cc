// NcclComm bootstrapped through MPI, as the trainer starts it: mpirun -np N, each rank picks its
// GPU from its local rank, rank 0 of the MPI world makes the NCCL id. Skips (on every rank alike)
// when the node has fewer GPUs than ranks.
#include <gtest/gtest.h>

#include "../mpi_test_env.h"
#include "comm/nccl/nccl_comm.h"
#include "nccl_test_util.h"
#include "parallel/grid.h"

namespace quill::test {
namespace {

TEST(NcclOverMpi, BootstrapCollectivesAndGridSplit) {
  Distributed& dist = mpi_distributed();
  if (cuda_device_count() < 1 || (cuda_device_count() > 1 && cuda_device_count() < dist.local_size()))
    GTEST_SKIP() << dist.local_size() << " ranks on this node, " << cuda_device_count() << " GPUs";
  const int device = select_cuda_device(dist.local_rank(), dist.local_size());
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  CudaMallocAllocator gpu;
  {
    CommOptions options;
    options.timeout_s = 60;
    std::unique_ptr<NcclComm> world = NcclComm::create(mpi_world(), stream, options);
    EXPECT_EQ(world->rank(), dist.rank());
    EXPECT_EQ(world->size(), dist.size());
    EXPECT_EQ(world->cuda_device(), device);

    Tensor host = Tensor::empty({1001}, DType::BF16);
    for (int64_t i = 0; i < 1001; ++i) set_element(host, i, (dist.rank() + 1) * (i % 9) * 0.5);
    Tensor t = to_device(host, gpu);
    world->all_reduce(t, ReduceOp::Sum);
    Tensor got = to_host(t, stream);
    const double ranks_sum = dist.size() * (dist.size() + 1) / 2.0;
    for (int64_t i = 0; i < 1001; ++i) ASSERT_EQ(element(got, i), ranks_sum * (i % 9) * 0.5) << i;

    LayoutSpec s;
    s.tp = dist.size() % 2 == 0 ? 2 : 1;
    s.dp = dist.size() / s.tp;
    const Grid grid(dist.size(), s);
    const RankGroup dp = grid.group(GroupKind::DP, dist.rank());
    std::unique_ptr<Comm> dp_comm = world->split(dp.ranks, "dp");
    Tensor shard = to_device(make_tensor(DType::F32, 3, [&](int64_t i) { return dist.rank() * 10 + i; }), gpu);
    Tensor full = Tensor::empty({3 * dp.size()}, DType::F32, gpu);
    dp_comm->all_gather(shard, full);
    Tensor gathered = to_host(full, stream);
    for (int j = 0; j < dp.size(); ++j)
      for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(element(gathered, j * 3 + i), dp.ranks[j] * 10 + i);
    world->barrier();
  }
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace quill::test
