// Megatron's optimizer-memory flags, shared by `quill train` and `quill plan` so that both read the
// same words into the same value (optim/optimizer_memory.h).
#pragma once

#include <CLI/CLI.hpp>

#include "optim/optimizer_memory.h"

namespace quill::cli {

// Adds --optimizer-cpu-offload, --optimizer-offload-fraction, --overlap-cpu-optimizer-d2h-h2d,
// --use-precision-aware-optimizer, --exp-avg-dtype, --exp-avg-sq-dtype and --main-grads-dtype.
// The dtype flags are read into `names` and resolved by finish_optimizer_flags (CLI11 has no DType).
struct OptimizerFlagNames {
  std::string exp_avg = "fp32", exp_avg_sq = "fp32", main_grads = "fp32";
  bool precision_aware = false;
  const CLI::Option* offload_fraction = nullptr;  // given without --optimizer-cpu-offload: refused (issue 44)
};
void add_optimizer_flags(CLI::App* cmd, OptimizerMemory& memory, OptimizerFlagNames& names);
// Resolves the dtype names and checks the whole value (optim/optimizer_memory.h); returns its notes.
std::vector<std::string> finish_optimizer_flags(OptimizerMemory& memory, const OptimizerFlagNames& names);

}  // namespace quill::cli
