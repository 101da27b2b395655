// RMSNorm over the last dimension: y = w * x / sqrt(mean(x^2) + eps), statistics in fp32 (or the
// element type when wider). Shapes: x_ND [N, D], w_D [D], y_ND [N, D], rstd_N [N] (saved for backward;
// same dtype as x on the CPU reference, fp32 on CUDA). The per-head q/k norm is this op on [T*H, head_dim].
// Backward: dx overwritten, dw accumulated.
#pragma once

#include "ops/device_context.h"

namespace quill::ops {

void rmsnorm_forward(const DeviceContext& ctx, const Tensor& x_ND, const Tensor& w_D, double eps, const Tensor& y_ND,
                     const Tensor& rstd_N);
void rmsnorm_backward(const DeviceContext& ctx, const Tensor& x_ND, const Tensor& w_D, const Tensor& rstd_N,
                      const Tensor& dy_ND, const Tensor& dx_ND, const Tensor& dw_D);

}  // namespace quill::ops
