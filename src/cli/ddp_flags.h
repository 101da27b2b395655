// Megatron's data-parallel communication flags (optim/ddp_config.h), shared by `quill train` and
// `quill plan` so that one command line serves both.
#pragma once

#include <CLI/CLI.hpp>

#include "optim/ddp_config.h"

namespace quill::cli {

// Adds --overlap-grad-reduce, --overlap-param-gather and --ddp-bucket-size.
void add_ddp_flags(CLI::App* cmd, DdpConfig& ddp);

}  // namespace quill::cli
