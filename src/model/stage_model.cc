#include "model/stage_model.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "model/fp8_params.h"
#include "model/layer_util.h"
#include "ops/convert.h"
#include "ops/cross_entropy.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/rmsnorm.h"

namespace quill {

int64_t supervised_targets(const uint8_t* mask, int64_t T) {
  int64_t n = 0;
  for (int64_t t = 1; t < T; ++t) n += mask[t] ? 1 : 0;
  return n;
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

StageModel::StageModel(const InklingConfig& config, ParamTable& params, const DeviceContext& ctx, int64_t first_layer,
                       int64_t end_layer, ModelOptions options)
    : StageModel(config, params, ctx, first_layer, end_layer, TensorParallel{}, ExpertParallel{}, options) {}

StageModel::StageModel(const InklingConfig& config, ParamTable& params, const DeviceContext& ctx, const Layout& layout,
                       ModelOptions options)
    : StageModel(config, params, ctx, layout.first_layer(), layout.end_layer(), TensorParallel::of(layout),
                 ExpertParallel::of(layout), options) {}

StageModel::StageModel(const InklingConfig& config, ParamTable& params, const DeviceContext& ctx, int64_t first_layer,
                       int64_t end_layer, const TensorParallel& tp, const ExpertParallel& ep, ModelOptions options)
    : config_(config), ctx_(ctx), options_(options), first_layer_(first_layer), end_layer_(end_layer), tp_(tp) {
  QUILL_CHECK(0 <= first_layer && first_layer < end_layer && end_layer <= config.num_layers,
              "stage layers [{}, {}) are not a non-empty range of the model's {} layers", first_layer, end_layer,
              config.num_layers);
  if (options.fp8.enabled()) mark_fp8_params(params, ctx.device, options.fp8.fp8_wgrad());
  ExpertParallel layer_ep = ep;
  layer_ep.overlap_shared_experts = options.shared_expert_overlap;
  layer_ep.delay_wgrad = options.delay_wgrad_compute;
  if (options.overlap_moe_ep_comm && ep.active()) {
    baton_ = std::make_shared<PassBaton>();
    layer_ep.interleave = baton_.get();
    tp_.interleave = baton_.get();  // the layers' tensor-parallel collectives take turns too
  }
  tp_.comm_overlap = options.tp_comm_overlap && tp_.sequence_parallel;
  for (int64_t i = first_layer; i < end_layer; ++i) layers_.emplace_back(config, i, params, tp_, layer_ep, options.recompute);
  group_of_layer_.assign(layers_.size(), {-1, -1});
  for (const auto& [b, e] : recompute_groups(options.recompute, end_layer - first_layer))
    for (int64_t i = b; i < e; ++i) group_of_layer_[static_cast<size_t>(i)] = {b, e};
  if (first_stage()) {
    embed_ = &params.at("model.llm.embed.weight");
    embed_norm_ = &params.at("model.llm.embed_norm.weight");
  }
  if (last_stage()) {
    norm_ = &params.at("model.llm.norm.weight");
    unembed_ = &params.at("model.llm.unembed.weight");
  }
}

int64_t StageModel::loss_vocab() const {
  return options_.loss_over_padded_vocab ? config_.vocab_size : config_.unpadded_vocab_size;
}

Tensor StageModel::forward(const MicroBatch& mb, const Tensor& h_in, Activations& act, bool backward,
                           Tensor* logits_out, PassHooks* hooks) const {
  const int64_t T = mb.T, D = config_.hidden_size, V = config_.vocab_size, VL = loss_vocab();
  QUILL_CHECK(T >= 2, "a row needs at least 2 tokens, got {}", T);
  QUILL_CHECK(!tp_.active() || T % tp_.size == 0,
              "--tensor-model-parallel-size {}: a row of {} tokens does not split into {} equal chunks", tp_.size, T,
              tp_.size);
  QUILL_CHECK(!tp_.active() || logits_out == nullptr, "the logits of a row are not gathered under tensor parallelism");
  const int64_t R = tp_.region_rows(T);
  for (int64_t t = 0; t < T; ++t)
    QUILL_CHECK(mb.tokens[t] >= 0 && mb.tokens[t] < V, "token id {} at position {} is outside the vocabulary of {}",
                mb.tokens[t], t, V);
  act = Activations{};
  act.backward = backward;
  act.replay_topk = mb.replay_topk;
  Tensor h;
  if (hooks) hooks->weights_needed(first_layer_);  // the embedding's, on the first stage
  if (first_stage()) {
    Tensor ids_host = Tensor::empty({T}, DType::I32);
    std::memcpy(ids_host.data(), mb.tokens, static_cast<size_t>(T) * sizeof(int32_t));
    act.ids = upload(ctx_, ids_host);
    if (tp_.active()) {  // vocab-parallel: each rank looks up its rows, the partial sums reduce
      Tensor partial = new_activation(ctx_, {T, D});
      ops::embedding_forward_shard(ctx_, embed_->compute, act.ids, embed_->shard.tp_begin, V, partial);
      act.emb = tp_.reduce_output(ctx_, partial);
    } else {
      act.emb = new_activation(ctx_, {T, D});
      ops::embedding_forward(ctx_, embed_->compute, act.ids, act.emb);
    }
    h = new_activation(ctx_, {R, D});
    act.rstd_embed = new_tensor(ctx_, {R}, DType::F32);
    ops::rmsnorm_forward(ctx_, act.emb, embed_norm_->compute, config_.rms_norm_eps, h, act.rstd_embed);
  } else {
    QUILL_CHECK(h_in.defined() && h_in.ndim() == 2 && h_in.dim(0) == R && h_in.dim(1) == D,
                "stage [{}, {}): input hidden states must be [{}, {}]", first_layer_, end_layer_, R, D);
    act.h_in = h_in;
    h = h_in;
  }

  act.layers.resize(layers_.size());
  for (size_t i = 0; i < layers_.size(); ++i) {
    const size_t layer = static_cast<size_t>(first_layer_) + i;
    const Tensor replay = mb.replay_topk && layers_[i].is_moe() ? (*mb.replay_topk)[layer] : Tensor();
    if (hooks) hooks->weights_needed(static_cast<int64_t>(layer));  // (the head's too, on the last layer)
    h = layers_[i].forward(ctx_, h, act.layers[i], replay);
    if (layers_[i].is_moe()) {
      const Tensor& counts = act.layers[i].moe.counts_E;
      act.result.expert_tokens.emplace_back(counts.data_as<int64_t>(), counts.data_as<int64_t>() + counts.numel());
    }
    const auto [group_begin, group_end] = group_of_layer_[i];
    if (group_begin >= 0) {  // recomputed: drop what the backward would read; the group's first keeps its input
      const Tensor input = static_cast<size_t>(group_begin) == i ? act.layers[i].h_in : Tensor();
      act.layers[i] = DecoderLayer::Saved{};
      act.layers[i].h_in = input;
    }
  }
  if (!last_stage()) return h;

  // Head: final norm, muP division, then unembedding and the loss in chunks of rows, each chunk's
  // logits gradient consumed at once (dhn rows and the unembedding gradient).
  Tensor targets_host = Tensor::empty({T}, DType::I32), weights_host = Tensor::empty({T}, DType::F32);
  for (int64_t t = 0; t < T; ++t) {
    const bool has_target = t + 1 < T;
    targets_host.data_as<int32_t>()[t] = has_target ? mb.tokens[t + 1] : 0;
    weights_host.data_as<float>()[t] = has_target && mb.mask[t + 1] ? 1.0f : 0.0f;
  }
  const Tensor targets = upload(ctx_, targets_host), weights = upload(ctx_, weights_host);
  act.h_out = h;
  Tensor hn = new_activation(ctx_, {R, D});
  act.rstd_final = new_tensor(ctx_, {R}, DType::F32);
  ops::rmsnorm_forward(ctx_, h, norm_->compute, config_.rms_norm_eps, hn, act.rstd_final);
  ops::scale_inplace(ctx_, hn, 1.0 / config_.logits_mup_width_multiplier);
  // The unembedding reads all T positions (gathered from the sequence region); each rank its
  // vocabulary rows [vb, vb + Vr).
  const Tensor hn_all = tp_.gather_input(ctx_, hn);
  const int64_t Vr = unembed_->shape[0], vb = unembed_->shard.tp_begin;
  Tensor dhn_all = backward ? new_activation(ctx_, {T, D}) : Tensor();  // dL/d(hn) of all T positions
  // The chunks write the same unembedding gradient: the first by grad_write's rule, the rest add.
  GradWrite dunembed = backward ? grad_write(ctx_, *unembed_) : GradWrite{Tensor(), true};
  if (logits_out) *logits_out = Tensor::empty({T, VL}, DType::F32);
  act.result.supervised = supervised_targets(mb.mask, T);
  const int64_t chunk_rows = head_chunk_rows(ctx_);
  for (int64_t r0 = 0; r0 < T; r0 += chunk_rows) {
    const int64_t r1 = std::min(T, r0 + chunk_rows), n = r1 - r0;
    Tensor logits = new_activation(ctx_, {n, Vr}), dlogits = new_activation(ctx_, {n, Vr});
    ops::linear_forward(ctx_, hn_all.rows(r0, r1), unembed_->compute, logits);
    if (tp_.active()) {
      // Vocab-parallel loss: each rank's row statistics, gathered, merged alike on every rank.
      const DType stats_dtype = ctx_.device == Device::CPU ? DType::F64 : DType::F32;
      Tensor stats = new_tensor(ctx_, {n, 3}, stats_dtype);
      ops::cross_entropy_shard_stats(ctx_, logits, targets.rows(r0, r1), weights.rows(r0, r1), vb, VL, stats);
      const Tensor all = tp_.gather_chunks(ctx_, stats).reshape({tp_.size, n, 3});
      act.result.loss_sum += ops::cross_entropy_shard_backward(ctx_, logits, targets.rows(r0, r1), weights.rows(r0, r1),
                                                               vb, VL, all, mb.grad_scale, dlogits);
    } else {
      act.result.loss_sum += ops::cross_entropy_forward_backward(ctx_, logits, targets.rows(r0, r1),
                                                                 weights.rows(r0, r1), VL, mb.grad_scale, dlogits);
    }
    if (logits_out) {
      Tensor host = Tensor::empty({n, V}, ctx_.activation);
      ops::transfer(ctx_, logits, host);
      const Tensor f32 = convert_dtype(host, DType::F32);
      for (int64_t t = 0; t < n; ++t)
        std::memcpy(logits_out->data_as<float>() + (r0 + t) * VL, f32.data_as<float>() + t * V, VL * sizeof(float));
    }
    if (!backward) continue;
    ops::linear_backward_weight(ctx_, dlogits, hn_all.rows(r0, r1), dunembed.grad, dunembed.accumulate);
    dunembed.accumulate = true;
    ops::linear_backward_input(ctx_, dlogits, unembed_->compute, dhn_all.rows(r0, r1));
  }
  if (backward) act.dhn = tp_.gather_input_backward(ctx_, dhn_all);
  return Tensor();
}

void StageModel::recompute_group(Activations& act, size_t begin, size_t end) const {
  Tensor h = act.layers[begin].h_in;
  for (size_t i = begin; i < end; ++i) {
    const size_t layer = static_cast<size_t>(first_layer_) + i;
    const Tensor replay = act.replay_topk && layers_[i].is_moe() ? (*act.replay_topk)[layer] : Tensor();
    h = layers_[i].forward(ctx_, h, act.layers[i], replay);
  }
  // The group's recomputed output is dropped here: the forward's own went on to the next layer.
}

Tensor StageModel::backward(Activations& act, const Tensor& dh_out, PassHooks* hooks) const {
  Tensor dh;
  if (last_stage()) {
    QUILL_CHECK(act.backward, "stage backward: the last stage's forward ran without its backward");
    ops::scale_inplace(ctx_, act.dhn, 1.0 / config_.logits_mup_width_multiplier);
    dh = new_activation(ctx_, act.h_out.shape());
    ops::rmsnorm_backward(ctx_, act.h_out, norm_->compute, act.rstd_final, act.dhn, dh, grad_target(ctx_, *norm_));
    act.dhn = act.h_out = Tensor();
  } else {
    QUILL_CHECK(dh_out.defined(), "stage [{}, {}): backward needs the gradient of its output", first_layer_, end_layer_);
    dh = dh_out;
  }
  for (size_t i = layers_.size(); i-- > 0;) {
    const auto [group_begin, group_end] = group_of_layer_[i];
    if (group_begin >= 0 && static_cast<size_t>(group_end) == i + 1)
      recompute_group(act, static_cast<size_t>(group_begin), static_cast<size_t>(group_end));
    dh = layers_[i].backward(ctx_, act.layers[i], dh, act.expert_wgrad);
    act.layers[i] = DecoderLayer::Saved{};  // release the layer's activations as soon as they are used
    // Layer 0 of the first stage shares its layer number with the embedding, whose backward follows.
    const int64_t layer = first_layer_ + static_cast<int64_t>(i);
    if (hooks && (layer > 0 || !first_stage())) hooks->grads_written_from(layer);
  }
  if (!first_stage()) return dh;
  backward_embedding(act, dh);
  if (hooks) hooks->grads_written_from(0);
  return Tensor();
}

void StageModel::backward_embedding(Activations& act, const Tensor& dh) const {
  Tensor demb = new_activation(ctx_, act.emb.shape());
  ops::rmsnorm_backward(ctx_, act.emb, embed_norm_->compute, act.rstd_embed, dh, demb, grad_target(ctx_, *embed_norm_));
  if (!embed_->grad.defined()) return;
  if (tp_.active())
    ops::embedding_backward_shard(ctx_, act.ids, tp_.reduce_output_backward(ctx_, demb), embed_->shard.tp_begin,
                                  config_.vocab_size, grad_target(ctx_, *embed_));
  else
    ops::embedding_backward(ctx_, act.ids, demb, grad_target(ctx_, *embed_));
}

}  // namespace quill
