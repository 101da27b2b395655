// --fp8-format and --fp8-recipe (Megatron-LM's flag names and values) as one typed value: whether the
// GEMMs of the attention projections, the dense MLP and the experts run in FP8 E4M3 with blockwise
// scales (ops/fp8.h, docs/fp8.md). quill implements one combination, Megatron's "--fp8-format e4m3
// --fp8-recipe blockwise" (Transformer Engine's Float8BlockScaling); every other is refused by name.
#pragma once

#include <string>

namespace quill::ops {

struct Fp8Options {
  bool blockwise_e4m3 = false;
  // Megatron's --no-fp8-wgrad (Transformer Engine's override_linear_precision for wgrad) clears it: the weight
  // gradients of the FP8 matrices from their bf16 operands (the activations and output gradients as the
  // backward has them), in the backend's precision, while their forward and input gradient stay FP8. Measured
  // faster on Hopper at Inkling's shapes (docs/decisions/fp8-blockwise.md, "Weight gradients in bf16").
  bool wgrad = true;
  bool enabled() const { return blockwise_e4m3; }
  // Whether the FP8 matrices' weight gradients run in FP8.
  bool fp8_wgrad() const { return blockwise_e4m3 && wgrad; }
  std::string describe() const {
    return !blockwise_e4m3 ? "off" : wgrad ? "e4m3 blockwise" : "e4m3 blockwise, weight gradients bf16";
  }
};

// From the flags' values, "" for a flag not given, and no_fp8_wgrad for --no-fp8-wgrad. Megatron trains in
// FP8 when --fp8-format is given, with --fp8-recipe defaulting to "delayed"; a recipe without a format changes
// nothing there, which would silently train in bf16 here, so it is refused too, and so is --no-fp8-wgrad
// without FP8 (it would change nothing). Throws naming the flag and what is accepted.
Fp8Options parse_fp8_options(const std::string& format, const std::string& recipe, bool no_fp8_wgrad = false);

}  // namespace quill::ops
