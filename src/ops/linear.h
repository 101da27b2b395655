// Linear without bias, as torch's nn.Linear: y = x * w^T.
// Shapes: x_NK [N, K], w_MK [M, K], y_NM [N, M].
// Backward: dx = dy * w (overwritten, or added when accumulate), dw += dy^T * x (always accumulated).
#pragma once

#include "ops/device_context.h"

namespace quill::ops {

void linear_forward(const DeviceContext& ctx, const Tensor& x_NK, const Tensor& w_MK, const Tensor& y_NM);
void linear_backward_input(const DeviceContext& ctx, const Tensor& dy_NM, const Tensor& w_MK, const Tensor& dx_NK,
                           bool accumulate = false);
void linear_backward_weight(const DeviceContext& ctx, const Tensor& dy_NM, const Tensor& x_NK, const Tensor& dw_MK);

}  // namespace quill::ops
