#include "cli/recompute_flags.h"

namespace quill::cli {

void add_recompute_flags(CLI::App* cmd, RecomputeFlags& flags) {
  cmd->add_option("--recompute-granularity", flags.granularity,
                  "activation recompute: full (whole layers; Megatron's flag); selective is not built");
  cmd->add_option("--recompute-method", flags.method,
                  "with full: uniform (every layer, in groups of --recompute-num-layers) | block (the first "
                  "--recompute-num-layers layers of each pipeline stage)");
  cmd->add_option("--recompute-num-layers", flags.num_layers, "with full: layers per group (uniform) or per stage (block)");
}

}  // namespace quill::cli
