// The three streams of the CUDA device context: asynchronous host<->device copies on the copy
// stream (from page-locked host memory) see the compute stream's earlier ops and are seen by its
// later ones after wait_transfers; NCCL collectives run on the communication stream, ordered
// after the compute stream's earlier work, and a started collective's result is visible to compute
// after its handle's wait. Each check follows a long run of compute work, so a missing ordering
// reads stale values. One GPU: the NCCL communicator has one rank (its all-gather is a copy).
#include <gtest/gtest.h>

#include <nccl.h>

#include "comm/nccl/nccl_comm.h"
#include "harness.h"
#include "ops/convert.h"
#include "ops/cuda/cuda_resources.h"
#include "ops/elementwise.h"

namespace quill::test {
namespace {

constexpr int64_t kN = 1 << 24;  // 64 MiB of fp32: each scale pass takes tens of microseconds

// Enqueues enough work on the compute stream that a copy not ordered after it would overtake it:
// t holds value / 2 at once, then 200 passes that keep it, then the last one that doubles it, so
// `value` appears only once the whole queue has run.
void slow_fill(const DeviceContext& ctx, const Tensor& t, float value) {
  Tensor h = Tensor::empty(t.shape(), DType::F32);
  for (int64_t i = 0; i < t.numel(); ++i) h.data_as<float>()[i] = value / 2;
  ops::transfer(ctx, h, t);  // synchronous
  for (int i = 0; i < 200; ++i) ops::scale_inplace(ctx, t, 1.0);
  ops::scale_inplace(ctx, t, 2.0);
}

TEST(CudaStreams, AsyncTransfersFollowAndPrecedeComputeInStreamOrder) {
  QUILL_REQUIRE_GPU();
  const DeviceContext ctx = gpu_ctx();
  Tensor dev = Tensor::empty({kN}, DType::F32, *ctx.allocator);
  slow_fill(ctx, dev, 3.0f);
  ops::scale_inplace(ctx, dev, 2.0);  // queued, not yet run when the copy is started
  Tensor back = Tensor::empty({kN}, DType::F32, *ctx.host_pinned);
  ops::transfer_async(ctx, dev, back);
  ops::wait_transfers(ctx, /*host=*/true);
  for (int64_t i : {int64_t{0}, kN / 2, kN - 1}) ASSERT_EQ(back.data_as<float>()[i], 6.0f) << i;

  // Host to device: the compute stream sees the copy only after wait_transfers.
  for (int64_t i = 0; i < kN; ++i) back.data_as<float>()[i] = 5.0f;
  Tensor dst = Tensor::empty({kN}, DType::F32, *ctx.allocator);
  ops::transfer_async(ctx, back, dst);
  ops::wait_transfers(ctx, /*host=*/false);
  ops::scale_inplace(ctx, dst, 0.5);
  Tensor check = Tensor::empty({kN}, DType::F32);
  ops::transfer(ctx, dst, check);
  for (int64_t i : {int64_t{0}, kN / 3, kN - 1}) ASSERT_EQ(check.data_as<float>()[i], 2.5f) << i;
}

TEST(CudaStreams, NcclRunsOnTheCommStreamOrderedWithCompute) {
  QUILL_REQUIRE_GPU();
  const DeviceContext ctx = gpu_ctx();
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  CommOptions options;
  options.on_error = CommOptions::OnError::Throw;
  NcclComm comm(id, 1, 0, stream_of(ctx), options, "world", comm_stream_of(ctx));
  EXPECT_EQ(comm.comm_stream(), comm_stream_of(ctx));
  EXPECT_NE(comm.comm_stream(), comm.stream());

  Tensor in = Tensor::empty({kN}, DType::F32, *ctx.allocator), out = Tensor::empty({kN}, DType::F32, *ctx.allocator);
  Tensor host = Tensor::empty({kN}, DType::F32);
  // Plain form: it reads in after the compute stream's fill, and compute reads out after it.
  slow_fill(ctx, in, 7.0f);
  comm.all_gather(in, out);
  ops::scale_inplace(ctx, out, 2.0);
  ops::transfer(ctx, out, host);
  for (int64_t i : {int64_t{0}, kN / 2, kN - 1}) ASSERT_EQ(host.data_as<float>()[i], 14.0f) << "plain " << i;

  // Started form: compute enqueued before wait() does not wait for it; after wait() it does.
  slow_fill(ctx, in, 9.0f);
  std::unique_ptr<CommHandle> h = comm.start_all_gather(in, out);
  h->wait();
  ops::scale_inplace(ctx, out, 3.0);
  ops::transfer(ctx, out, host);
  for (int64_t i : {int64_t{0}, kN / 2, kN - 1}) ASSERT_EQ(host.data_as<float>()[i], 27.0f) << "started " << i;

  // The reduce-scatter of one rank is a copy as well.
  slow_fill(ctx, in, 4.0f);
  comm.start_reduce_scatter(in, out, ReduceOp::Sum)->wait();
  ops::transfer(ctx, out, host);
  for (int64_t i : {int64_t{0}, kN - 1}) ASSERT_EQ(host.data_as<float>()[i], 4.0f) << "reduce-scatter " << i;
}

}  // namespace
}  // namespace quill::test
