#include "model/dense_mlp.h"

#include <fmt/format.h>

#include "model/layer_util.h"
#include "ops/elementwise.h"
#include "ops/linear.h"
#include "ops/swiglu.h"

namespace quill {

DenseMlp::DenseMlp(const InklingConfig& c, int64_t layer, ParamTable& params, const TensorParallel& tp)
    : F_(c.dense_intermediate_size), tp_(tp) {
  const std::string p = fmt::format("model.llm.layers.{}.mlp.", layer);
  w13_ = &params.at(p + "w13_dn.weight");
  w2_ = &params.at(p + "w2_md.weight");
  scale_ = &params.at(p + "global_scale");
  F_ = w2_->shape[1];  // this rank's columns
}

Tensor DenseMlp::forward(const DeviceContext& ctx, const Tensor& x_region, Saved& s) const {
  const Tensor x_TD = tp_.gather_input(ctx, x_region);
  const int64_t T = x_TD.dim(0), D = x_TD.dim(1);
  s.x_TD = x_TD;
  s.h_T2F = new_activation(ctx, {T, 2 * F_});
  s.a_TF = new_activation(ctx, {T, F_});
  Tensor o_partial = new_activation(ctx, {T, D});
  param_forward(ctx, x_TD, *w13_, s.h_T2F);
  ops::swiglu_forward(ctx, s.h_T2F, s.a_TF);
  param_forward(ctx, s.a_TF, *w2_, o_partial);
  s.o_TD = tp_.reduce_output(ctx, o_partial);
  Tensor y = new_activation(ctx, s.o_TD.shape());
  ops::scale_by_scalar(ctx, s.o_TD, scale_->compute, y);
  return y;
}

void DenseMlp::restore_input(const DeviceContext& ctx, const Tensor& x_region, Saved& s) const {
  s.x_region = x_region;
  if (!tp_.comm_overlap) s.x_TD = tp_.gather_input(ctx, x_region);  // else started by the backward
}

Tensor DenseMlp::backward(const DeviceContext& ctx, const Saved& s, const Tensor& dy_region) const {
  Tensor do_region = new_activation(ctx, dy_region.shape());
  ops::scale_by_scalar_backward(ctx, s.o_TD, scale_->compute, dy_region, do_region, grad_target(ctx, *scale_));
  const Tensor do_TD = tp_.reduce_output_backward(ctx, do_region);
  // Selective layernorm recompute under --tp-comm-overlap: the input gathered again beside W2's and the SwiGLU's
  // backward (after the output gradient's gather, which the same stream would otherwise queue behind it).
  PendingTp x_again;
  if (tp_.comm_overlap && s.x_region.defined()) x_again = tp_.start_gather_input(ctx, s.x_region);
  const int64_t T = do_TD.dim(0);
  Tensor da_TF = new_activation(ctx, {T, F_});
  write_weight_grad(ctx, do_TD, s.a_TF, *w2_);
  param_backward_input(ctx, do_TD, *w2_, da_TF);
  Tensor dh_T2F = new_activation(ctx, {T, 2 * F_});
  ops::swiglu_backward(ctx, s.h_T2F, da_TF, dh_T2F);
  Tensor dx_TD = new_activation(ctx, x_again.out.defined() ? x_again.out.shape() : s.x_TD.shape());
  if (tp_.comm_overlap) {
    // --tp-comm-overlap: the input gradient first; its reduce-scatter runs beside W13's weight gradient.
    param_backward_input(ctx, dh_T2F, *w13_, dx_TD);
    PendingTp dx = tp_.start_gather_input_backward(ctx, dx_TD);
    write_weight_grad(ctx, dh_T2F, x_again.out.defined() ? TensorParallel::finish(x_again) : s.x_TD, *w13_);
    return TensorParallel::finish(dx);
  }
  write_weight_grad(ctx, dh_T2F, s.x_TD, *w13_);
  param_backward_input(ctx, dh_T2F, *w13_, dx_TD);
  return tp_.gather_input_backward(ctx, dx_TD);
}

}  // namespace quill
