#include "model/inkling_model.h"

#include "base/error.h"
#include "ops/convert.h"

namespace quill {

void InklingModel::check_layout(const LayoutSpec& s) {
  QUILL_CHECK(s.cp == 1, "layout {}: context parallelism is not implemented yet (--tp, --sp, --dp, --pp and --ep are)",
              s.describe());
  QUILL_CHECK(s.etp == 1,
              "--expert-tensor-parallel-size {}: quill builds expert tensor parallelism 1 (each tensor-parallel rank "
              "holds whole experts; Megatron's --expert-tensor-parallel-size 1)",
              s.etp);
  // Megatron carves the expert ranks (etp x ep x edp) from the dense ones (tp x cp x dp) of each stage.
  const int dense = s.tp * s.cp * s.dp;
  QUILL_CHECK(dense % (s.ep * s.etp) == 0,
              "--expert-model-parallel-size {} x --expert-tensor-parallel-size {} = {} does not divide the {} ranks of a "
              "pipeline stage (tp x cp x dp = {} x {} x {}): the expert-parallel groups are carved from them",
              s.ep, s.etp, s.ep * s.etp, dense, s.tp, s.cp, s.dp);
}

InklingModel::InklingModel(const InklingConfig& config, ParamTable& params, const DeviceContext& ctx,
                           ModelOptions options)
    : config_(config), ctx_(ctx), stage_(std::make_unique<StageModel>(config, params, ctx, 0, config.num_layers, options)) {}

InklingModel::InklingModel(const InklingConfig& config, ParamTable& params, const DeviceContext& ctx,
                           const Layout& layout, ModelOptions options)
    : config_(config), ctx_(ctx) {
  check_layout(layout.spec());
  QUILL_CHECK(layout.spec().pp == 1, "InklingModel runs every layer: a pipeline stage is a StageModel");
  stage_ = std::make_unique<StageModel>(config, params, ctx, layout, options);
}

void InklingModel::replay_routing(const std::vector<Tensor>& topk_per_layer) {
  const size_t layers = static_cast<size_t>(config_.num_layers);
  QUILL_CHECK(topk_per_layer.size() == layers, "routing replay: {} layers given, the model has {}",
              topk_per_layer.size(), layers);
  recorded_topk_.assign(layers, Tensor());
  for (size_t i = 0; i < layers; ++i) {
    if (!config_.is_moe(static_cast<int64_t>(i))) continue;
    const Tensor& host = topk_per_layer[i];
    QUILL_CHECK(host.defined() && host.dtype() == DType::I32 && host.ndim() == 2 &&
                    host.dim(1) == config_.num_experts_per_tok,
                "routing replay: layer {} needs an I32 [T, {}] choice", i, config_.num_experts_per_tok);
    recorded_topk_[i] = Tensor::empty(host.shape(), DType::I32, *ctx_.allocator);
    ops::transfer(ctx_, host, recorded_topk_[i]);
  }
  routing_ = Routing::Replay;
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
  QUILL_CHECK(routing_ != Routing::Replay || recorded_topk_.size() == static_cast<size_t>(config_.num_layers),
              "routing replay: no recorded routing to replay");
  MicroBatch mb{tokens, mask, T, grad_scale, routing_ == Routing::Replay ? &recorded_topk_ : nullptr};
  StageModel::Activations act;
  stage_->forward(mb, Tensor(), act, backward, logits_out);
  if (routing_ == Routing::Record) {
    recorded_topk_.assign(static_cast<size_t>(config_.num_layers), Tensor());
    for (int64_t i = 0; i < config_.num_layers; ++i)
      if (config_.is_moe(i)) recorded_topk_[static_cast<size_t>(i)] = act.layers[static_cast<size_t>(i)].moe.topk_Tk;
  }
  RowResult result = act.result;
  if (backward) stage_->backward(act, Tensor());
  return result;
}

}  // namespace quill
