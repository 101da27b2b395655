// Megatron's FP8 flags, --fp8-format, --fp8-recipe and --no-fp8-wgrad, shared by `quill train` and `quill plan` so that
// both read the same words into the same value (ops/fp8_options.h, docs/fp8.md).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "ops/fp8_options.h"

namespace quill::cli {

struct Fp8Flags {
  std::string format, recipe;
  bool no_wgrad = false;  // --no-fp8-wgrad
  // Refuses what ops::parse_fp8_options refuses.
  ops::Fp8Options resolve() const;
};
void add_fp8_flags(CLI::App* cmd, Fp8Flags& flags);

}  // namespace quill::cli
