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

}  // namespace quill::ops
