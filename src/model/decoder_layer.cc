#include "model/decoder_layer.h"

#include <fmt/format.h>

#include "model/layer_util.h"
#include "ops/elementwise.h"
#include "ops/rmsnorm.h"
#include "ops/short_conv.h"
#include "parallel/sp_halo.h"

namespace quill {

DecoderLayer::DecoderLayer(const InklingConfig& c, int64_t layer, ParamTable& params, const TensorParallel& tp,
                           const ExpertParallel& ep, const RecomputeOptions& recompute)
    : eps_(c.rms_norm_eps), kernel_(c.conv_kernel_size), recompute_norms_(recompute.selective() && recompute.layernorm),
      tp_(tp), attn_(c, layer, params, tp) {
  const std::string p = fmt::format("model.llm.layers.{}.", layer);
  attn_norm_ = &params.at(p + "attn_norm.weight");
  mlp_norm_ = &params.at(p + "mlp_norm.weight");
  attn_conv_ = &params.at(p + "attn_sconv.weight");
  mlp_conv_ = &params.at(p + "mlp_sconv.weight");
  if (c.is_moe(layer)) moe_.emplace(c, layer, params, tp, ep, recompute);
  else dense_.emplace(c, layer, params, tp);
}

Tensor DecoderLayer::residual_conv(const DeviceContext& ctx, const Tensor& x, const Param& w, ConvInput& saved_in) const {
  saved_in.x = x;
  // With sequence parallelism the chunk's convolution reads the K-1 positions before it from the ranks before.
  if (tp_.sequence_parallel) saved_in.halo = gather_halo(ctx, x, kernel_, tp_.comm);
  Tensor y = new_activation(ctx, x.shape());
  ops::short_conv_forward(ctx, x, conv_weight(w.compute), y, saved_in.halo);
  return y;
}

Tensor DecoderLayer::residual_conv_backward(const DeviceContext& ctx, const ConvInput& saved_in, const Param& w,
                                            const Tensor& dy) const {
  Tensor dx = new_activation(ctx, saved_in.x.shape());
  Tensor dhalo;
  if (saved_in.halo.defined()) dhalo = new_activation(ctx, saved_in.halo.shape());
  ops::short_conv_backward(ctx, saved_in.x, conv_weight(w.compute), dy, dx, conv_weight(grad_target(ctx, w)),
                           saved_in.halo, dhalo);
  // The halo positions' gradients go back to their owners; the later ranks' come into dx.
  if (saved_in.halo.defined()) scatter_halo_grad(ctx, dx, dhalo, kernel_, tp_.comm);
  return dx;
}

Tensor DecoderLayer::norm_again(const DeviceContext& ctx, const Tensor& h, const Param& w) const {
  Tensor y = new_activation(ctx, h.shape());
  const Tensor rstd = new_tensor(ctx, {h.dim(0)}, DType::F32);
  ops::rmsnorm_forward(ctx, h, w.compute, eps_, y, rstd);
  return y;
}

Tensor DecoderLayer::forward(const DeviceContext& ctx, const Tensor& h_TD, Saved& s, const Tensor& replay_topk) const {
  const int64_t T = h_TD.dim(0), D = h_TD.dim(1);
  s.h_in = h_TD;
  s.a_norm = new_activation(ctx, {T, D});
  s.rstd_a = new_tensor(ctx, {T}, DType::F32);
  ops::rmsnorm_forward(ctx, h_TD, attn_norm_->compute, eps_, s.a_norm, s.rstd_a);
  const Tensor attn = attn_.forward(ctx, s.a_norm, s.attn);
  // --recompute-modules layernorm: the norm's output and the attention's (gathered) input go; the backward
  // makes them again from h_in.
  if (recompute_norms_) s.a_norm = s.attn.x_TD = Tensor();
  s.h_mid = residual_conv(ctx, attn, *attn_conv_, s.attn_out);
  ops::add_inplace(ctx, s.h_mid, h_TD);

  s.m_norm = new_activation(ctx, {T, D});
  s.rstd_m = new_tensor(ctx, {T}, DType::F32);
  ops::rmsnorm_forward(ctx, s.h_mid, mlp_norm_->compute, eps_, s.m_norm, s.rstd_m);
  const Tensor mlp = moe_ ? moe_->forward(ctx, s.m_norm, s.moe, replay_topk) : dense_->forward(ctx, s.m_norm, s.dense);
  if (recompute_norms_) s.m_norm = s.dense.x_TD = Tensor();  // the MoE block drops its own (MoeBlock::restore_inputs)
  Tensor h_out = residual_conv(ctx, mlp, *mlp_conv_, s.mlp_out);
  ops::add_inplace(ctx, h_out, s.h_mid);
  return h_out;
}

Tensor DecoderLayer::backward(const DeviceContext& ctx, const Saved& s, const Tensor& dh_TD,
                              ExpertWgradTurn expert_wgrad) const {
  const Shape shape = dh_TD.shape();
  // MLP branch: dh_mid = dh + d(mlp_norm input).
  const Tensor dmlp = residual_conv_backward(ctx, s.mlp_out, *mlp_conv_, dh_TD);
  Tensor dm;
  if (!recompute_norms_) {
    dm = moe_ ? moe_->backward(ctx, s.moe, dmlp, expert_wgrad) : dense_->backward(ctx, s.dense, dmlp);
  } else {  // the MLP's inputs again from h_mid, alive for its backward only
    const Tensor m = norm_again(ctx, s.h_mid, *mlp_norm_);
    if (moe_) {
      MoeBlock::Saved moe = s.moe;
      moe_->restore_inputs(ctx, m, moe);
      dm = moe_->backward(ctx, moe, dmlp, expert_wgrad);
    } else {
      DenseMlp::Saved dense = s.dense;
      dense_->restore_input(ctx, m, dense);
      dm = dense_->backward(ctx, dense, dmlp);
    }
  }
  Tensor dh_mid = new_activation(ctx, shape);
  ops::rmsnorm_backward(ctx, s.h_mid, mlp_norm_->compute, s.rstd_m, dm, dh_mid, grad_target(ctx, *mlp_norm_));
  ops::add_inplace(ctx, dh_mid, dh_TD);

  // Attention branch.
  const Tensor dattn = residual_conv_backward(ctx, s.attn_out, *attn_conv_, dh_mid);
  Tensor da;
  if (!recompute_norms_) {
    da = attn_.backward(ctx, s.attn, dattn);
  } else {  // the attention's input again from h_in (all T rows under sequence parallelism)
    AttentionBlock::Saved attn = s.attn;
    if (tp_.comm_overlap) {  // gathered by the block, behind its output gradient's gather
      da = attn_.backward(ctx, attn, dattn, norm_again(ctx, s.h_in, *attn_norm_));
    } else {
      attn.x_TD = tp_.gather_input(ctx, norm_again(ctx, s.h_in, *attn_norm_));
      da = attn_.backward(ctx, attn, dattn);
    }
  }
  Tensor dh_in = new_activation(ctx, shape);
  ops::rmsnorm_backward(ctx, s.h_in, attn_norm_->compute, s.rstd_a, da, dh_in, grad_target(ctx, *attn_norm_));
  ops::add_inplace(ctx, dh_in, dh_mid);
  return dh_in;
}

}  // namespace quill
