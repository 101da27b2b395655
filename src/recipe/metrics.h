// The result metrics of a run (recipes-and-measurement.md §2), from its per-step times:
//   window              steps [first, last] (0-based, inclusive); default [5, steps-1], which must hold
//                       at least 8 steps
//   window_tokens       steps in window x global_batch x row_tokens
//   tokens_per_s_per_gpu  window_tokens / (sum of the window's step times) / num_gpus
//   mfu                 6 N tokens_per_s_per_gpu / peak (N: active parameters; peak 989e12 FLOP/s,
//                       H100/H200 dense BF16) -- a fraction
//   usd_per_million_tokens  price_per_gpu_hour / (tokens_per_s_per_gpu x 3600) x 1e6
//   step_time_cv_percent    100 x population std / mean of the window's step times -- a percentage
//   gpu_hours           num_gpus x wall time (launch to end, start-up included) / 3600
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "recipe/recipe.h"

namespace quill {

constexpr double kPeakFlopsH100Bf16 = 989e12;
constexpr double kUsdPerGpuHourP5en = 7.912;  // p5en.48xlarge on demand: $63.296/h for 8 GPUs (gpu_price.h)

struct MetricsInput {
  std::vector<double> step_times_s;  // one per optimizer step, step 0 first
  int64_t global_batch = 0;          // rows per step
  int64_t row_tokens = 0;
  int64_t num_gpus = 0;
  int64_t active_params = 0;         // N
  double peak_flops = kPeakFlopsH100Bf16;
  std::optional<double> usd_per_gpu_hour = kUsdPerGpuHourP5en;  // none: no cost figure
  std::optional<std::array<int64_t, 2>> window;  // default: default_window(steps)
  std::optional<double> wall_time_s;             // for gpu_hours
};

struct RunMetrics {
  std::array<int64_t, 2> window{};
  int64_t steps_in_window = 0;
  int64_t window_tokens = 0;
  double window_time_s = 0;
  double tokens_per_s_per_gpu = 0;
  double mfu = 0;
  std::optional<double> usd_per_million_tokens;  // when a price was given
  std::optional<double> usd_per_gpu_hour;
  double step_time_cv_percent = 0;
  std::optional<double> gpu_hours;
  nlohmann::json to_json() const;
};

// [5, steps - 1]; a quill::Error when that leaves fewer than 8 steps.
std::array<int64_t, 2> default_window(int64_t steps);

// A quill::Error for a window outside the steps, a non-positive step time or missing inputs.
RunMetrics compute_metrics(const MetricsInput& in);

// Writes the metrics into the recipe's result section with the seed's precision (tokens/s, $ and
// CV and GPU-hours to 2 decimals, MFU to 4), plus steps_per_run, window, window_tokens, the
// active-parameter count (usd_per_million_tokens null when there was no price).
void fill_result(Recipe& recipe, const RunMetrics& m, int64_t steps, int64_t active_params);

}  // namespace quill
