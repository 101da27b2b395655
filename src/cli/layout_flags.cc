#include "cli/layout_flags.h"

namespace quill::cli {

void add_layout_flags(CLI::App* cmd, LayoutSpec& layout) {
  cmd->add_option("--dp", layout.dp, "data-parallel ranks");
  cmd->add_option("--tp,--tensor-model-parallel-size", layout.tp, "tensor-parallel ranks");
  cmd->add_option("--pp,--pipeline-model-parallel-size", layout.pp, "pipeline stages");
  cmd->add_option("--cp,--context-parallel-size", layout.cp, "context-parallel ranks");
  cmd->add_option("--ep,--expert-model-parallel-size", layout.ep, "expert-parallel ranks");
  cmd->add_option("--etp,--expert-tensor-parallel-size", layout.etp, "expert tensor-parallel ranks");
  cmd->add_flag("--sp,--sequence-parallel", layout.sequence_parallel, "sequence parallelism (with --tp)");
  cmd->add_option("--pp-layers", layout.pp_layers, "layers per pipeline stage, e.g. 12,10,10,10 (default: even)")
      ->delimiter(',');
  cmd->add_option("--parallel-order", layout.order, "rank order of the axes (Megatron's, default tp-cp-ep-dp-pp)");
}

}  // namespace quill::cli
