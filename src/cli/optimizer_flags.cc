#include "cli/optimizer_flags.h"

#include "base/error.h"

namespace quill::cli {

void add_optimizer_flags(CLI::App* cmd, OptimizerMemory& memory, OptimizerFlagNames& names) {
  cmd->add_flag("--optimizer-cpu-offload", memory.cpu_offload,
                "keep a share of the optimizer state in pinned host memory, updated by the CPU");
  names.offload_fraction = cmd->add_option("--optimizer-offload-fraction", memory.offload_fraction,
                                           "with --optimizer-cpu-offload: the share offloaded, 0 to 1 (default 1)");
  cmd->add_flag("--overlap-cpu-optimizer-d2h-h2d", memory.overlap_d2h_h2d,
                "overlap the offloaded share's copies with the backward and the device update");
  cmd->add_flag("--use-precision-aware-optimizer", names.precision_aware,
                "accepted for Megatron's command lines (the dtype flags below work without it)");
  cmd->add_option("--exp-avg-dtype", names.exp_avg, "Adam first moment: fp32 | bf16");
  cmd->add_option("--exp-avg-sq-dtype", names.exp_avg_sq, "Adam second moment: fp32 | bf16");
  cmd->add_option("--main-grads-dtype", names.main_grads, "gradient buffers: fp32 | bf16");
}

std::vector<std::string> finish_optimizer_flags(OptimizerMemory& memory, const OptimizerFlagNames& names) {
  memory.exp_avg = parse_optimizer_dtype(names.exp_avg, "--exp-avg-dtype");
  memory.exp_avg_sq = parse_optimizer_dtype(names.exp_avg_sq, "--exp-avg-sq-dtype");
  memory.main_grads = parse_optimizer_dtype(names.main_grads, "--main-grads-dtype");
  // Megatron reads the fraction only with the offload switch; given alone it was silently nothing.
  QUILL_CHECK(names.offload_fraction == nullptr || names.offload_fraction->count() == 0 || memory.cpu_offload,
              "--optimizer-offload-fraction {} without --optimizer-cpu-offload: nothing would be offloaded; give both "
              "(Megatron's pair)",
              memory.offload_fraction);
  return check_optimizer_memory(memory);
}

}  // namespace quill::cli
