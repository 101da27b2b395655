// The fixed-order sum of per-block partial rows (src/ops/cuda/ordered_sum.cu) against a host emulation of the
// order ordered_sum.h defines, bit for bit: every column's rows cut into ordered_sum_warps(D) ranges, each summed
// in row order, the ranges' sums added in range order and then to out. Widths around the 32-column block and the
// 1,024-column switch between 32 and 8 ranges; row counts below, at and above the range count.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/harness.h"
#include "ops/cuda/ordered_sum.h"

namespace quill {
namespace {

std::vector<float> emulated(const std::vector<float>& partials, int64_t P, int64_t D, std::vector<float> out) {
  const int64_t W = cuda::ordered_sum_warps(D), rows = (P + W - 1) / W;
  for (int64_t d = 0; d < D; ++d) {
    float t = 0.f;
    for (int64_t w = 0; w < W; ++w) {
      float s = 0.f;
      for (int64_t p = w * rows; p < std::min(P, (w + 1) * rows); ++p) s += partials[p * D + d];
      t = w == 0 ? s : t + s;
    }
    out[d] += t;
  }
  return out;
}

TEST(CudaOrderedSum, AddsTheRowsInTheDefinedOrder) {
  QUILL_REQUIRE_GPU();
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (int64_t D : {1, 31, 128, 1000, 1024, 1025, 4096}) {
    for (int64_t P : {1, 7, 32, 33, 528}) {
      SCOPED_TRACE(testing::Message() << "D=" << D << " P=" << P);
      std::vector<float> partials(P * D), out(D);
      for (float& v : partials) v = normal(rng) * 1e3f;  // large values: a different order shows in the bits
      for (float& v : out) v = normal(rng);
      const std::vector<float> want = emulated(partials, P, D, out);
      float *dp = nullptr, *dout = nullptr;
      ASSERT_EQ(cudaMalloc(&dp, partials.size() * 4), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&dout, out.size() * 4), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(dp, partials.data(), partials.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(dout, out.data(), out.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
      cuda::add_partials_in_order(nullptr, dp, P, D, dout);
      std::vector<float> got(D);
      ASSERT_EQ(cudaMemcpy(got.data(), dout, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      cudaFree(dp);
      cudaFree(dout);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), D * 4), 0) << "first column " << got[0] << " want " << want[0];
    }
  }
}

}  // namespace
}  // namespace quill
