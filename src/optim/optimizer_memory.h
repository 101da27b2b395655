// Where the optimizer's state lives and in which dtype: Megatron's CPU offload by fraction
// (--optimizer-cpu-offload --optimizer-offload-fraction F --overlap-cpu-optimizer-d2h-h2d) and its
// precision-aware optimizer (--exp-avg-dtype, --exp-avg-sq-dtype, --main-grads-dtype). One value,
// shared by `quill train` (optim/adamw.h carries it out) and `quill plan` (predicts its bytes).
#pragma once

#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace quill {

struct OptimizerMemory {
  // Megatron: --optimizer-cpu-offload turns offload on; --optimizer-offload-fraction (default 1.0)
  // is the share of the rank's optimizer state (fp32 masters and both moments) kept in pinned host
  // memory and updated by the CPU. Without the switch nothing is offloaded, whatever the fraction.
  bool cpu_offload = false;
  double offload_fraction = 1.0;
  bool overlap_d2h_h2d = false;  // --overlap-cpu-optimizer-d2h-h2d
  DType exp_avg = DType::F32;     // --exp-avg-dtype fp32 | bf16
  DType exp_avg_sq = DType::F32;  // --exp-avg-sq-dtype fp32 | bf16
  DType main_grads = DType::F32;  // --main-grads-dtype fp32 | bf16

  // The share actually offloaded: offload_fraction when cpu_offload, else 0.
  double effective_fraction() const { return cpu_offload ? offload_fraction : 0.0; }
  std::string describe() const;  // "offload 0.7 (overlap), exp_avg bf16, exp_avg_sq fp32, main grads fp32"
};

// Megatron's dtype names for these flags ("fp32", "bf16"); throws naming the flag for anything else.
DType parse_optimizer_dtype(const std::string& name, const char* flag);
const char* optimizer_dtype_name(DType dtype);

// Checks the values as flags (fraction in [0, 1], dtypes quill implements), throwing naming the flag.
// Returns notes for what is accepted but has no effect (a fraction without --optimizer-cpu-offload).
std::vector<std::string> check_optimizer_memory(const OptimizerMemory& m);

}  // namespace quill
