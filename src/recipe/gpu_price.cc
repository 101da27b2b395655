#include "recipe/gpu_price.h"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <string_view>

#include "base/error.h"

namespace quill {
namespace {

struct TableEntry {
  std::string_view gpu;  // matched in the device description
  double usd_per_hour;
  int gpus;
  std::string_view source;
};

// The seed recipe ran on AWS p5en.48xlarge (8 H200); docs/recipes-and-measurement.md §2 adopts its
// on-demand price, which turns the seed's 616.67 tokens/s/GPU into the seed's $3.56 per million tokens.
constexpr std::array kTable = {
    TableEntry{"H200", 63.296, 8, "AWS p5en.48xlarge (8 H200) on demand, $63.296 per hour"},
};

void check_price(double v, const char* what) {
  QUILL_CHECK(std::isfinite(v) && v > 0, "{}: the price per GPU-hour must be a positive number of USD, got {}", what, v);
}

}  // namespace

std::optional<GpuPrice> builtin_gpu_price(const std::string& device) {
  for (const TableEntry& e : kTable) {
    if (device.find(e.gpu) == std::string::npos) continue;
    const double per_gpu = e.usd_per_hour / e.gpus;
    return GpuPrice{per_gpu, fmt::format("quill's built-in table: {} / {} GPUs = ${:.3f} per GPU-hour "
                                         "(docs/recipes-and-measurement.md §2)",
                                         e.source, e.gpus, per_gpu)};
  }
  return std::nullopt;
}

std::optional<GpuPrice> resolve_gpu_price(std::optional<double> flag, const Recipe& recipe, const std::string& device) {
  if (flag) {
    check_price(*flag, "--price-per-gpu-hour");
    return GpuPrice{*flag, "the --price-per-gpu-hour flag"};
  }
  if (recipe.result && recipe.result->usd_per_gpu_hour) {
    check_price(*recipe.result->usd_per_gpu_hour, (recipe.source + ": result.usd_per_gpu_hour").c_str());
    const std::string why = recipe.result->usd_per_gpu_hour_source.value_or("");
    const std::string from = "the recipe's result.usd_per_gpu_hour";
    // A recipe completed before says where its price came from; re-running it keeps that, unnested.
    if (why.rfind(from, 0) == 0) return GpuPrice{*recipe.result->usd_per_gpu_hour, why};
    return GpuPrice{*recipe.result->usd_per_gpu_hour, why.empty() ? from : from + " (" + why + ")"};
  }
  return builtin_gpu_price(device);
}

}  // namespace quill
