#include "model/attention_block.h"

#include <fmt/format.h>

#include "model/layer_util.h"
#include "ops/columns.h"
#include "ops/elementwise.h"
#include "ops/fp8.h"
#include "ops/linear.h"
#include "ops/rmsnorm.h"
#include "ops/short_conv.h"

namespace quill {

AttentionBlock::AttentionBlock(const InklingConfig& c, int64_t layer, ParamTable& params, const TensorParallel& tp)
    : H_(c.heads(layer)), G_(c.kv_heads(layer)), d_(c.layer_head_dim(layer)), R_(c.d_rel), eps_(c.rms_norm_eps),
      tp_(tp) {
  attn_.window = c.window(layer);
  attn_.scale = 1.0 / static_cast<double>(d_);  // q and k are RMS-normed per head: 1/d, not 1/sqrt(d)
  attn_.log_scaling = c.log_scaling && !c.is_local(layer);
  attn_.log_floor = c.log_scaling_n_floor;
  attn_.log_alpha = c.log_scaling_alpha;
  const std::string p = fmt::format("model.llm.layers.{}.attn.", layer);
  wq_ = &params.at(p + "wq_du.weight");
  wk_ = &params.at(p + "wk_dv.weight");
  wv_ = &params.at(p + "wv_dv.weight");
  wr_ = &params.at(p + "wr_du.weight");
  wo_ = &params.at(p + "wo_ud.weight");
  q_norm_ = &params.at(p + "q_norm.weight");
  k_norm_ = &params.at(p + "k_norm.weight");
  table_ = &params.at(p + "rel_logits_proj.proj");
  k_conv_ = &params.at(p + "k_sconv.weight");
  v_conv_ = &params.at(p + "v_sconv.weight");
  H_ = wq_->shape[0] / d_;  // this rank's heads
  G_ = wk_->shape[0] / d_;
}

Tensor AttentionBlock::forward(const DeviceContext& ctx, const Tensor& x_region, Saved& s) const {
  // The four column-parallel projections of rows [b, e) of the gathered input (allocated with the first rows).
  const int64_t T = tp_.sequence_parallel ? x_region.dim(0) * tp_.size : x_region.dim(0);
  const ops::Fp8Tensor* fp8_stack = stacked_fp8(ctx);
  bool allocated = false;
  auto project = [&](const Tensor& x_TD, int64_t b, int64_t e) {
    if (!allocated) {
      allocated = true;
      s.q_TX = new_activation(ctx, {T, H_ * d_});
      s.k0_TY = new_activation(ctx, {T, G_ * d_});
      s.v0_TY = new_activation(ctx, {T, G_ * d_});
      s.r_TZ = new_activation(ctx, {T, H_ * R_});
    }
    const Tensor x = x_TD.rows(b, e);
    if (fp8_stack) {  // one FP8 GEMM into [rows, Z], its four column blocks copied out
      const Tensor y = new_activation(ctx, {e - b, fp8_stack->codes.dim(0)});
      ops::fp8_linear_forward(ctx, x, *fp8_stack, y);
      int64_t col = 0;
      for (const Tensor* out : {&s.q_TX, &s.k0_TY, &s.v0_TY, &s.r_TZ}) {
        ops::get_columns(ctx, y, col, out->rows(b, e));
        col += out->dim(1);
      }
      return;
    }
    param_forward(ctx, x, *wq_, s.q_TX.rows(b, e));
    param_forward(ctx, x, *wk_, s.k0_TY.rows(b, e));
    param_forward(ctx, x, *wv_, s.v0_TY.rows(b, e));
    param_forward(ctx, x, *wr_, s.r_TZ.rows(b, e));
  };
  // --tp-comm-overlap: the gather's chunks arrive by a ring while the projections of the ones here run.
  Tensor x_TD;
  if (tp_.comm_overlap) {
    x_TD = tp_.gather_input_pipelined(ctx, x_region,
                                      [&](const Tensor& full, int64_t b, int64_t e) { project(full, b, e); });
  } else {
    x_TD = tp_.gather_input(ctx, x_region);
    project(x_TD, 0, T);
  }
  s.x_TD = x_TD;

  s.k1_TY = new_activation(ctx, {T, G_ * d_});
  s.v1_TY = new_activation(ctx, {T, G_ * d_});
  ops::short_conv_forward(ctx, s.k0_TY, conv_weight(k_conv_->compute), s.k1_TY);
  ops::short_conv_forward(ctx, s.v0_TY, conv_weight(v_conv_->compute), s.v1_TY);

  s.qn_TX = new_activation(ctx, {T, H_ * d_});
  s.kn_TY = new_activation(ctx, {T, G_ * d_});
  s.rstd_q = new_tensor(ctx, {T * H_}, DType::F32);
  s.rstd_k = new_tensor(ctx, {T * G_}, DType::F32);
  ops::rmsnorm_forward(ctx, s.q_TX.reshape({T * H_, d_}), q_norm_->compute, eps_, s.qn_TX.reshape({T * H_, d_}), s.rstd_q);
  ops::rmsnorm_forward(ctx, s.k1_TY.reshape({T * G_, d_}), k_norm_->compute, eps_, s.kn_TY.reshape({T * G_, d_}),
                       s.rstd_k);

  s.o_TX = new_activation(ctx, {T, H_ * d_});
  s.lse_HT = new_tensor(ctx, {H_, T}, DType::F32);
  ops::attention_forward(ctx, s.qn_TX.reshape({T, H_, d_}), s.kn_TY.reshape({T, G_, d_}), s.v1_TY.reshape({T, G_, d_}),
                         s.r_TZ.reshape({T, H_, R_}), table_->compute, attn_, s.o_TX.reshape({T, H_, d_}), s.lse_HT);

  // --tp-comm-overlap: the output's reduce-scatter in two pieces, the first beside the second's projection.
  auto project_out = [&](const Tensor& dst, int64_t b, int64_t e) { param_forward(ctx, s.o_TX.rows(b, e), *wo_, dst); };
  if (tp_.comm_overlap) return tp_.reduce_output_pipelined(ctx, T, x_TD.dim(1), ctx.activation, project_out);
  Tensor out_TD = new_activation(ctx, {T, x_TD.dim(1)});
  project_out(out_TD, 0, T);
  return tp_.reduce_output(ctx, out_TD);
}

Tensor AttentionBlock::backward(const DeviceContext& ctx, const Saved& s, const Tensor& dout_region,
                                Tensor x_region_again) const {
  const int64_t T = s.o_TX.dim(0);
  const int64_t D = x_region_again.defined() ? x_region_again.dim(1) : s.x_TD.dim(1);
  Tensor dout_TD, do_TX;
  if (tp_.comm_overlap) {
    // --tp-comm-overlap: the output gradient's all-gather (reduce_output_backward) as a ring, wo's input
    // gradient of each chunk while the next travels; wo's weight gradient, which needs every row, after.
    // (do_TX is allocated after the gathered rows, as without the flag.)
    dout_TD = tp_.gather_input_pipelined(ctx, dout_region, [&](const Tensor& full, int64_t b, int64_t e) {
      if (!do_TX.defined()) do_TX = new_activation(ctx, {T, H_ * d_});
      param_backward_input(ctx, full.rows(b, e), *wo_, do_TX.rows(b, e));
    });
    write_weight_grad(ctx, dout_TD, s.o_TX, *wo_);
  } else {
    dout_TD = tp_.reduce_output_backward(ctx, dout_region);
    do_TX = new_activation(ctx, {T, H_ * d_});
    write_weight_grad(ctx, dout_TD, s.o_TX, *wo_);
    param_backward_input(ctx, dout_TD, *wo_, do_TX);
  }
  // The input made again: its gather starts behind the output gradient's (x_region_again's comment).
  PendingTp x_gather;
  if (x_region_again.defined()) {
    x_gather = tp_.start_gather_input(ctx, x_region_again);
    x_region_again = Tensor();  // held by x_gather until its wait
  }

  Tensor dqn = new_activation(ctx, {T, H_ * d_}), dkn = new_activation(ctx, {T, G_ * d_});
  Tensor dv1 = new_activation(ctx, {T, G_ * d_}), dr = new_activation(ctx, {T, H_ * R_});
  ops::attention_backward(ctx, s.qn_TX.reshape({T, H_, d_}), s.kn_TY.reshape({T, G_, d_}), s.v1_TY.reshape({T, G_, d_}),
                          s.r_TZ.reshape({T, H_, R_}), table_->compute, attn_, s.o_TX.reshape({T, H_, d_}), s.lse_HT,
                          do_TX.reshape({T, H_, d_}), dqn.reshape({T, H_, d_}), dkn.reshape({T, G_, d_}),
                          dv1.reshape({T, G_, d_}), dr.reshape({T, H_, R_}),
                          table_->grad.defined() ? grad_target(ctx, *table_) : Tensor());  // frozen: not computed

  Tensor dq = new_activation(ctx, {T, H_ * d_}), dk1 = new_activation(ctx, {T, G_ * d_});
  ops::rmsnorm_backward(ctx, s.q_TX.reshape({T * H_, d_}), q_norm_->compute, s.rstd_q, dqn.reshape({T * H_, d_}),
                        dq.reshape({T * H_, d_}), grad_target(ctx, *q_norm_));
  ops::rmsnorm_backward(ctx, s.k1_TY.reshape({T * G_, d_}), k_norm_->compute, s.rstd_k, dkn.reshape({T * G_, d_}),
                        dk1.reshape({T * G_, d_}), grad_target(ctx, *k_norm_));

  Tensor dk0 = new_activation(ctx, {T, G_ * d_}), dv0 = new_activation(ctx, {T, G_ * d_});
  ops::short_conv_backward(ctx, s.k0_TY, conv_weight(k_conv_->compute), dk1, dk0, conv_weight(grad_target(ctx, *k_conv_)));
  ops::short_conv_backward(ctx, s.v0_TY, conv_weight(v_conv_->compute), dv1, dv0, conv_weight(grad_target(ctx, *v_conv_)));

  // The four projections as one GEMM each way when their weights lie back to back (stacked_weights):
  // their gradients side by side in one [T, Z] tensor, so that dx is written once instead of read and
  // written by four accumulating GEMMs (docs/decisions/stacked-projections.md).
  const Tensor w_stacked = stacked_weights();
  const ops::Fp8Tensor* fp8_stack = stacked_fp8(ctx);
  Tensor d_TZ;
  if (w_stacked.defined() || fp8_stack) {
    d_TZ = new_activation(ctx, {T, H_ * d_ + 2 * G_ * d_ + H_ * R_});
    int64_t col = 0;
    for (const Tensor* part : {&dq, &dk0, &dv0, &dr}) {
      ops::set_columns(ctx, d_TZ, col, *part);
      col += part->dim(1);
    }
  }
  Tensor dx_TD = new_activation(ctx, {T, D});
  if (w_stacked.defined()) {
    ops::linear_backward_input(ctx, d_TZ, w_stacked, dx_TD, /*accumulate=*/false);
  } else if (fp8_stack) {
    ops::fp8_linear_backward_input(ctx, d_TZ, *fp8_stack, dx_TD, /*accumulate=*/false);
  } else {
    param_backward_input(ctx, dq, *wq_, dx_TD);
    param_backward_input(ctx, dk0, *wk_, dx_TD, /*accumulate=*/true);
    param_backward_input(ctx, dv0, *wv_, dx_TD, true);
    param_backward_input(ctx, dr, *wr_, dx_TD, true);
  }
  // --tp-comm-overlap: the input gradient is final here; its reduce-scatter runs beside the weight
  // gradients, which do not read it.
  PendingTp dx;
  if (tp_.comm_overlap) dx = tp_.start_gather_input_backward(ctx, dx_TD);
  const Tensor x_TD = x_gather.out.defined() ? TensorParallel::finish(x_gather) : s.x_TD;
  const Tensor g_stacked = d_TZ.defined() ? stacked_grads() : Tensor();
  if (g_stacked.defined()) {
    const bool accumulate = !wq_->grad_unset;
    for (const Param* w : {wq_, wk_, wv_, wr_}) w->grad_unset = false;
    if (wq_->fp8_wgrad) ops::fp8_linear_backward_weight(ctx, d_TZ, x_TD, g_stacked, accumulate);
    else ops::linear_backward_weight(ctx, d_TZ, x_TD, g_stacked, accumulate);
  } else {
    write_weight_grad(ctx, dq, x_TD, *wq_);
    write_weight_grad(ctx, dk0, x_TD, *wk_);
    write_weight_grad(ctx, dv0, x_TD, *wv_);
    write_weight_grad(ctx, dr, x_TD, *wr_);
  }
  return tp_.comm_overlap ? TensorParallel::finish(dx) : tp_.gather_input_backward(ctx, dx_TD);
}

Tensor AttentionBlock::stacked_weights() const {
  for (const Param* w : {wq_, wk_, wv_, wr_})
    if (w->fp8) return Tensor();  // each FP8 matrix has its own quantised copy (model/param_gemm.h)
  return Tensor::joined_rows({wq_->compute, wk_->compute, wv_->compute, wr_->compute});
}

const ops::Fp8Tensor* AttentionBlock::stacked_fp8(const DeviceContext& ctx) const {
  const std::vector<const Param*> parts = {wq_, wk_, wv_, wr_};
  if (!StackedFp8Copy::stacks(parts)) return nullptr;
  if (!Tensor::joined_rows({wq_->grad, wk_->grad, wv_->grad, wr_->grad}).defined()) return nullptr;
  return &fp8_stack_.get(ctx, parts);
}

Tensor AttentionBlock::stacked_grads() const {
  for (const Param* w : {wk_, wv_, wr_})
    if (w->grad_unset != wq_->grad_unset) return Tensor();  // one write rule for the four (layer_util.h)
  return Tensor::joined_rows({wq_->grad, wk_->grad, wv_->grad, wr_->grad});
}

}  // namespace quill
