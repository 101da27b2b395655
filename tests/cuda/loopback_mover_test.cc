// The CUDA loopback mover's span time (comm/cuda/loopback_cuda_mover.h, LoopbackMover::take_span_seconds): what a
// simulated rank's projection takes off its measured compute (docs/comm-model.md). The spans must hold the
// collectives' copies and nothing else: not the compute the stream ran before them, not work between spans.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>

#include "comm/cuda/loopback_cuda_mover.h"
#include "comm/loopback_comm.h"
#include "cuda/harness.h"
#include "ops/cuda/cuda_resources.h"

namespace quill {
namespace {

using test::gpu_ctx;

Tensor device_zeros(const DeviceContext& ctx, int64_t n) {
  Tensor t = Tensor::empty({n}, DType::BF16, *ctx.allocator);
  EXPECT_EQ(cudaMemsetAsync(t.data(), 0, t.nbytes(), stream_of(ctx)), cudaSuccess);
  return t;
}

double wall_seconds(const std::chrono::steady_clock::time_point& since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

TEST(CudaLoopbackMover, SpansTimeTheCopiesOnlyAndAreTakenOnce) {
  QUILL_REQUIRE_GPU();
  const DeviceContext ctx = gpu_ctx();
  const cudaStream_t stream = stream_of(ctx);
  std::shared_ptr<LoopbackMover> mover = make_cuda_loopback_mover(stream);
  LoopbackComm world(4, 1, "world", mover);
  const Tensor big = device_zeros(ctx, int64_t{1} << 29);  // 1 GiB of work before the spans
  const Tensor small_in = device_zeros(ctx, 256), small_out = device_zeros(ctx, 1024);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(mover->take_span_seconds(), 0.0) << "no span yet";

  // Compute before the span (a 1 GiB memset, ~0.3 ms or more) must not count: the span starts when the stream
  // reaches it.
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 4; ++i) ASSERT_EQ(cudaMemsetAsync(big.data(), i, big.nbytes(), stream), cudaSuccess);
  world.all_gather(small_in, small_out);  // 2 KiB of copies
  world.all_reduce(small_in, ReduceOp::Sum);  // moves nothing: no span
  const double small = mover->take_span_seconds();  // waits for the span's end
  const double wall = wall_seconds(start);
  EXPECT_GT(small, 0.0);
  EXPECT_LT(small, 0.1 * wall) << "the span held the memsets before it (" << small << " of " << wall << " s)";
  EXPECT_EQ(mover->take_span_seconds(), 0.0) << "taken once";

  // A large gather: the span holds its copies (4 x 256 MiB written), at most the stream's time since.
  const Tensor in = device_zeros(ctx, int64_t{1} << 27), out = device_zeros(ctx, int64_t{1} << 29);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  const auto start2 = std::chrono::steady_clock::now();
  world.all_gather(in, out);
  std::unique_ptr<Comm> tp = world.split({0, 1}, "tp");  // a split shares the mover
  tp->all_gather(in, out.view_flat(0, {int64_t{1} << 28}));
  const double large = mover->take_span_seconds();
  const double wall2 = wall_seconds(start2);
  EXPECT_GT(large, 1e-4) << "1.5 GiB copied";
  EXPECT_LE(large, wall2);
}

}  // namespace
}  // namespace quill
