#include "ops/cuda/ordered_sum.h"

#include "ops/cuda/cuda_resources.h"

namespace quill::cuda {
namespace {

// One thread per column: consecutive threads read consecutive columns of each partial row.
__global__ void add_partials_kernel(const float* partials, int64_t P, int64_t D, float* out) {
  const int64_t d = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (d >= D) return;
  float s = 0.f;
  for (int64_t p = 0; p < P; ++p) s += partials[p * D + d];
  out[d] += s;
}

}  // namespace

void add_partials_in_order(cudaStream_t stream, const float* partials, int64_t P, int64_t D, float* out) {
  if (D == 0) return;
  constexpr int kThreads = 256;
  add_partials_kernel<<<static_cast<unsigned>((D + kThreads - 1) / kThreads), kThreads, 0, stream>>>(partials, P, D,
                                                                                                     out);
  QUILL_CUDA_CHECK_LAUNCH("add_partials_kernel");
}

}  // namespace quill::cuda
