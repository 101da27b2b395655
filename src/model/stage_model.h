// One pipeline stage of the Inkling text decoder (transformers' InklingForCausalLM split by layers):
// layers [first_layer, end_layer) of the config, with the embedding and its norm on the first stage,
// and the final norm, muP division, unembedding and the masked next-token loss
// (docs/recipes-and-measurement.md §3) on the last. The whole model is the one stage that is both.
//
//   first stage:  h = embed_norm(embed[ids]);            then the stage's layers
//   last stage:   logits = unembed(norm(h) / logits_mup_width_multiplier);  loss
//
// forward(micro-batch, h_in) keeps what backward needs in Activations; backward(activations, dh_out)
// returns dh_in (undefined on the first stage). On the last stage the loss gradient starts inside
// forward (the head runs fused with the loss, chunk by chunk), so backward takes no dh_out there.
// Parameter gradients accumulate into the ParamTable with the micro-batch's grad_scale.
//
// Under tensor parallelism the embedding and the unembedding are vocab-parallel (each rank its rows
// of the vocabulary; the loss by ops' vocab-parallel cross-entropy, so no rank holds a whole row of
// logits), and the hidden states between layers and stages are the sequence region's rows
// (parallel/tensor_parallel.h): T/tp positions each with sequence parallelism.
#pragma once

#include <memory>
#include <vector>

#include "base/pass_baton.h"
#include "model/config.h"
#include "model/decoder_layer.h"
#include "model/pass_hooks.h"
#include "model/params.h"
#include "model/recompute.h"
#include "ops/device_context.h"
#include "ops/fp8_options.h"
#include "parallel/expert_dispatch.h"
#include "parallel/layout.h"
#include "parallel/tensor_parallel.h"

namespace quill {

struct ModelOptions {
  // Softmax over all vocab_size rows (miles) instead of the unpadded vocabulary (transformers).
  bool loss_over_padded_vocab = false;
  // Megatron's --moe-shared-expert-overlap (parallel/expert_dispatch.h: ExpertParallel).
  bool shared_expert_overlap = false;
  // Megatron's --tp-comm-overlap (parallel/tensor_parallel.h: TensorParallel::comm_overlap; sequence
  // parallelism only, ignored without it).
  bool tp_comm_overlap = false;
  // Megatron's --delay-wgrad-compute (parallel/expert_dispatch.h: ExpertParallel::delay_wgrad).
  bool delay_wgrad_compute = false;
  // Megatron's --overlap-moe-expert-parallel-comm: the stage can run a combined step, the forward of one
  // micro-batch interleaved with the backward of another at their token exchanges (pass_baton(); under
  // expert parallelism only: without it there is no exchange to hide).
  bool overlap_moe_ep_comm = false;
  // --moe-expert-wgrad-micro-batches (1 or 2): micro-batches whose routed experts' weight gradients share one
  // grouped GEMM (model/expert_wgrad_pairs.h).
  int expert_wgrad_micro_batches = 1;
  // Megatron's --recompute-granularity full --recompute-method --recompute-num-layers (model/recompute.h).
  RecomputeOptions recompute;
  // --fp8-format e4m3 --fp8-recipe blockwise: the linear layers of attention, MLP and experts in FP8
  // (model/fp8_params.h, docs/fp8.md).
  ops::Fp8Options fp8;
};

// One row (sequence) of T tokens. Targets: position t predicts tokens[t+1] with weight mask[t+1].
struct MicroBatch {
  const int32_t* tokens = nullptr;
  const uint8_t* mask = nullptr;
  int64_t T = 0;
  double grad_scale = 0;  // 1 / supervised targets of the global batch
  // Routing replay for this micro-batch: per layer of the config, an I32 [T, top_k] choice on the
  // device for MoE layers (undefined for dense ones); empty: route freely.
  const std::vector<Tensor>* replay_topk = nullptr;
};

struct RowResult {
  double loss_sum = 0;     // sum of -log p(target) over supervised targets (unnormalised; last stage)
  int64_t supervised = 0;  // supervised targets in the row
  // Tokens this rank routed (its chunk of the row) to each expert of each MoE layer of this stage
  // (layer order), all E experts whichever rank holds them: the sum over ranks is the global count.
  std::vector<std::vector<int64_t>> expert_tokens;
};

class StageModel {
 public:
  StageModel(const InklingConfig& config, ParamTable& params, const DeviceContext& ctx, int64_t first_layer,
             int64_t end_layer, ModelOptions options = {});
  // This rank's stage and tensor-parallel share of `layout` (the table built for the same layout).
  StageModel(const InklingConfig& config, ParamTable& params, const DeviceContext& ctx, const Layout& layout,
             ModelOptions options = {});

