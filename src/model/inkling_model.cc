#include "model/inkling_model.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "ops/convert.h"
#include "model/layer_util.h"
#include "ops/cross_entropy.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/rmsnorm.h"

namespace quill {

InklingModel::InklingModel(const InklingConfig& config, ParamTable& params, const DeviceContext& ctx,
                           ModelOptions options)
    : config_(config), params_(params), ctx_(ctx), options_(options),
      own_layout_(std::make_unique<Layout>(Layout::single(config.num_layers))), layout_(own_layout_.get()) {
  init();
}

InklingModel::InklingModel(const InklingConfig& config, ParamTable& params, const DeviceContext& ctx,
                           const Layout& layout, ModelOptions options)
    : config_(config), params_(params), ctx_(ctx), options_(options), layout_(&layout) {
  init();
}

void InklingModel::check_layout(const LayoutSpec& s) {
  QUILL_CHECK(s.tp == 1 && s.cp == 1 && s.pp == 1 && s.ep == 1 && s.etp == 1,
              "layout {}: tensor, context, pipeline and expert parallelism are not implemented yet (only --dp)",
              s.describe());
}

void InklingModel::init() {
  ParamTable& params = params_;
  const InklingConfig& config = config_;
  check_layout(layout_->spec());
  for (int64_t i = 0; i < config.num_layers; ++i) layers_.emplace_back(config, i, params);
  embed_ = &params.at("model.llm.embed.weight");
  embed_norm_ = &params.at("model.llm.embed_norm.weight");
  norm_ = &params.at("model.llm.norm.weight");
  unembed_ = &params.at("model.llm.unembed.weight");
}

void InklingModel::replay_routing(const std::vector<Tensor>& topk_per_layer) {
  QUILL_CHECK(topk_per_layer.size() == layers_.size(), "routing replay: {} layers given, the model has {}",
              topk_per_layer.size(), layers_.size());
  recorded_topk_.assign(layers_.size(), Tensor());
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (!layers_[i].is_moe()) continue;
    const Tensor& host = topk_per_layer[i];
    QUILL_CHECK(host.defined() && host.dtype() == DType::I32 && host.ndim() == 2 &&
                    host.dim(1) == config_.num_experts_per_tok,
                "routing replay: layer {} needs an I32 [T, {}] choice", i, config_.num_experts_per_tok);
    recorded_topk_[i] = Tensor::empty(host.shape(), DType::I32, *ctx_.allocator);
    ops::transfer(ctx_, host, recorded_topk_[i]);
  }
  routing_ = Routing::Replay;
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

namespace {
// Rows of the LM head handled at once: the [chunk, V] logits and their gradient are the largest
// activations of the step (201,024 columns for Inkling). On the CPU (fp32) a chunk of 1,024 rows
// bounds them at 0.8 GB each. On the GPU (bf16) a whole 8,192-token row is 3.3 GB each, and every
// chunk costs one read-modify-write pass over the fp32 unembedding gradient (3.3 GB for Inkling):
// 1,024-row chunks made that pass 8 times per row and the dW GEMM ran at 75% of the matmul
// ceiling (bench/results/2026-11-30-slice-v2), so the GPU takes the whole row.
int64_t head_chunk_rows(const DeviceContext& ctx) { return ctx.device == Device::CPU ? 1024 : 8192; }

Tensor upload(const DeviceContext& ctx, const Tensor& host) {
  if (ctx.device == Device::CPU) return host;
  Tensor t = Tensor::empty(host.shape(), host.dtype(), *ctx.allocator);
  ops::transfer(ctx, host, t);
  return t;
}
}  // namespace

RowResult InklingModel::run(const int32_t* tokens, const uint8_t* mask, int64_t T, double grad_scale, bool backward,
                            Tensor* logits_out) {
  QUILL_CHECK(T >= 2, "a row needs at least 2 tokens, got {}", T);
  const int64_t D = config_.hidden_size, V = config_.vocab_size, VL = loss_vocab();
  Tensor ids_host = Tensor::empty({T}, DType::I32);
  Tensor targets_host = Tensor::empty({T}, DType::I32);
  Tensor weights_host = Tensor::empty({T}, DType::F32);
  for (int64_t t = 0; t < T; ++t) {
    QUILL_CHECK(tokens[t] >= 0 && tokens[t] < V, "token id {} at position {} is outside the vocabulary of {}", tokens[t],
                t, V);
    ids_host.data_as<int32_t>()[t] = tokens[t];
    const bool has_target = t + 1 < T;
    targets_host.data_as<int32_t>()[t] = has_target ? tokens[t + 1] : 0;
    weights_host.data_as<float>()[t] = has_target && mask[t + 1] ? 1.0f : 0.0f;
  }
  const Tensor ids = upload(ctx_, ids_host), targets = upload(ctx_, targets_host), weights = upload(ctx_, weights_host);

  // Embedding and its norm.
  Tensor emb = new_activation(ctx_, {T, D}), h = new_activation(ctx_, {T, D});
  Tensor rstd0 = new_tensor(ctx_, {T}, DType::F32);
  ops::embedding_forward(ctx_, embed_->compute, ids, emb);
  ops::rmsnorm_forward(ctx_, emb, embed_norm_->compute, config_.rms_norm_eps, h, rstd0);

  std::vector<DecoderLayer::Saved> saved(layers_.size());
  if (routing_ == Routing::Record) recorded_topk_.assign(layers_.size(), Tensor());
  QUILL_CHECK(routing_ != Routing::Replay || recorded_topk_.size() == layers_.size(),
              "routing replay: no recorded routing to replay");
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Tensor replay = routing_ == Routing::Replay ? recorded_topk_[i] : Tensor();
    h = layers_[i].forward(ctx_, h, saved[i], replay);
    if (routing_ == Routing::Record && layers_[i].is_moe()) recorded_topk_[i] = saved[i].moe.topk_Tk;
  }

