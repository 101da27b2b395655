#include "model/param_gemm.h"

#include "model/fp8_params.h"
#include "ops/fp8.h"
#include "ops/linear.h"
#include "ops/moe.h"

namespace quill {
namespace {

Tensor matrix(const Tensor& w_EMK, int64_t e) { return e < 0 ? w_EMK : expert_matrix(w_EMK, e); }
ops::Fp8Tensor fp8_matrix(const DeviceContext& ctx, const Param& w, int64_t e) {
  const ops::Fp8Tensor& all = fp8_weight(ctx, w);
  return e < 0 ? all : ops::fp8_matrix(all, e);
}

}  // namespace

Tensor expert_matrix(const Tensor& w_EMK, int64_t e) {
  return w_EMK.rows(e, e + 1).reshape({w_EMK.dim(1), w_EMK.dim(2)});
}

void param_forward(const DeviceContext& ctx, const Tensor& x_NK, const Param& w, const Tensor& y_NM, int64_t expert) {
  if (w.fp8) return ops::fp8_linear_forward(ctx, x_NK, fp8_matrix(ctx, w, expert), y_NM);
  ops::linear_forward(ctx, x_NK, matrix(w.compute, expert), y_NM);
}

void param_backward_input(const DeviceContext& ctx, const Tensor& dy_NM, const Param& w, const Tensor& dx_NK,
                          bool accumulate, int64_t expert) {
  if (w.fp8) return ops::fp8_linear_backward_input(ctx, dy_NM, fp8_matrix(ctx, w, expert), dx_NK, accumulate);
  ops::linear_backward_input(ctx, dy_NM, matrix(w.compute, expert), dx_NK, accumulate);
}

void param_backward_weight(const DeviceContext& ctx, const Tensor& dy_NM, const Tensor& x_NK, const Param& w,
                           const Tensor& dw_MK, bool accumulate) {
  if (w.fp8_wgrad) return ops::fp8_linear_backward_weight(ctx, dy_NM, x_NK, dw_MK, accumulate);
  ops::linear_backward_weight(ctx, dy_NM, x_NK, dw_MK, accumulate);
}

void param_grouped_forward(const DeviceContext& ctx, const Tensor& x_PK, const Param& w, const Tensor& counts_E,
                           const Tensor& y_PM) {
  if (w.fp8) return ops::fp8_grouped_linear_forward(ctx, x_PK, fp8_weight(ctx, w), counts_E, y_PM);
  ops::grouped_linear_forward(ctx, x_PK, w.compute, counts_E, y_PM);
}

void param_grouped_backward_input(const DeviceContext& ctx, const Tensor& dy_PM, const Param& w, const Tensor& counts_E,
                                  const Tensor& dx_PK) {
  if (w.fp8) return ops::fp8_grouped_linear_backward_input(ctx, dy_PM, fp8_weight(ctx, w), counts_E, dx_PK);
  ops::grouped_linear_backward_input(ctx, dy_PM, w.compute, counts_E, dx_PK);
}

void param_grouped_backward_weight(const DeviceContext& ctx, const Tensor& dy_PM, const Tensor& x_PK,
                                   const Tensor& counts_E, const Param& w, const Tensor& dw_EMK, bool accumulate) {
  if (w.fp8_wgrad) return ops::fp8_grouped_linear_backward_weight(ctx, dy_PM, x_PK, counts_E, dw_EMK, accumulate);
  ops::grouped_linear_backward_weight(ctx, dy_PM, x_PK, counts_E, dw_EMK, accumulate);
}

}  // namespace quill
