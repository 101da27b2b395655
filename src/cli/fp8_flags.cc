#include "cli/fp8_flags.h"

#include "base/error.h"

namespace quill::cli {

void add_fp8_flags(CLI::App* cmd, Fp8Flags& flags) {
  cmd->add_option("--fp8-format", flags.format,
                  "FP8 training (Megatron's flag): e4m3, with --fp8-recipe blockwise; the linear layers of attention, "
                  "MLP and experts in FP8 (docs/fp8.md)");
  cmd->add_option("--fp8-recipe", flags.recipe,
                  "FP8 scaling (Megatron's flag): blockwise (1x128 activation tiles, 128x128 weight blocks)");
  cmd->add_flag("--no-fp8-wgrad", flags.no_wgrad,
                "with FP8: the weight gradients of the FP8 matrices in bf16 from their unquantised operands, the "
                "forward and input gradients still FP8 (Megatron's flag; faster on Hopper at Inkling's shapes: "
                "docs/fp8.md)");
}

ops::Fp8Options Fp8Flags::resolve() const { return ops::parse_fp8_options(format, recipe, no_wgrad); }

}  // namespace quill::cli
