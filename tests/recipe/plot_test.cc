// The run picture's axes: round tick values (1, 2 or 5 times a power of ten), labels with units, and
// the reference told apart from the candidate.
#include "recipe/plot.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace quill {
namespace {

TEST(PlotTicks, KnownRanges) {
  Ticks t = nice_ticks(0, 10, 5);
  EXPECT_EQ(t.step, 2);
  EXPECT_EQ(t.values, (std::vector<double>{0, 2, 4, 6, 8, 10}));
  EXPECT_EQ(t.decimals, 0);

  t = nice_ticks(5.6213, 5.7749, 6);  // a loss curve
  EXPECT_DOUBLE_EQ(t.step, 0.05);
  EXPECT_DOUBLE_EQ(t.lo, 5.60);
  EXPECT_DOUBLE_EQ(t.hi, 5.80);
  EXPECT_EQ(t.decimals, 2);
  EXPECT_EQ(tick_label(t.values[1], t.decimals), "5.65");

  t = nice_ticks(0, 13, 10);  // the steps of a 14-step run
  EXPECT_EQ(t.step, 2);
  EXPECT_EQ(t.lo, 0);
  EXPECT_EQ(t.hi, 14);

  t = nice_ticks(0, 77.1, 5);  // step times in ms
  EXPECT_EQ(t.step, 20);
  EXPECT_EQ(t.hi, 80);
}

TEST(PlotTicks, EveryStepIsOneTwoOrFiveTimesAPowerOfTenAndTicksCoverTheRange) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> exponent(-6, 6), unit(0, 1);
  for (int i = 0; i < 2000; ++i) {
    const double scale = std::pow(10.0, exponent(rng));
    const double a = (unit(rng) - 0.5) * scale * 10, b = a + unit(rng) * scale + 1e-3 * scale;
    const Ticks t = nice_ticks(a, b, 5);
    SCOPED_TRACE(::testing::Message() << a << " .. " << b << " step " << t.step);
    const double mantissa = t.step / std::pow(10.0, std::floor(std::log10(t.step) + 1e-9));
    EXPECT_TRUE(std::abs(mantissa - 1) < 1e-9 || std::abs(mantissa - 2) < 1e-9 || std::abs(mantissa - 5) < 1e-9);
    EXPECT_LE(t.lo, a);
    EXPECT_GE(t.hi, b);
    EXPECT_GE(t.values.size(), 3u);
    EXPECT_LE(t.values.size(), 8u);
    for (double v : t.values) EXPECT_NEAR(v / t.step, std::round(v / t.step), 1e-6);
    // The labels print each value exactly at the chosen digits.
    for (double v : t.values) EXPECT_NEAR(std::stod(tick_label(v, t.decimals)), v, t.step * 1e-6);
  }
}

TEST(PlotTicks, FlatAndReversedRanges) {
  Ticks t = nice_ticks(3, 3, 5);
  EXPECT_LT(t.lo, 3);
  EXPECT_GT(t.hi, 3);
  t = nice_ticks(0, 0, 5);
  EXPECT_LT(t.lo, 0);
  EXPECT_GT(t.hi, 0);
  t = nice_ticks(10, 0, 5);
  EXPECT_EQ(t.lo, 0);
  EXPECT_EQ(t.hi, 10);
  EXPECT_EQ(tick_label(-0.0001, 2), "0.00");
}

TEST(PlotSvg, LabelsUnitsLegendAndDistinctStyles) {
  RunPicture p;
  p.title = "tiny <run>";
  for (int i = 0; i < 14; ++i) {
    p.loss.push_back(5.8 - 0.01 * i);
    p.reference_loss.push_back(5.8 - 0.011 * i);
    p.step_time_s.push_back(0.070 + 0.001 * (i % 3));
  }
  p.window_begin = 5;
  p.window_end = 13;
  const std::string svg = run_picture_svg(p);
  EXPECT_NE(svg.find("loss (cross-entropy, nats per token)"), std::string::npos);
  EXPECT_NE(svg.find("step time (ms)"), std::string::npos);  // 70 ms steps are shown in ms
  EXPECT_NE(svg.find(">step<"), std::string::npos);
  EXPECT_NE(svg.find("candidate (this run)"), std::string::npos);
  EXPECT_NE(svg.find(">reference<"), std::string::npos);
  EXPECT_NE(svg.find("measured window (steps 5-13)"), std::string::npos);
  EXPECT_NE(svg.find("tiny &lt;run&gt;"), std::string::npos);  // the title is escaped
  // The candidate solid, the reference dashed, in different colours.
  EXPECT_NE(svg.find(R"(stroke="#1f5fa8" stroke-width="3" stroke-dasharray="none")"), std::string::npos);
  EXPECT_NE(svg.find(R"(stroke="#e8710a" stroke-width="2.5" stroke-dasharray="9 6")"), std::string::npos);
  // Round loss ticks: 5.65, 5.70, ... (never 5.6213).
  EXPECT_NE(svg.find(">5.70<"), std::string::npos);
  EXPECT_NE(svg.find(">60<"), std::string::npos);  // a step-time tick in ms

  p.step_time_s.assign(14, 12.5);  // long steps: seconds
  EXPECT_NE(run_picture_svg(p).find("step time (s)"), std::string::npos);
}

}  // namespace
}  // namespace quill
