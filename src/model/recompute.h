// Activation recompute under Megatron's flags: `--recompute-granularity full --recompute-method
// uniform|block --recompute-num-layers N`. A recomputed group of layers keeps only its input from the
// forward; its backward first runs the group's forward again (the same ops on the same input, so the
// same bits: quill's kernels are deterministic) and then the group's backward as usual.
//
// Megatron's rule per pipeline stage (megatron/core/transformer/transformer_block.py,
// _checkpointed_forward): uniform divides the stage's layers into consecutive groups of N (the last may
// be shorter) and recomputes every group; block recomputes the stage's first N layers, each on its own,
// and keeps the rest. Selective granularity (--recompute-modules) is not built: it is refused by name.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace quill {

struct RecomputeOptions {
  enum class Granularity { None, Full };
  enum class Method { Uniform, Block };
  Granularity granularity = Granularity::None;
  Method method = Method::Uniform;
  int64_t num_layers = 1;

  bool active() const { return granularity == Granularity::Full; }
  // "none", or e.g. "full uniform 1" (the run's summary and the rank agreement).
  std::string describe() const;
};

// From the flags' words (granularity "" or "none" means none). Throws naming the flag for an unknown
// word, a method or layer count without a granularity, selective granularity, or N < 1.
RecomputeOptions parse_recompute(const std::string& granularity, const std::string& method, int64_t num_layers);

// The recomputed groups of a stage of `stage_layers` layers: [begin, end) in the stage's own layer
// indexes, in order; layers in no group keep their activations.
std::vector<std::pair<int64_t, int64_t>> recompute_groups(const RecomputeOptions& options, int64_t stage_layers);

}  // namespace quill
