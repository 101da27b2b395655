#include "ops/cuda/ordered_sum.h"

#include "ops/cuda/cuda_resources.h"

namespace quill::cuda {
namespace {

constexpr int kUnroll = 8;  // loads in flight per thread before their adds (the adds stay in row order)

// A block: 32 columns (a lane each: one 128-byte line per row and warp), kWarps warps, warp w summing its range
// of rows; warp 0 then adds the warps' sums in warp order.
template <int kWarps>
__global__ void __launch_bounds__(kWarps * 32) add_partials_kernel(const float* partials, int64_t P, int64_t D,
                                                                   float* out) {
  __shared__ float warp_sums[kWarps][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t d = blockIdx.x * int64_t(32) + lane;
  const int64_t rows = (P + kWarps - 1) / kWarps;
  const int64_t p_end = min(P, (warp + 1) * rows);
  float s = 0.f;
  if (d < D) {
    int64_t p = warp * rows;
    for (; p + kUnroll <= p_end; p += kUnroll) {
      float v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) v[u] = partials[(p + u) * D + d];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) s += v[u];
    }
    for (; p < p_end; ++p) s += partials[p * D + d];
  }
  warp_sums[warp][lane] = s;
  __syncthreads();
  if (warp != 0 || d >= D) return;
  float t = warp_sums[0][lane];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) t += warp_sums[w][lane];
  out[d] += t;
}

}  // namespace

void add_partials_in_order(cudaStream_t stream, const float* partials, int64_t P, int64_t D, float* out) {
  if (D == 0) return;
  const unsigned blocks = static_cast<unsigned>((D + 31) / 32);
  if (ordered_sum_warps(D) == 32) add_partials_kernel<32><<<blocks, 32 * 32, 0, stream>>>(partials, P, D, out);
  else add_partials_kernel<8><<<blocks, 8 * 32, 0, stream>>>(partials, P, D, out);
  QUILL_CUDA_CHECK_LAUNCH("add_partials_kernel");
}

}  // namespace quill::cuda
