// The AdamW update of one parameter tensor (torch.optim.AdamW semantics; optim/adamw.h has the
// formula and the schedule around it). value, grad, exp_avg, exp_avg_sq have equal shape on ctx's
// device; value and grad are F32; each moment is F32 or BF16 (Megatron's precision-aware optimizer,
// --exp-avg-dtype / --exp-avg-sq-dtype: a BF16 moment is read as fp32, the step's arithmetic is all
// fp32, the update uses the fp32 moment, and only its store rounds to bf16, nearest even). grad is
// multiplied by clip first. compute, when defined, receives the updated value in its own dtype (the
// bf16 copy the CUDA backend computes with).
#pragma once

#include "ops/device_context.h"

namespace quill::ops {

struct AdamWStep {
  float lr = 0, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0;
  float clip = 1;              // gradient multiplier from clipping
  double bias_correction1 = 1; // 1 - beta1^t
  double bias_correction2 = 1; // 1 - beta2^t
};

void adamw_update(const DeviceContext& ctx, const Tensor& value, const Tensor& grad, const Tensor& exp_avg,
                  const Tensor& exp_avg_sq, const Tensor& compute, const AdamWStep& step);

}  // namespace quill::ops
