#include "cli/recompute_flags.h"

namespace quill::cli {

void add_recompute_flags(CLI::App* cmd, RecomputeFlags& flags) {
  cmd->add_option("--recompute-granularity", flags.granularity,
                  "activation recompute: full (whole layers) | selective (--recompute-modules); Megatron's flag");
  cmd->add_option("--recompute-method", flags.method,
                  "with full: uniform (every layer, in groups of --recompute-num-layers) | block (the first "
                  "--recompute-num-layers layers of each pipeline stage)");
  cmd->add_option("--recompute-num-layers", flags.num_layers, "with full: layers per group (uniform) or per stage (block)");
  cmd->add_option("--recompute-modules", flags.modules,
                  "with selective: moe_act (the experts' SwiGLU outputs) and/or layernorm (the norms' outputs and the "
                  "inputs gathered from them), made again in the layer's backward");
}

}  // namespace quill::cli
