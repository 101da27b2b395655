// The activation plan of one pipeline stage: the device allocations and frees of one micro-batch's
// forward and backward, in the order the model code makes them (model/stage_model.cc,
// decoder_layer.cc, attention_block.cc, dense_mlp.cc, moe_block.cc), with the scratch the backend's
// ops allocate inside (ops/cuda: attention's relative-bias rows, the loss's row sums, the MoE
// permutation's inverse), replayed into a MemoryTrace. What a layer keeps for its backward is
// tagged Saved; it is freed where the model releases it (after that layer's backward).
//
// That is the code as it runs, allocation for allocation, under tensor and sequence parallelism too
// (parallel/tensor_parallel.h's gathers and reductions, the residual convolutions' halos), checked
// against the CPU allocator's counters at one rank, DP, PP, TP and TP+SP (tests/plan, tests/cli).
// Expert parallelism, which quill does not run yet, is modelled by Megatron's scheme: routed experts
// 1/ep per rank (ETP splits their width), the expert dispatcher's buffers sized at the routing's worst
// case, the rows a rank keeps at the balanced share (docs/plan.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/expert_wgrad_turn.h"
#include "model/recompute.h"
#include "ops/router_gate_layout.h"
#include "plan/memory_trace.h"
#include "tensor/dtype.h"

namespace quill::plan {

struct TraceShape {
  Device device = Device::CPU;
  int64_t row_tokens = 0;  // one row per micro-batch
  int tp = 1, ep = 1, etp = 1;
  bool sequence_parallel = false;
  std::vector<std::string> freeze;  // frozen parameter patterns (their gradients are scratch tensors)
  // Routed-expert rows a rank keeps for backward, relative to balanced routing (1: every rank
  // receives as many rows as it sends). The dispatch buffers are sized at the worst case anyway.
  double expert_rows_factor = 1.0;
  // Full-layer recompute (model/recompute.h): a recomputed group keeps only its input until its
  // backward, which first runs the group's forward again. Selective: the modules' tensors are dropped after
  // the forward and made again in the backward.
  RecomputeOptions recompute;
  // --tp-comm-overlap (with sequence parallelism; docs/decisions/tp-comm-overlap.md): the collectives it
  // starts early allocate their results earlier, and what they read lives until their wait.
  bool tp_comm_overlap = false;
  // --moe-expert-wgrad-micro-batches (model/expert_wgrad_pairs.h): with 2, a micro-batch's routed rows held
  // until the next backward, and both merged for the weight gradients.
  int expert_wgrad_micro_batches = 1;
  // The MoE backward's return exchange is started and the late weight gradients run beside it (expert
  // parallelism with --delay-wgrad-compute or the combined 1F1B): their merged rows live beside its buffer.
  bool wgrad_beside_return_exchange = false;
  // --fp8-recipe blockwise: the attention projections run as one FP8 GEMM each way when their quantised copies
  // stack (each matrix's rows a multiple of 128), else as four (model/attention_block.h: stacked_fp8).
  bool fp8 = false;
};

class StageTrace {
 public:
  using Id = MemoryTrace::Id;
  StageTrace(const InklingConfig& config, const TraceShape& shape, int64_t first_layer, int64_t end_layer,
             MemoryTrace& mem);

  // What one micro-batch's forward keeps until its backward (StageModel::Activations).
  struct Layer {
    std::vector<Id> saved;  // released after the layer's backward (its input among them)
    // MoE layers: the routed rows' input and SwiGLU output among `saved` (kNone when not kept), which a
    // micro-batch holding its rows (ExpertWgradTurn::Hold) keeps past the layer's backward.
    Id expert_x = MemoryTrace::kNone, expert_a = MemoryTrace::kNone;
  };
  struct Activations {
    std::vector<Layer> layers;
    std::vector<Id> kept;   // released with the micro-batch: ids, embedding rows and statistics, the
                            // received input, the final norm's statistics
    Id h_out = MemoryTrace::kNone, dhn = MemoryTrace::kNone;  // last stage: released by its backward
    ExpertWgradTurn expert_wgrad = ExpertWgradTurn::Write;      // set before the backward, as the executor does
  };
  // h_in: the received input (kNone on the first stage). Returns the stage's output, to send (kNone on
  // the last stage, whose head runs its backward inside the forward, as the model does).
  Id forward(Activations& act, Id h_in);
  // dh_out: the received output gradient (kNone on the last stage). Returns the input gradient, to
  // send (kNone on the first stage).
  Id backward(Activations& act, Id dh_out);
  // The rest of the micro-batch's activations, after its backward (the executor drops them).
  void release(Activations& act);

