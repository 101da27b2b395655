// The Inkling text decoder as one trainable model (transformers' InklingForCausalLM): the one-stage
// composition of model/stage_model.h (all layers, the embedding and the head), a row at a time.
// Gradients accumulate into the ParamTable, so a global batch is a loop over rows.
#pragma once

#include <memory>
#include <vector>

#include "model/config.h"
#include "model/params.h"
#include "model/stage_model.h"
#include "ops/device_context.h"
#include "parallel/layout.h"

namespace quill {

class InklingModel {
 public:
  // On one device (Layout::single), or on this rank's share of `layout` (which must outlive the model).
  InklingModel(const InklingConfig& config, ParamTable& params, const DeviceContext& ctx, ModelOptions options = {});
  InklingModel(const InklingConfig& config, ParamTable& params, const DeviceContext& ctx, const Layout& layout,
               ModelOptions options = {});

  // Refuses, naming the sizes, a layout quill's model cannot run yet (before anything is loaded);
  // pipeline stages run as StageModels (train/pipeline_executor.h).
  static void check_layout(const LayoutSpec& spec);

  // Forward and backward of one row of T tokens. Targets: position t predicts tokens[t+1] with
  // weight mask[t+1]. Parameter gradients accumulate with factor grad_scale (1 / supervised targets
  // of the global batch). When logits_out is given it receives the [T, V_loss] logits.
  RowResult train_row(const int32_t* tokens, const uint8_t* mask, int64_t T, double grad_scale,
                      Tensor* logits_out = nullptr);
  // Forward only: loss sum and supervised count of one row.
  RowResult eval_row(const int32_t* tokens, const uint8_t* mask, int64_t T);

  // Routing replay: with Record, each forward stores every MoE layer's expert choice; with Replay,
  // forwards reuse the stored choice (miles' R3; also what makes finite-difference checks of the
  // whole model well defined).
  enum class Routing { Free, Record, Replay };
  void set_routing(Routing mode) { routing_ = mode; }
  // Replays a given choice: per layer, a host I32 [T, top_k] tensor for MoE layers (undefined for
  // dense ones); the next forwards use it until set_routing(Free).
  void replay_routing(const std::vector<Tensor>& topk_per_layer);

  int64_t loss_vocab() const { return stage_->loss_vocab(); }
  static int64_t supervised_targets(const uint8_t* mask, int64_t T) { return quill::supervised_targets(mask, T); }

 private:
  RowResult run(const int32_t* tokens, const uint8_t* mask, int64_t T, double grad_scale, bool backward,
                Tensor* logits_out);

  InklingConfig config_;
  DeviceContext ctx_;
  std::unique_ptr<StageModel> stage_;
  Routing routing_ = Routing::Free;
  std::vector<Tensor> recorded_topk_;  // per layer (undefined for dense layers)
};

}  // namespace quill
