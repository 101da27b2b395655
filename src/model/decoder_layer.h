// One Inkling decoder layer (transformers' InklingDecoderLayer), pre-norm with residual short
// convolutions on both branches:
//   h += attn_sconv(attn(attn_norm(h)));   h += mlp_sconv(mlp(mlp_norm(h)))
// The MLP is dense or MoE by the config's per-layer type. Under tensor parallelism the norms, the
// residual adds and both residual convolutions run on the sequence region (parallel/
// tensor_parallel.h); with sequence parallelism a convolution over the rank's chunk reads the
// previous positions' halo from the ranks before it (parallel/sp_halo.h).
#pragma once

#include <memory>
#include <optional>

#include "model/attention_block.h"
#include "model/dense_mlp.h"
#include "model/moe_block.h"

namespace quill {

class DecoderLayer {
 public:
  // recompute: --recompute-granularity selective's modules (model/recompute.h); layernorm is the layer's.
  DecoderLayer(const InklingConfig& config, int64_t layer, ParamTable& params, const TensorParallel& tp = {},
               const ExpertParallel& ep = {}, const RecomputeOptions& recompute = {});

  // A residual convolution's input: the rows of the sequence region and, with sequence parallelism, the K-1
  // positions before them (parallel/sp_halo.h; undefined without).
  struct ConvInput {
    Tensor x, halo;
  };
  struct Saved {
    Tensor h_in, a_norm, rstd_a, h_mid, m_norm, rstd_m;
    ConvInput attn_out, mlp_out;  // the convolutions' inputs
    AttentionBlock::Saved attn;
    DenseMlp::Saved dense;
    MoeBlock::Saved moe;
  };
  Tensor forward(const DeviceContext& ctx, const Tensor& h_TD, Saved& saved, const Tensor& replay_topk = {}) const;
  // expert_wgrad: the MoE block's turn for its routed weight gradients (model/expert_wgrad_pairs.h).
  Tensor backward(const DeviceContext& ctx, const Saved& saved, const Tensor& dh_TD,
                  ExpertWgradTurn expert_wgrad = ExpertWgradTurn::Write) const;

  bool is_moe() const { return moe_.has_value(); }

 private:
  // A residual short convolution of the sequence region: y for x, keeping its input in `saved_in`;
  // and its backward (returns dx, accumulates dw).
  Tensor residual_conv(const DeviceContext& ctx, const Tensor& x, const Param& w, ConvInput& saved_in) const;
  Tensor residual_conv_backward(const DeviceContext& ctx, const ConvInput& saved_in, const Param& w,
                                const Tensor& dy) const;
  // --recompute-modules layernorm: the norm of `h` again (its output; the statistics into a scratch tensor,
  // the saved ones serve the norm's backward), as the forward made it.
  Tensor norm_again(const DeviceContext& ctx, const Tensor& h, const Param& w) const;

  double eps_;
  int64_t kernel_;
  bool recompute_norms_;
  TensorParallel tp_;
  Param *attn_norm_, *mlp_norm_, *attn_conv_, *mlp_conv_;
  AttentionBlock attn_;
  std::optional<DenseMlp> dense_;
  std::optional<MoeBlock> moe_;
};

}  // namespace quill
