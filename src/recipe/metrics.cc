#include "recipe/metrics.h"

#include <cmath>

#include "base/error.h"

namespace quill {

std::array<int64_t, 2> default_window(int64_t steps) {
  QUILL_CHECK(steps - 5 >= 8,
              "a {}-step run is too short to measure: the default window [5, steps - 1] needs at least 13 steps "
              "(8 in the window)",
              steps);
  return {5, steps - 1};
}

RunMetrics compute_metrics(const MetricsInput& in) {
  const int64_t steps = static_cast<int64_t>(in.step_times_s.size());
  QUILL_CHECK(in.global_batch > 0 && in.row_tokens > 0 && in.num_gpus > 0,
              "metrics: global_batch ({}), row_tokens ({}) and num_gpus ({}) must be positive", in.global_batch,
              in.row_tokens, in.num_gpus);
  RunMetrics m;
  m.window = in.window ? *in.window : default_window(steps);
  const int64_t first = m.window[0], last = m.window[1];
  QUILL_CHECK(first >= 0 && first <= last && last < steps, "metrics: window [{}, {}] is outside the run's {} steps",
              first, last, steps);
  m.steps_in_window = last - first + 1;
  m.window_tokens = m.steps_in_window * in.global_batch * in.row_tokens;
  double sum = 0;
  for (int64_t s = first; s <= last; ++s) {
    double t = in.step_times_s[static_cast<size_t>(s)];
    QUILL_CHECK(std::isfinite(t) && t > 0, "metrics: step {} has time {} s", s, t);
    sum += t;
  }
  m.window_time_s = sum;
  const double mean = sum / static_cast<double>(m.steps_in_window);
  double var = 0;
  for (int64_t s = first; s <= last; ++s) {
    double d = in.step_times_s[static_cast<size_t>(s)] - mean;
    var += d * d;
  }
  var /= static_cast<double>(m.steps_in_window);  // population variance
  m.step_time_cv_percent = 100.0 * std::sqrt(var) / mean;
  m.tokens_per_s_per_gpu = static_cast<double>(m.window_tokens) / sum / static_cast<double>(in.num_gpus);
  m.mfu = 6.0 * static_cast<double>(in.active_params) * m.tokens_per_s_per_gpu / in.peak_flops;
  if (in.usd_per_gpu_hour) {
    m.usd_per_gpu_hour = *in.usd_per_gpu_hour;
    m.usd_per_million_tokens = *in.usd_per_gpu_hour / (m.tokens_per_s_per_gpu * 3600.0) * 1e6;
  }
  if (in.wall_time_s) m.gpu_hours = static_cast<double>(in.num_gpus) * *in.wall_time_s / 3600.0;
  return m;
}

nlohmann::json RunMetrics::to_json() const {
  nlohmann::json j;
  j["window"] = window;
  j["steps_in_window"] = steps_in_window;
  j["window_tokens"] = window_tokens;
  j["window_time_s"] = window_time_s;
  j["tokens_per_s_per_gpu"] = tokens_per_s_per_gpu;
  j["mfu"] = mfu;
  j["usd_per_million_tokens"] = usd_per_million_tokens ? nlohmann::json(*usd_per_million_tokens) : nlohmann::json(nullptr);
  j["usd_per_gpu_hour"] = usd_per_gpu_hour ? nlohmann::json(*usd_per_gpu_hour) : nlohmann::json(nullptr);
  j["step_time_cv_percent"] = step_time_cv_percent;
  j["gpu_hours"] = gpu_hours ? nlohmann::json(*gpu_hours) : nlohmann::json(nullptr);
  return j;
}

namespace {
double round_to(double v, int decimals) {
  double scale = std::pow(10.0, decimals);
  return std::round(v * scale) / scale;
}
}  // namespace

void fill_result(Recipe& recipe, const RunMetrics& m, int64_t steps, int64_t active_params) {
  Result& r = recipe.result ? *recipe.result : recipe.result.emplace();
  r.tokens_per_s_per_gpu = round_to(m.tokens_per_s_per_gpu, 2);
  r.usd_per_million_tokens.reset();
  if (m.usd_per_million_tokens) r.usd_per_million_tokens = round_to(*m.usd_per_million_tokens, 2);
  r.step_time_cv_percent = round_to(m.step_time_cv_percent, 2);
  r.mfu = round_to(m.mfu, 4);
  if (!r.active_params) r.active_params.emplace();
  r.active_params->count = active_params;
  r.steps_per_run = steps;
  r.window = std::vector<int64_t>{m.window[0], m.window[1]};
  r.window_tokens = m.window_tokens;
  // The seed's 2 decimals, except that a short run keeps 3 significant digits rather than read 0.00.
  if (m.gpu_hours)
    r.gpu_hours = *m.gpu_hours >= 0.005 || *m.gpu_hours <= 0
                      ? round_to(*m.gpu_hours, 2)
                      : round_to(*m.gpu_hours, 2 - static_cast<int>(std::floor(std::log10(*m.gpu_hours))));
}

}  // namespace quill
