// Fixed-order reductions for weight gradients that many blocks contribute to (issue 24: float
// atomics add in whatever order the blocks finish, so a run's gradients differed in the last bits
// from the next run's). Each block writes its partial sums to a row of a scratch buffer; one more
// kernel adds the rows in block order. The same inputs give the same bits on every run.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace quill::cuda {

// out[d] += sum over p = 0..P-1 of partials[p * D + d], the p in order, for d < D. On `stream`.
void add_partials_in_order(cudaStream_t stream, const float* partials, int64_t P, int64_t D, float* out);

}  // namespace quill::cuda
