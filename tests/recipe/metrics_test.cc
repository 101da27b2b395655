// Result metrics (recipes-and-measurement.md §2) reproduce the seed's numbers from a constructed
// step-time series.
#include <gtest/gtest.h>

#include <cmath>

#include "base/error.h"
#include "recipe/metrics.h"
#include "recipe_test_util.h"

namespace quill {
namespace {

constexpr int64_t kActive = 11173191680;  // Inkling-Small's N

// 20 steps: 5 slow warm-up steps, then 15 steps whose sum gives 616.67 tokens/s/GPU on 32 GPUs,
// alternating +-a around the mean (7 up, 7 down, 1 at the mean) so the CV is a * sqrt(14/15).
std::vector<double> seed_like_steps(double a) {
  const double window_time = 15.0 * 128 * 8192 / (616.67 * 32);
  const double mean = window_time / 15;
  std::vector<double> t(5, 90.0);
  for (int i = 0; i < 14; ++i) t.push_back(mean * (1 + (i % 2 ? -a : a)));
  t.push_back(mean);
  return t;
}

MetricsInput seed_input(double a) {
  MetricsInput in;
  in.step_times_s = seed_like_steps(a);
  in.global_batch = 128;
  in.row_tokens = 8192;
  in.num_gpus = 32;
  in.active_params = kActive;
  in.wall_time_s = 1444.5;
  return in;
}

TEST(Metrics, ReproduceTheSeed) {
  const double a = 0.0523 / std::sqrt(14.0 / 15.0);
  RunMetrics m = compute_metrics(seed_input(a));
  EXPECT_EQ(m.window, (std::array<int64_t, 2>{5, 19}));
  EXPECT_EQ(m.steps_in_window, 15);
  EXPECT_EQ(m.window_tokens, 15728640);
  EXPECT_NEAR(m.tokens_per_s_per_gpu, 616.67, 1e-9);
  EXPECT_NEAR(m.mfu, 616.67 * 6 * 11173191680.0 / 989e12, 1e-15);
  EXPECT_EQ(std::round(m.mfu * 1e4) / 1e4, 0.0418);
  ASSERT_TRUE(m.usd_per_million_tokens);
  EXPECT_EQ(std::round(*m.usd_per_million_tokens * 100) / 100, 3.56);
  EXPECT_NEAR(*m.usd_per_million_tokens, 7.912 / (616.67 * 3600) * 1e6, 1e-12);
  EXPECT_NEAR(m.step_time_cv_percent, 5.23, 1e-9);
  ASSERT_TRUE(m.gpu_hours);
  EXPECT_NEAR(*m.gpu_hours, 12.84, 1e-12);
}

TEST(Metrics, CvIsThePopulationStdOverTheMean) {
  // {2, 4, 4, 4, 5, 5, 7, 9}: mean 5, population std 2 (sample std would be 2.138) -> 40%.
  MetricsInput in;
  in.step_times_s = {100, 100, 2, 4, 4, 4, 5, 5, 7, 9};
  in.window = std::array<int64_t, 2>{2, 9};
  in.global_batch = 4;
  in.row_tokens = 10;
  in.num_gpus = 2;
  in.active_params = 1000;
  RunMetrics m = compute_metrics(in);
  EXPECT_NEAR(m.step_time_cv_percent, 40.0, 1e-12);
  EXPECT_EQ(m.window_tokens, 8 * 4 * 10);
  EXPECT_NEAR(m.tokens_per_s_per_gpu, 320.0 / 40.0 / 2, 1e-12);  // 40 s in the window
  EXPECT_NEAR(*m.usd_per_million_tokens, 7.912 / (4.0 * 3600) * 1e6, 1e-9);
  EXPECT_FALSE(m.gpu_hours);
  in.usd_per_gpu_hour.reset();  // no price: no cost, rather than a made-up one
  EXPECT_FALSE(compute_metrics(in).usd_per_million_tokens);
}

TEST(Metrics, DefaultWindowNeedsEightSteps) {
  EXPECT_EQ(default_window(20), (std::array<int64_t, 2>{5, 19}));
  EXPECT_EQ(default_window(13), (std::array<int64_t, 2>{5, 12}));
  EXPECT_THROW(default_window(12), Error);
  MetricsInput in = seed_input(0.01);
  in.step_times_s.resize(12);
  EXPECT_THROW(compute_metrics(in), Error);
  in.window = std::array<int64_t, 2>{2, 11};  // an explicit window may be shorter
  EXPECT_NO_THROW(compute_metrics(in));
  in.window = std::array<int64_t, 2>{2, 12};
  EXPECT_THROW(compute_metrics(in), Error);
}

TEST(Metrics, FillResultUsesTheSeedsPrecision) {
  Recipe r = read_recipe(test::seed_path());
  RunMetrics m = compute_metrics(seed_input(0.0523 / std::sqrt(14.0 / 15.0)));
  r.result->tokens_per_s_per_gpu.reset();
  r.result->mfu.reset();
  fill_result(r, m, 20, kActive);
  EXPECT_DOUBLE_EQ(*r.result->tokens_per_s_per_gpu, 616.67);
  EXPECT_DOUBLE_EQ(*r.result->mfu, 0.0418);
  EXPECT_DOUBLE_EQ(*r.result->usd_per_million_tokens, 3.56);
  EXPECT_DOUBLE_EQ(*r.result->step_time_cv_percent, 5.23);
  EXPECT_DOUBLE_EQ(*r.result->gpu_hours, 12.84);
  EXPECT_EQ(r.result->window_tokens, 15728640);
  // The filled recipe equals the seed.
  EXPECT_TRUE(r == read_recipe(test::seed_path()));
}

}  // namespace
}  // namespace quill
