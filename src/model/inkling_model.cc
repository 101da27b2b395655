#include "model/inkling_model.h"

#include "base/error.h"
#include "model/layer_util.h"
#include "ops/cross_entropy.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/rmsnorm.h"

namespace quill {

InklingModel::InklingModel(const InklingConfig& config, ParamTable& params, const DeviceContext& ctx,
                           const ParallelContext& parallel, ModelOptions options)
    : config_(config), params_(params), ctx_(ctx), parallel_(parallel), options_(options) {
  QUILL_CHECK(parallel.single(), "InklingModel: tensor/expert/pipeline parallel layouts are not implemented yet");
  for (int64_t i = 0; i < config.num_layers; ++i) layers_.emplace_back(config, i, params);
  embed_ = &params.at("model.llm.embed.weight");
  embed_norm_ = &params.at("model.llm.embed_norm.weight");
  norm_ = &params.at("model.llm.norm.weight");
  unembed_ = &params.at("model.llm.unembed.weight");
}

int64_t InklingModel::loss_vocab() const {
  return options_.loss_over_padded_vocab ? config_.vocab_size : config_.unpadded_vocab_size;
}

int64_t InklingModel::supervised_targets(const uint8_t* mask, int64_t T) {
  int64_t n = 0;
  for (int64_t t = 1; t < T; ++t) n += mask[t] ? 1 : 0;
  return n;
}

RowResult InklingModel::train_row(const int32_t* tokens, const uint8_t* mask, int64_t T, double grad_scale,
                                  Tensor* logits_out) {
  return run(tokens, mask, T, grad_scale, true, logits_out);
}

RowResult InklingModel::eval_row(const int32_t* tokens, const uint8_t* mask, int64_t T) {
  return run(tokens, mask, T, 0.0, false, nullptr);
}

RowResult InklingModel::run(const int32_t* tokens, const uint8_t* mask, int64_t T, double grad_scale, bool backward,
                            Tensor* logits_out) {
  QUILL_CHECK(T >= 2, "a row needs at least 2 tokens, got {}", T);
  const int64_t D = config_.hidden_size, V = config_.vocab_size;
  Tensor ids = Tensor::empty({T}, DType::I32);
  Tensor targets = Tensor::empty({T}, DType::I32);
  Tensor weights = Tensor::empty({T}, DType::F32);
  for (int64_t t = 0; t < T; ++t) {
    ids.data_as<int32_t>()[t] = tokens[t];
    const bool has_target = t + 1 < T;
    targets.data_as<int32_t>()[t] = has_target ? tokens[t + 1] : 0;
    weights.data_as<float>()[t] = has_target && mask[t + 1] ? 1.0f : 0.0f;
  }

  // Embedding and its norm.
  Tensor emb = new_activation(ctx_, {T, D}), h = new_activation(ctx_, {T, D}), rstd0 = new_activation(ctx_, {T});
  ops::embedding_forward(ctx_, embed_->value, ids, emb);
  ops::rmsnorm_forward(ctx_, emb, embed_norm_->value, config_.rms_norm_eps, h, rstd0);

  std::vector<DecoderLayer::Saved> saved(layers_.size());
  if (routing_ == Routing::Record) recorded_topk_.assign(layers_.size(), Tensor());
  QUILL_CHECK(routing_ != Routing::Replay || recorded_topk_.size() == layers_.size(),
              "routing replay: no recorded routing to replay");
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Tensor replay = routing_ == Routing::Replay ? recorded_topk_[i] : Tensor();
    h = layers_[i].forward(ctx_, h, saved[i], replay);
    if (routing_ == Routing::Record && layers_[i].is_moe()) recorded_topk_[i] = saved[i].moe.topk_Tk;
  }

  // Head: final norm, muP division, unembedding.
  Tensor hn = new_activation(ctx_, {T, D}), rstd_f = new_activation(ctx_, {T});
  ops::rmsnorm_forward(ctx_, h, norm_->value, config_.rms_norm_eps, hn, rstd_f);
  ops::scale_inplace(ctx_, hn, 1.0 / config_.logits_mup_width_multiplier);
  Tensor logits = new_activation(ctx_, {T, V});
  ops::linear_forward(ctx_, hn, unembed_->value, logits);

  RowResult result;
  result.supervised = supervised_targets(mask, T);
  Tensor dlogits = new_activation(ctx_, {T, V});
  result.loss_sum = ops::cross_entropy_forward_backward(ctx_, logits, targets, weights, loss_vocab(), grad_scale, dlogits);
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (!layers_[i].is_moe()) continue;
    const Tensor& counts = saved[i].moe.counts_E;
    result.expert_tokens.emplace_back(counts.data_as<int64_t>(), counts.data_as<int64_t>() + counts.numel());
  }
  if (logits_out) {
    *logits_out = new_activation(ctx_, {T, loss_vocab()});
    for (int64_t t = 0; t < T; ++t)
      for (int64_t v = 0; v < loss_vocab(); ++v) logits_out->data_as<float>()[t * loss_vocab() + v] = logits.data_as<float>()[t * V + v];
  }
  if (!backward) return result;

  // Backward through the head.
  Tensor dhn = new_activation(ctx_, {T, D});
  ops::linear_backward_weight(ctx_, dlogits, hn, grad_target(ctx_, *unembed_));
  ops::linear_backward_input(ctx_, dlogits, unembed_->value, dhn);
  ops::scale_inplace(ctx_, dhn, 1.0 / config_.logits_mup_width_multiplier);
  Tensor dh = new_activation(ctx_, {T, D});
  ops::rmsnorm_backward(ctx_, h, norm_->value, rstd_f, dhn, dh, grad_target(ctx_, *norm_));

  for (size_t i = layers_.size(); i-- > 0;) {
    dh = layers_[i].backward(ctx_, saved[i], dh);
    saved[i] = DecoderLayer::Saved{};  // release the layer's activations as soon as they are used
  }

  Tensor demb = new_activation(ctx_, {T, D});
  ops::rmsnorm_backward(ctx_, emb, embed_norm_->value, rstd0, dh, demb, grad_target(ctx_, *embed_norm_));
  if (embed_->grad.defined()) ops::embedding_backward(ctx_, ids, demb, embed_->grad);
  return result;
}

}  // namespace quill
