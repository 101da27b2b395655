// Megatron's activation-recompute flags, shared by `quill train`, `quill plan` and `quill tune` so
// that each reads the same words into the same value (model/recompute.h).
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "model/recompute.h"

namespace quill::cli {

struct RecomputeFlags {
  std::string granularity, method;
  int64_t num_layers = 1;
  std::vector<std::string> modules;
  RecomputeOptions resolve() const { return parse_recompute(granularity, method, num_layers, modules); }
};
// Adds --recompute-granularity, --recompute-method, --recompute-num-layers and --recompute-modules.
void add_recompute_flags(CLI::App* cmd, RecomputeFlags& flags);

}  // namespace quill::cli