  int64_t residual_rows() const { return Tseq_; }
  int64_t row_bytes() const { return act_ * D_; }  // one row of the residual stream [*, D]
  bool first_stage() const { return first_ == 0; }
  bool last_stage() const { return end_ == c_.num_layers; }

 private:
  Id gather_input(Use use);
  Id reduce_rows(Use use);
  Id residual_conv(Layer& saved, Id x);
  Id residual_conv_backward(const std::string& conv);
  Id norm_again();
  Id decoder_forward(int64_t layer, Layer& saved, Id h_in);
  Id decoder_backward(int64_t layer, Layer& saved, Id dh, ExpertWgradTurn turn);
  Id attention_forward(int64_t layer, Layer& saved);
  Id attention_backward(int64_t layer, Id x_region_again);  // x_region_again: kNone, or gathered inside
  Id dense_forward(int64_t layer, Layer& saved);
  Id dense_backward(int64_t layer);
  Id moe_forward(int64_t layer, Layer& saved);
  Id moe_backward(int64_t layer, Layer& saved, ExpertWgradTurn turn);
  // The late routed weight gradients of moe_backward by `turn`: own = this micro-batch's four row tensors
  // (output gradient, SwiGLU output, gate/up gradient, input), R its rows.
  void expert_weight_grads(int64_t layer, ExpertWgradTurn turn, const std::vector<Id>& own, int64_t R);
  void head_forward(Activations& act, Id h);
  // StageModel::recompute_group: the group's forward again, from its input, before its backward.
  void recompute_group(Activations& act, int64_t begin, int64_t end);

  // ops::router_gate_*'s transient workspace on the GPU (ops/router_gate_layout.h); none on the CPU, whose
  // activations are fp32 already.
  void router_gate_workspace(int64_t Tc, router_gate::Op op);
  // A gradient the op writes for a frozen parameter: a scratch tensor while the call runs.
  Id grad_scratch(const std::string& name, int64_t elements);
  bool frozen(const std::string& name) const;
  Id activation(Use use, int64_t rows, int64_t cols) { return mem_.alloc(use, rows * cols * act_); }
  // Whether layer l's q, k, v and r projections run as one GEMM each way (model/attention_block.h): in bf16 when
  // the four are trained (their weights then lie back to back), in FP8 when also each one's rows are whole
  // 128-row blocks (StackedFp8Copy).
  bool projections_stacked(int64_t l) const;
  Id f32(Use use, int64_t n) { return mem_.alloc(use, n * 4); }
  Id i32(Use use, int64_t n) { return mem_.alloc(use, n * 4); }
  bool cuda() const { return shape_.device == Device::CUDA; }
  bool overlap() const { return shape_.tp_comm_overlap; }
  // --recompute-granularity selective (model/recompute.h): the modules.
  bool moe_act_again() const { return shape_.recompute.selective() && shape_.recompute.moe_act; }
  bool norms_again() const { return shape_.recompute.selective() && shape_.recompute.layernorm; }

  const InklingConfig& c_;
  TraceShape shape_;
  int64_t first_, end_;
  MemoryTrace& mem_;
  int64_t act_;          // bytes of an activation element
  int64_t T_, Tseq_, D_; // row tokens, residual rows per rank, hidden size
  int64_t tp_;
  bool sp_;
  std::vector<std::pair<int64_t, int64_t>> group_of_layer_;  // per stage layer: its recomputed group, or {-1, -1}
  // Per stage layer: the rows a micro-batch holds for the next one's weight gradients (ExpertWgradTurn::Hold).
  std::vector<std::vector<Id>> held_;
  std::vector<int64_t> held_rows_;
};

}  // namespace quill::plan
