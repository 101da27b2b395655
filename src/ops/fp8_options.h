// --fp8-format and --fp8-recipe (Megatron-LM's flag names and values) as one typed value: whether the
// GEMMs of the attention projections, the dense MLP and the experts run in FP8 E4M3 with blockwise
// scales (ops/fp8.h, docs/fp8.md). quill implements one combination, Megatron's "--fp8-format e4m3
// --fp8-recipe blockwise" (Transformer Engine's Float8BlockScaling); every other is refused by name.
#pragma once

#include <string>

namespace quill::ops {

struct Fp8Options {
  bool blockwise_e4m3 = false;
  bool enabled() const { return blockwise_e4m3; }
  std::string describe() const { return blockwise_e4m3 ? "e4m3 blockwise" : "off"; }
};

// From the flags' values, "" for a flag not given. Megatron trains in FP8 when --fp8-format is given,
// with --fp8-recipe defaulting to "delayed"; a recipe without a format changes nothing there, which
// would silently train in bf16 here, so it is refused too. Throws naming the flag and what is accepted.
Fp8Options parse_fp8_options(const std::string& format, const std::string& recipe);

}  // namespace quill::ops
