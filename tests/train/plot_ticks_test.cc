// The run picture's axes: round tick values (1, 2 or 5 times a power of ten) and short labels that
// print them exactly.
#include "train/plot_ticks.h"

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

TEST(PlotTicks, ShortLabelsForSmallAndLargeValues) {
  Ticks t = nice_ticks(0, 1e-5, 6);  // a learning rate
  EXPECT_EQ(short_tick_label(t.values[1], t), "2e-6");
  EXPECT_EQ(short_tick_label(1.2e-5, t), "1.2e-5");
  EXPECT_EQ(short_tick_label(0, t), "0");
  t = nice_ticks(1.1e6, 1.5e6, 5);  // tokens/s of a GPU job
  EXPECT_EQ(short_tick_label(1.2e6, t), "1.2M");
  t = nice_ticks(0, 48000, 5);
  EXPECT_EQ(short_tick_label(20000, t), "20k");
  t = nice_ticks(5.6, 5.8, 5);  // a loss: plain digits
  EXPECT_EQ(short_tick_label(5.65, t), "5.65");
  t = nice_ticks(0, 13, 8);  // steps
  EXPECT_EQ(short_tick_label(12, t), "12");
}

}  // namespace
}  // namespace quill
