// Fixed-order reductions for weight gradients that many blocks contribute to (issue 24: float
// atomics add in whatever order the blocks finish, so a run's gradients differed in the last bits
// from the next run's). Each block writes its partial sums to a row of a scratch buffer; one more
// kernel adds the rows in a fixed order. The same inputs give the same bits on every run.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace quill::cuda {

// The order: the P rows are cut into W = ordered_sum_warps(D) consecutive ranges of ceil(P / W) rows (the last
// ones shorter or empty); each range is summed in row order from 0, and out[d] += ((s_0 + s_1) + ...) + s_{W-1}.
// One warp per range and 32 columns per block, so that narrow gradients (a q/k norm's 128 columns, a
// convolution's 1,024) still spread their rows over many warps instead of one thread walking every row.
inline int ordered_sum_warps(int64_t D) { return D <= 1024 ? 32 : 8; }

// out[d] += the sum over p = 0..P-1 of partials[p * D + d] in the order above, for d < D. On `stream`.
void add_partials_in_order(cudaStream_t stream, const float* partials, int64_t P, int64_t D, float* out);

}  // namespace quill::cuda
