// One Inkling decoder layer (transformers' InklingDecoderLayer), pre-norm with residual short
// convolutions on both branches:
//   h += attn_sconv(attn(attn_norm(h)));   h += mlp_sconv(mlp(mlp_norm(h)))
// The MLP is dense or MoE by the config's per-layer type.
#pragma once

#include <memory>
#include <optional>

#include "model/attention_block.h"
#include "model/dense_mlp.h"
#include "model/moe_block.h"

namespace quill {

class DecoderLayer {
 public:
  DecoderLayer(const InklingConfig& config, int64_t layer, ParamTable& params);

  struct Saved {
    Tensor h_in, a_norm, rstd_a, attn_out, h_mid, m_norm, rstd_m, mlp_out;
    AttentionBlock::Saved attn;
    DenseMlp::Saved dense;
    MoeBlock::Saved moe;
  };
  Tensor forward(const DeviceContext& ctx, const Tensor& h_TD, Saved& saved, const Tensor& replay_topk = {}) const;
  Tensor backward(const DeviceContext& ctx, const Saved& saved, const Tensor& dh_TD) const;

  bool is_moe() const { return moe_.has_value(); }

 private:
  double eps_;
  Param *attn_norm_, *mlp_norm_, *attn_conv_, *mlp_conv_;
  AttentionBlock attn_;
  std::optional<DenseMlp> dense_;
  std::optional<MoeBlock> moe_;
};

}  // namespace quill
