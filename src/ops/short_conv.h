// Depthwise causal short convolution with residual, as transformers' InklingShortConvolution:
//   y[t, c] = x[t, c] + sum_{j=0}^{K-1} w[c, j] * x[t - (K-1) + j, c]      (x[negative] = 0)
// Each row is one sequence: t runs over the whole row, nothing resets inside it.
// Shapes: x_TC [T, C], w_CK [C, K] (the checkpoint's [C, 1, K] viewed as [C, K]), y_TC [T, C].
// Computed in fp32 (or wider). Backward: dx overwritten, dw accumulated.
#pragma once

#include "ops/device_context.h"

namespace quill::ops {

void short_conv_forward(const DeviceContext& ctx, const Tensor& x_TC, const Tensor& w_CK, const Tensor& y_TC);
void short_conv_backward(const DeviceContext& ctx, const Tensor& x_TC, const Tensor& w_CK, const Tensor& dy_TC,
                         const Tensor& dx_TC, const Tensor& dw_CK);

}  // namespace quill::ops
