// The layout flags (Megatron's names with short forms), shared by `quill train` and `quill plan` so
// that both read the same words into the same LayoutSpec. world = tp x cp x dp x pp ranks.
#pragma once

#include <CLI/CLI.hpp>

#include "parallel/layout_spec.h"

namespace quill::cli {

void add_layout_flags(CLI::App* cmd, LayoutSpec& layout);

}  // namespace quill::cli
