// Megatron's activation-recompute flags, shared by `quill train`, `quill plan` and `quill tune` so
// that each reads the same words into the same value (model/recompute.h).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "model/recompute.h"

namespace quill::cli {

struct RecomputeFlags {
  std::string granularity, method;
  int64_t num_layers = 1;
  RecomputeOptions resolve() const { return parse_recompute(granularity, method, num_layers); }
};
// Adds --recompute-granularity, --recompute-method and --recompute-num-layers.
void add_recompute_flags(CLI::App* cmd, RecomputeFlags& flags);

}  // namespace quill::cli
