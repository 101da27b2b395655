// Masked next-token cross-entropy with the global per-token normalisation of
// recipes-and-measurement.md §3, fused with its gradient.
// logits_TV [T, V]; targets_T I32 [T]; weights_T [T] (the loss-mask bit of each target, 0 or 1, same
// float dtype as logits); the softmax covers columns [0, vocab_limit) (unpadded vocabulary) and the
// other columns get zero gradient. grad_scale = 1 / (supervised targets of the whole global batch).
// Returns sum_t weights[t] * -log softmax(logits[t])[targets[t]] (unscaled, in double);
// dlogits_TV (overwritten) = grad_scale * weights[t] * (softmax - onehot).
// A target outside [0, vocab_limit) with a nonzero weight is an error naming the position.
#pragma once

#include "ops/device_context.h"

namespace quill::ops {

double cross_entropy_forward_backward(const DeviceContext& ctx, const Tensor& logits_TV, const Tensor& targets_T,
                                      const Tensor& weights_T, int64_t vocab_limit, double grad_scale,
                                      const Tensor& dlogits_TV);

// Vocab-parallel (Megatron's vocab_parallel_cross_entropy): each tensor-parallel rank holds columns
// [vocab_begin, vocab_begin + V) of every row's logits, and no rank ever holds a whole row. Two calls
// around one all-gather of per-row statistics over the group:
//   stats_T3 [T, 3] (F32, or F64 on the CPU) = per row, over this shard's columns below vocab_limit:
//     (max, sum of exp(logit - max), the target's logit when this shard holds the target else 0);
//     (-inf, 0, 0) when the shard holds no such column. Weighted targets outside [0, vocab_limit)
//     are an error naming the position (checked here, before anything is written).
//   all_stats_RT3 [R, T, 3]: every shard's stats in shard order. The backward merges them in that
//     order (every rank gets the same bits), writes this shard's dlogits_TV (the fused op's formula
//     on its columns) and returns the loss sum over rows (the fused op's, identical on every rank).
void cross_entropy_shard_stats(const DeviceContext& ctx, const Tensor& logits_TV, const Tensor& targets_T,
                               const Tensor& weights_T, int64_t vocab_begin, int64_t vocab_limit,
                               const Tensor& stats_T3);
double cross_entropy_shard_backward(const DeviceContext& ctx, const Tensor& logits_TV, const Tensor& targets_T,
                                    const Tensor& weights_T, int64_t vocab_begin, int64_t vocab_limit,
                                    const Tensor& all_stats_RT3, double grad_scale, const Tensor& dlogits_TV);

}  // namespace quill::ops
