// Linear without bias, as torch's nn.Linear: y = x * w^T.
// Shapes: x_NK [N, K], w_MK [M, K], y_NM [N, M].
// Backward: dx = dy * w and dw = dy^T * x, each overwritten, or added to the tensor when accumulate
// (dx overwrites by default, dw accumulates by default: gradients add up over a global batch).
#pragma once

#include "ops/device_context.h"

namespace quill::ops {

void linear_forward(const DeviceContext& ctx, const Tensor& x_NK, const Tensor& w_MK, const Tensor& y_NM);
void linear_backward_input(const DeviceContext& ctx, const Tensor& dy_NM, const Tensor& w_MK, const Tensor& dx_NK,
                           bool accumulate = false);
void linear_backward_weight(const DeviceContext& ctx, const Tensor& dy_NM, const Tensor& x_NK, const Tensor& dw_MK,
                            bool accumulate = true);

}  // namespace quill::ops
