#include "cli/ddp_flags.h"

namespace quill::cli {

void add_ddp_flags(CLI::App* cmd, DdpConfig& ddp) {
  cmd->add_flag("--overlap-grad-reduce", ddp.overlap_grad_reduce,
                "start each gradient bucket's reduce-scatter during the backward, as soon as its layers are done "
                "(Megatron's flag; the same bits as without it)");
  cmd->add_flag("--overlap-param-gather", ddp.overlap_param_gather,
                "all-gather each bucket's updated weights in the next forward, just ahead of their first use "
                "(Megatron's flag; the same bits as without it)");
  cmd->add_option("--ddp-bucket-size", ddp.bucket_size,
                  "elements per gradient bucket, whole layers each (default max(40M, 1M x dp), Megatron's)");
}

}  // namespace quill::cli
