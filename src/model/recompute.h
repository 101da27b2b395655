// Activation recompute under Megatron's flags: `--recompute-granularity full --recompute-method
// uniform|block --recompute-num-layers N`. A recomputed group of layers keeps only its input from the
// forward; its backward first runs the group's forward again (the same ops on the same input, so the
// same bits: quill's kernels are deterministic) and then the group's backward as usual.
//
// Megatron's rule per pipeline stage (megatron/core/transformer/transformer_block.py,
// _checkpointed_forward): uniform divides the stage's layers into consecutive groups of N (the last may
// be shorter) and recomputes every group; block recomputes the stage's first N layers, each on its own,
// and keeps the rest.
//
// `--recompute-granularity selective --recompute-modules M...` (Megatron's names) keeps every layer but
// drops named pieces of it, made again in the layer's backward from what the layer keeps anyway:
//   moe_act    the experts' SwiGLU outputs (routed: [R, F] per MoE layer; shared: the output and its
//              gamma-scaled copy, [T, Fs] each), from their gate/up outputs;
//   layernorm  the two norms' outputs and what the layer keeps made of them: the attention's and the
//              shared experts' input (all T rows under sequence parallelism: the gathered copies) and the
//              router's fp32 input, from the residual stream the layer keeps (the norm again, and under
//              sequence parallelism the all-gather again).
// Megatron's other modules (core_attn, its default; mlp, moe, shared_experts, mla_up_proj) are refused by name.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace quill {

struct RecomputeOptions {
  enum class Granularity { None, Full, Selective };
  enum class Method { Uniform, Block };
  Granularity granularity = Granularity::None;
  Method method = Method::Uniform;
  int64_t num_layers = 1;
  bool moe_act = false, layernorm = false;  // selective: the modules (see above)

  // Whole layers are recomputed (granularity full).
  bool active() const { return granularity == Granularity::Full; }
  bool selective() const { return granularity == Granularity::Selective; }
  // "none", e.g. "full uniform 1", or "selective moe_act layernorm" (the run's summary and the rank agreement).
  std::string describe() const;
};

// From the flags' words (granularity "" or "none" means none). Throws naming the flag for an unknown
// word, a method or layer count without full granularity, N < 1, modules without selective granularity, or
// a module quill does not build.
RecomputeOptions parse_recompute(const std::string& granularity, const std::string& method, int64_t num_layers,
                                 const std::vector<std::string>& modules = {});

// The recomputed groups of a stage of `stage_layers` layers: [begin, end) in the stage's own layer
// indexes, in order; layers in no group keep their activations.
std::vector<std::pair<int64_t, int64_t>> recompute_groups(const RecomputeOptions& options, int64_t stage_layers);

}  // namespace quill