  struct Activations {
    Tensor ids;                         // first stage
    Tensor emb, rstd_embed;             // first stage: the embedding rows and their norm statistics
    Tensor h_in;                        // other stages: the received hidden states
    // Per layer; a recomputed layer keeps nothing until its backward recomputes it, except the first
    // layer of its group, which keeps its input (h_in).
    std::vector<DecoderLayer::Saved> layers;
    const std::vector<Tensor>* replay_topk = nullptr;  // the micro-batch's routing replay, for the recompute
    Tensor h_out, rstd_final, dhn;      // last stage: the final norm's input and statistics, dL/d(normed h)
    RowResult result;
    bool backward = false;              // the head's gradient was computed (last stage)
    // Set before the backward: what it does with the routed experts' weight gradients (expert_wgrad_turn).
    ExpertWgradTurn expert_wgrad = ExpertWgradTurn::Write;
  };

  // The stage's forward of one micro-batch. h_in: [T, D] from the previous stage (ignored on the
  // first). Returns the stage's output [T, D] (undefined on the last stage, which returns its loss
  // in act.result). With `backward`, the last stage also runs the head's backward; with logits_out
  // it receives the [T, V_loss] logits on the host (one tensor-parallel rank only). The hidden
  // states in and out are [region_rows(T), D].
  // `hooks` (optional) hear before each layer's weights are first read (model/pass_hooks.h).
  Tensor forward(const MicroBatch& mb, const Tensor& h_in, Activations& act, bool backward,
                 Tensor* logits_out = nullptr, PassHooks* hooks = nullptr) const;
  // dh_out: the gradient of the stage's output (ignored on the last stage). Returns dh_in
  // (undefined on the first stage). Releases each layer's activations as soon as they are used.
  // `hooks` (optional) hear after each layer's parameter gradients are written.
  Tensor backward(Activations& act, const Tensor& dh_out, PassHooks* hooks = nullptr) const;

  // The routed weight gradients' turn of the k-th of a step's n backwards on this stage (model/expert_wgrad_pairs.h,
  // by ModelOptions::expert_wgrad_micro_batches).
  ExpertWgradTurn expert_wgrad_turn(int64_t k, int64_t n) const {
    return quill::expert_wgrad_turn(k, n, options_.expert_wgrad_micro_batches);
  }
  bool first_stage() const { return first_layer_ == 0; }
  bool last_stage() const { return end_layer_ == config_.num_layers; }
  int64_t first_layer() const { return first_layer_; }
  int64_t end_layer() const { return end_layer_; }
  const DecoderLayer& layer(int64_t i) const { return layers_[static_cast<size_t>(i - first_layer_)]; }
  int64_t loss_vocab() const;
  int64_t region_rows(int64_t T) const { return tp_.region_rows(T); }
  // The turn-taking of a combined step (pipeline_executor.cc), or null when the stage was made without
  // ModelOptions::overlap_moe_ep_comm or without expert parallelism.
  PassBaton* pass_baton() const { return baton_.get(); }

 private:
  StageModel(const InklingConfig& config, ParamTable& params, const DeviceContext& ctx, int64_t first_layer,
             int64_t end_layer, const TensorParallel& tp, const ExpertParallel& ep, ModelOptions options);

  // Recomputes the forward of the group [begin, end) of the stage's layers from the group's input, filling
  // their activations (before the group's backward).
  void recompute_group(Activations& act, size_t begin, size_t end) const;
  // The first stage's embedding norm and embedding gradients from the first layer's input gradient dh.
  void backward_embedding(Activations& act, const Tensor& dh) const;

  InklingConfig config_;
  DeviceContext ctx_;
  ModelOptions options_;
  int64_t first_layer_, end_layer_;
  TensorParallel tp_;
  std::vector<DecoderLayer> layers_;
  // Per layer of the stage: the [begin, end) of its recomputed group, or begin == end == -1 when the layer
  // keeps its activations (recompute_groups of options_.recompute).
  std::vector<std::pair<int64_t, int64_t>> group_of_layer_;
  Param *embed_ = nullptr, *embed_norm_ = nullptr, *norm_ = nullptr, *unembed_ = nullptr;
  std::shared_ptr<PassBaton> baton_;
};

int64_t supervised_targets(const uint8_t* mask, int64_t T);

}  // namespace quill
