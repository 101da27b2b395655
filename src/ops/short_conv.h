// Depthwise causal short convolution with residual, as transformers' InklingShortConvolution:
//   y[t, c] = x[t, c] + sum_{j=0}^{K-1} w[c, j] * x[t - (K-1) + j, c]      (x[negative] = 0)
// Each row is one sequence: t runs over the whole row, nothing resets inside it.
// Shapes: x_TC [T, C], w_CK [C, K] (the checkpoint's [C, 1, K] viewed as [C, K]), y_TC [T, C].
// Computed in fp32 (or wider). Backward: dx overwritten, dw accumulated.
//
// The halo (sequence parallelism, parallel/sp_halo.h): a chunk of a row on one rank reads the K-1 positions
// before it from the previous ranks. Given halo_HC [K-1, C] (those positions, zeros before the row's start),
// x[t] for t < 0 is halo[K-1 + t] and its taps are added (zeros too); without one they are skipped. The
// backward then also writes dhalo_HC [K-1, C] (overwritten): the gradient of this chunk's outputs with respect
// to the halo positions, dhalo[i, c] = sum_{j: 0 <= i-j < T} w[c, j] * dy[i - j, c] (no residual term: those
// positions' own outputs are another rank's), and dw includes the halo's products. Taking the halo apart
// saves the copy of the chunk behind it (a [K-1+T, C] tensor per convolution before: 2 x 12 us per layer and
// direction at a seed rank, with as many small ops around it).
#pragma once

#include "ops/device_context.h"

namespace quill::ops {

void short_conv_forward(const DeviceContext& ctx, const Tensor& x_TC, const Tensor& w_CK, const Tensor& y_TC,
                        const Tensor& halo_HC = Tensor());
void short_conv_backward(const DeviceContext& ctx, const Tensor& x_TC, const Tensor& w_CK, const Tensor& dy_TC,
                         const Tensor& dx_TC, const Tensor& dw_CK, const Tensor& halo_HC = Tensor(),
                         const Tensor& dhalo_HC = Tensor());

}  // namespace quill::ops
