// The GEMMs of a layer's weight parameter, in the backend's precision or, for a parameter marked FP8
// (Param::fp8, model/fp8_params.h), through the FP8 GEMMs of ops/fp8.h with the weight's per-step
// quantised copy; its weight gradient in FP8 only when Param::fp8_wgrad (--no-fp8-wgrad: from the bf16
// operands). Same shapes and accumulate rules as ops/linear.h and ops/moe.h. `expert` >= 0 takes
// matrix e of a stacked [E, M, K] parameter (the shared experts), -1 the whole parameter.
#pragma once

#include "model/params.h"
#include "ops/device_context.h"

namespace quill {

// Matrix e of a stacked [E, M, K] weight (or of its gradient) as an [M, K] view.
Tensor expert_matrix(const Tensor& w_EMK, int64_t e);

void param_forward(const DeviceContext& ctx, const Tensor& x_NK, const Param& w, const Tensor& y_NM,
                   int64_t expert = -1);
void param_backward_input(const DeviceContext& ctx, const Tensor& dy_NM, const Param& w, const Tensor& dx_NK,
                          bool accumulate = false, int64_t expert = -1);
// dw (p's gradient, or its expert slice) = dy^T x, overwritten or added.
void param_backward_weight(const DeviceContext& ctx, const Tensor& dy_NM, const Tensor& x_NK, const Param& w,
                           const Tensor& dw_MK, bool accumulate);

void param_grouped_forward(const DeviceContext& ctx, const Tensor& x_PK, const Param& w, const Tensor& counts_E,
                           const Tensor& y_PM);
void param_grouped_backward_input(const DeviceContext& ctx, const Tensor& dy_PM, const Param& w, const Tensor& counts_E,
                                  const Tensor& dx_PK);
void param_grouped_backward_weight(const DeviceContext& ctx, const Tensor& dy_PM, const Tensor& x_PK,
                                   const Tensor& counts_E, const Param& w, const Tensor& dw_EMK, bool accumulate);

}  // namespace quill
