// Small element-wise ops the layers need between the big ones.
#pragma once

#include "ops/device_context.h"

namespace quill::ops {

void copy(const DeviceContext& ctx, const Tensor& src, const Tensor& dst);            // dst = src
void add_inplace(const DeviceContext& ctx, const Tensor& y, const Tensor& x);          // y += x
void scale_inplace(const DeviceContext& ctx, const Tensor& y, double s);               // y *= s
// y_ND[n] = x_ND[n] * s (s is a [1] tensor); ds += sum(dy * x) in backward.
void scale_by_scalar(const DeviceContext& ctx, const Tensor& x, const Tensor& s_1, const Tensor& y);
void scale_by_scalar_backward(const DeviceContext& ctx, const Tensor& x, const Tensor& s_1, const Tensor& dy,
                              const Tensor& dx, const Tensor& ds_1);
// y_ND[n, :] = x_ND[n, :] * s_N[n] (per-row weights; the shared experts' gammas).
void scale_rows(const DeviceContext& ctx, const Tensor& x_ND, const Tensor& s_N, const Tensor& y_ND);
// dx = dy * s (overwritten); ds[n] = dy[n] . x[n] (overwritten).
void scale_rows_backward(const DeviceContext& ctx, const Tensor& x_ND, const Tensor& s_N, const Tensor& dy_ND,
                         const Tensor& dx_ND, const Tensor& ds_N);
// Sum of squares in double, for gradient norms.
double sum_squares(const DeviceContext& ctx, const Tensor& x);

}  // namespace quill::ops
