#include "model/decoder_layer.h"

#include <fmt/format.h>

#include "model/layer_util.h"
#include "ops/elementwise.h"
#include "ops/rmsnorm.h"
#include "ops/short_conv.h"

namespace quill {

DecoderLayer::DecoderLayer(const InklingConfig& c, int64_t layer, ParamTable& params)
    : eps_(c.rms_norm_eps), attn_(c, layer, params) {
  const std::string p = fmt::format("model.llm.layers.{}.", layer);
  attn_norm_ = &params.at(p + "attn_norm.weight");
  mlp_norm_ = &params.at(p + "mlp_norm.weight");
  attn_conv_ = &params.at(p + "attn_sconv.weight");
  mlp_conv_ = &params.at(p + "mlp_sconv.weight");
  if (c.is_moe(layer)) moe_.emplace(c, layer, params);
  else dense_.emplace(c, layer, params);
}

Tensor DecoderLayer::forward(const DeviceContext& ctx, const Tensor& h_TD, Saved& s, const Tensor& replay_topk) const {
  const int64_t T = h_TD.dim(0), D = h_TD.dim(1);
  s.h_in = h_TD;
  s.a_norm = new_activation(ctx, {T, D});
  s.rstd_a = new_tensor(ctx, {T}, DType::F32);
  ops::rmsnorm_forward(ctx, h_TD, attn_norm_->compute, eps_, s.a_norm, s.rstd_a);
  s.attn_out = attn_.forward(ctx, s.a_norm, s.attn);
  s.h_mid = new_activation(ctx, {T, D});
  ops::short_conv_forward(ctx, s.attn_out, conv_weight(attn_conv_->compute), s.h_mid);
  ops::add_inplace(ctx, s.h_mid, h_TD);

  s.m_norm = new_activation(ctx, {T, D});
  s.rstd_m = new_tensor(ctx, {T}, DType::F32);
  ops::rmsnorm_forward(ctx, s.h_mid, mlp_norm_->compute, eps_, s.m_norm, s.rstd_m);
  s.mlp_out = moe_ ? moe_->forward(ctx, s.m_norm, s.moe, replay_topk) : dense_->forward(ctx, s.m_norm, s.dense);
  Tensor h_out = new_activation(ctx, {T, D});
  ops::short_conv_forward(ctx, s.mlp_out, conv_weight(mlp_conv_->compute), h_out);
  ops::add_inplace(ctx, h_out, s.h_mid);
  return h_out;
}

Tensor DecoderLayer::backward(const DeviceContext& ctx, const Saved& s, const Tensor& dh_TD) const {
  const Shape shape = dh_TD.shape();
  // MLP branch: dh_mid = dh + d(mlp_norm input).
  Tensor dmlp = new_activation(ctx, shape);
  ops::short_conv_backward(ctx, s.mlp_out, conv_weight(mlp_conv_->compute), dh_TD, dmlp,
                           conv_weight(grad_target(ctx, *mlp_conv_)));
  Tensor dm = moe_ ? moe_->backward(ctx, s.moe, dmlp) : dense_->backward(ctx, s.dense, dmlp);
  Tensor dh_mid = new_activation(ctx, shape);
  ops::rmsnorm_backward(ctx, s.h_mid, mlp_norm_->compute, s.rstd_m, dm, dh_mid, grad_target(ctx, *mlp_norm_));
  ops::add_inplace(ctx, dh_mid, dh_TD);

  // Attention branch.
  Tensor dattn = new_activation(ctx, shape);
  ops::short_conv_backward(ctx, s.attn_out, conv_weight(attn_conv_->compute), dh_mid, dattn,
                           conv_weight(grad_target(ctx, *attn_conv_)));
  Tensor da = attn_.backward(ctx, s.attn, dattn);
  Tensor dh_in = new_activation(ctx, shape);
  ops::rmsnorm_backward(ctx, s.h_in, attn_norm_->compute, s.rstd_a, da, dh_in, grad_target(ctx, *attn_norm_));
  ops::add_inplace(ctx, dh_in, dh_mid);
  return dh_in;
}

}  // namespace quill