  // Head: final norm, muP division, then unembedding and the loss in chunks of rows, each chunk's
  // logits gradient consumed at once (dhn rows and the unembedding gradient).
  Tensor hn = new_activation(ctx_, {T, D}), rstd_f = new_tensor(ctx_, {T}, DType::F32);
  ops::rmsnorm_forward(ctx_, h, norm_->compute, config_.rms_norm_eps, hn, rstd_f);
  ops::scale_inplace(ctx_, hn, 1.0 / config_.logits_mup_width_multiplier);
  Tensor dhn = new_activation(ctx_, {T, D});
  // The chunks write the same unembedding gradient: the first by grad_write's rule, the rest add.
  GradWrite dunembed = backward ? grad_write(ctx_, *unembed_) : GradWrite{Tensor(), true};
  if (logits_out) *logits_out = Tensor::empty({T, VL}, DType::F32);

  RowResult result;
  result.supervised = supervised_targets(mask, T);
  const int64_t chunk_rows = head_chunk_rows(ctx_);
  for (int64_t r0 = 0; r0 < T; r0 += chunk_rows) {
    const int64_t r1 = std::min(T, r0 + chunk_rows), n = r1 - r0;
    Tensor logits = new_activation(ctx_, {n, V}), dlogits = new_activation(ctx_, {n, V});
    ops::linear_forward(ctx_, hn.rows(r0, r1), unembed_->compute, logits);
    result.loss_sum += ops::cross_entropy_forward_backward(ctx_, logits, targets.rows(r0, r1), weights.rows(r0, r1), VL,
                                                           grad_scale, dlogits);
    if (logits_out) {
      Tensor host = Tensor::empty({n, V}, ctx_.activation);
      ops::transfer(ctx_, logits, host);
      const Tensor f32 = convert_dtype(host, DType::F32);
      for (int64_t t = 0; t < n; ++t)
        std::memcpy(logits_out->data_as<float>() + (r0 + t) * VL, f32.data_as<float>() + t * V, VL * sizeof(float));
    }
    if (!backward) continue;
    ops::linear_backward_weight(ctx_, dlogits, hn.rows(r0, r1), dunembed.grad, dunembed.accumulate);
    dunembed.accumulate = true;
    ops::linear_backward_input(ctx_, dlogits, unembed_->compute, dhn.rows(r0, r1));
  }
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (!layers_[i].is_moe()) continue;
    const Tensor& counts = saved[i].moe.counts_E;
    result.expert_tokens.emplace_back(counts.data_as<int64_t>(), counts.data_as<int64_t>() + counts.numel());
  }
  if (!backward) return result;

  ops::scale_inplace(ctx_, dhn, 1.0 / config_.logits_mup_width_multiplier);
  Tensor dh = new_activation(ctx_, {T, D});
  ops::rmsnorm_backward(ctx_, h, norm_->compute, rstd_f, dhn, dh, grad_target(ctx_, *norm_));

  for (size_t i = layers_.size(); i-- > 0;) {
    dh = layers_[i].backward(ctx_, saved[i], dh);
    saved[i] = DecoderLayer::Saved{};  // release the layer's activations as soon as they are used
  }

  Tensor demb = new_activation(ctx_, {T, D});
  ops::rmsnorm_backward(ctx_, emb, embed_norm_->compute, rstd0, dh, demb, grad_target(ctx_, *embed_norm_));
  if (embed_->grad.defined()) ops::embedding_backward(ctx_, ids, demb, grad_target(ctx_, *embed_));
  return result;
}

}  // namespace quill
