// The price per GPU-hour that a run's cost (usd_per_million_tokens) is computed with, and where it came
// from: the `--price-per-gpu-hour` flag, else the recipe's own `result.usd_per_gpu_hour`, else quill's
// built-in table (one entry per GPU, each with its source). A run on a device the table does not price
// (the CPU) has no price unless one is given.
#pragma once

#include <optional>
#include <string>

#include "recipe/recipe.h"

namespace quill {

struct GpuPrice {
  double usd_per_gpu_hour = 0;
  std::string source;  // written to result.usd_per_gpu_hour_source
};

// `device`: what ran the recipe, as `quill run` describes it ("NVIDIA H200", "CPU (fp32 reference backend)").
// A quill::Error for a flag or recipe price that is not a positive finite number.
std::optional<GpuPrice> resolve_gpu_price(std::optional<double> flag, const Recipe& recipe, const std::string& device);

// The built-in table's entry for a device, if any.
std::optional<GpuPrice> builtin_gpu_price(const std::string& device);

}  // namespace quill
