// The short-convolution halo of sequence parallelism under mpirun, against the whole row on one
// rank: every rank convolves its chunk with the halo gathered from the ranks before it, whose outputs
// must equal the whole row's; the chunk gradients after scatter_halo_grad must equal the whole row's
// input gradient, and the weight gradients summed over ranks the whole row's. Includes chunks shorter
// than the kernel (the halo then spans several ranks) and a kernel of 1 (no halo).
#include <gtest/gtest.h>

#include <cmath>

#include "comm/mpi_test_env.h"
#include "ops/short_conv.h"
#include "parallel/sp_halo.h"

namespace quill::test {
namespace {

Tensor random(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::F32);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < t.numel(); ++i) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    t.data_as<float>()[i] = static_cast<float>(static_cast<double>(s % 2001) / 1000.0 - 1.0);
  }
  return t;
}

void expect_near(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  for (int64_t i = 0; i < a.numel(); ++i)
    ASSERT_NEAR(a.data_as<float>()[i], b.data_as<float>()[i], 1e-5) << what << " element " << i;
}

TEST(SpHalo, ChunkedConvolutionEqualsTheWholeRow) {
  MpiComm& world = mpi_world();
  const int tp = world.size(), rank = world.rank();
  const DeviceContext ctx = DeviceContext::cpu();
  for (const auto& [Tc, K] : {std::pair<int64_t, int64_t>{1, 4}, {2, 4}, {3, 4}, {5, 4}, {4, 1}, {2, 2}}) {
    SCOPED_TRACE("chunk " + std::to_string(Tc) + " kernel " + std::to_string(K));
    const int64_t T = Tc * tp, C = 5;
    const Tensor x = random({T, C}, 11), w = random({C, K}, 12), dy = random({T, C}, 13);
    // The whole row on one rank.
    Tensor y = Tensor::empty({T, C}, DType::F32), dx = Tensor::empty({T, C}, DType::F32), dw = Tensor::zeros({C, K}, DType::F32);
    ops::short_conv_forward(ctx, x, w, y);
    ops::short_conv_backward(ctx, x, w, dy, dx, dw);
    // This rank's chunk.
    const Tensor chunk = x.rows(rank * Tc, (rank + 1) * Tc).clone();
    const Tensor halo = gather_halo(ctx, chunk, K, &world);
    ASSERT_EQ(halo.shape(), Shape({K - 1, C}));
    Tensor y_mine = Tensor::empty(chunk.shape(), DType::F32);
    ops::short_conv_forward(ctx, chunk, w, y_mine, halo);
    expect_near(y_mine, y.rows(rank * Tc, (rank + 1) * Tc).clone(), "forward");
    // Backward: this chunk's gradients, the halo's going back to the ranks before.
    const Tensor dy_mine = dy.rows(rank * Tc, (rank + 1) * Tc).clone();
    Tensor dchunk = Tensor::empty(chunk.shape(), DType::F32), dhalo = Tensor::empty(halo.shape(), DType::F32);
    Tensor dw_mine = Tensor::zeros({C, K}, DType::F32);
    ops::short_conv_backward(ctx, chunk, w, dy_mine, dchunk, dw_mine, halo, dhalo);
    scatter_halo_grad(ctx, dchunk, dhalo, K, &world);
    expect_near(dchunk, dx.rows(rank * Tc, (rank + 1) * Tc).clone(), "input gradient");
    world.all_reduce(dw_mine, ReduceOp::Sum);
    expect_near(dw_mine, dw, "weight gradient summed over ranks");
  }
}

}  // namespace
}  // namespace quill::test
