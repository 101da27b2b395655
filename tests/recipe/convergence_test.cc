// The convergence check (recipes-and-measurement.md §4): curves that fail each rule in turn, one
// that passes, NaN, a flat curve; and the loss-curve readers.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "base/error.h"
#include "base/file_util.h"
#include "recipe/convergence.h"
#include "recipe_test_util.h"

namespace quill {
namespace {

// A falling loss, 3.0 down to 1.1 over 20 steps: tolerances 0.10 (g > 2) and 0.05 (g <= 2) both occur.
LossCurve falling(int n = 20) {
  LossCurve c;
  for (int i = 0; i < n; ++i) c.loss.push_back(3.0 - 0.1 * i);
  return c;
}

std::vector<std::string> failed(const ConvergenceResult& r) { return r.failed; }
using Names = std::vector<std::string>;

TEST(Convergence, CloseCurvesPass) {
  LossCurve g = falling(), c = g;
  for (size_t i = 0; i < c.loss.size(); ++i) c.loss[i] *= 1 + 1e-3 * std::sin(static_cast<double>(i));
  ConvergenceResult r = check_convergence(c, g);
  EXPECT_TRUE(r.passed) << r.to_json().dump(2);
  EXPECT_EQ(r.points, 20);
  EXPECT_EQ(r.skipped, 4);  // int(20 * 0.2): steps 4..19 remain
  EXPECT_EQ(r.compared, 16);
  EXPECT_GT(*r.correlation, 0.9999);
  EXPECT_TRUE(r.pointwise_failures.empty());
  EXPECT_EQ(r.outlier_count, 0);
  EXPECT_NEAR(r.final_loss_difference, 1e-3 * std::fabs(std::sin(19.0)), 1e-12);
  double strict = 0;
  for (int i = 0; i < 20; ++i) strict = std::max(strict, 1e-3 * std::fabs(std::sin(static_cast<double>(i))));
  EXPECT_NEAR(r.max_relative_difference, strict, 1e-12);
  nlohmann::json j = r.to_json();
  EXPECT_EQ(j["result"], "pass");
  EXPECT_EQ(j["checks"]["correlation"], "pass");
  EXPECT_EQ(j["pointwise_failures"], 0);
}

TEST(Convergence, IdenticalCurvesPassWithZeroDifference) {
  ConvergenceResult r = check_convergence(falling(), falling());
  EXPECT_TRUE(r.passed);
  EXPECT_DOUBLE_EQ(*r.correlation, 1.0);
  EXPECT_EQ(r.max_relative_difference, 0.0);
}

TEST(Convergence, UncorrelatedWigglesFailCorrelationOnly) {
  LossCurve g, c;
  for (int i = 0; i < 20; ++i) {
    g.loss.push_back(3.0 + 0.01 * std::sin(i * 1.0));
    c.loss.push_back(3.0 + 0.01 * std::cos(i * 1.0));
  }
  ConvergenceResult r = check_convergence(c, g);
  EXPECT_EQ(failed(r), (Names{"correlation"})) << r.to_json().dump(2);
  EXPECT_LT(*r.correlation, 0.95);
}

TEST(Convergence, TwoPointsOffFailPointwiseOnly) {
  LossCurve g = falling(), c = g;
  c.loss[12] *= 1.07;  // g = 1.8: tolerance 0.05
  c.loss[14] *= 1.07;  // g = 1.6
  ConvergenceResult r = check_convergence(c, g);
  EXPECT_EQ(failed(r), (Names{"pointwise"})) << r.to_json().dump(2);
  ASSERT_EQ(r.pointwise_failures.size(), 2u);  // 2 / 16 = 12.5% > 10%
  EXPECT_EQ(r.pointwise_failures[0].step, 12);
  EXPECT_DOUBLE_EQ(r.pointwise_failures[0].tolerance, 0.05);
  // One point off is within the 10% allowance.
  LossCurve one = g;
  one.loss[12] *= 1.07;
  EXPECT_TRUE(check_convergence(one, g).passed);
  // Above 2.0 the tolerance is 10%: a 7% difference passes there.
  LossCurve high = g;
  high.loss[5] *= 1.07;
  high.loss[6] *= 1.07;
  EXPECT_TRUE(check_convergence(high, g).pointwise_failures.empty());
}

TEST(Convergence, FinalLossOffFailsFinalLossOnly) {
  LossCurve g = falling(), c = g;
  c.loss[19] *= 1.06;  // g = 1.1: 6% > 5%
  ConvergenceResult r = check_convergence(c, g);
  EXPECT_EQ(failed(r), (Names{"final_loss"})) << r.to_json().dump(2);
  EXPECT_NEAR(r.final_loss_difference, 0.06, 1e-12);
  EXPECT_EQ(r.pointwise_failures.size(), 1u);
  EXPECT_EQ(r.outlier_count, 1);
}

TEST(Convergence, TwoOppositeJumpsFailOutliersOnly) {
  // With population std, k of n points lie beyond 3 sigma only when k < n / 9; with 19 compared
  // points two opposite residuals +-d (the rest 0) sit at sqrt(19 / 2) = 3.08 sigma: 2/19 > 10%.
  LossCurve g = falling(23), c = g;  // skip int(4.6) = 4, 19 compared
  for (double& v : g.loss) v += 1.0;   // keep every g above 0.5
  c = g;
  c.loss[8] += 0.01;
  c.loss[15] -= 0.01;
  ConvergenceResult r = check_convergence(c, g);
  EXPECT_EQ(r.compared, 19);
  EXPECT_EQ(r.outlier_count, 2);
  EXPECT_EQ(failed(r), (Names{"outliers"})) << r.to_json().dump(2);
}

TEST(Convergence, NanOrInfFails) {
  LossCurve g = falling(), c = g;
  c.loss[1] = std::nan("");  // even inside the skipped points
  ConvergenceResult r = check_convergence(c, g);
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.failed.front(), "finite");
  ASSERT_EQ(r.non_finite.size(), 1u);
  EXPECT_NE(r.non_finite[0].find("candidate loss step 1"), std::string::npos);
  EXPECT_FALSE(r.to_json().dump().empty());  // NaN figures become null, not invalid JSON

  LossCurve gn = falling(), cn = gn;
  gn.grad_norm.assign(20, 1.0);
  cn.grad_norm.assign(20, 1.0);
  cn.grad_norm[7] = INFINITY;
  ConvergenceResult s = check_convergence(cn, gn);
  EXPECT_FALSE(s.passed);
  EXPECT_EQ(s.failed.front(), "finite");
}

TEST(Convergence, FlatCurveCannotPass) {
  LossCurve g, c;
  g.loss.assign(20, 2.0);
  c.loss.assign(20, 2.0);
  ConvergenceResult r = check_convergence(c, g);
  EXPECT_FALSE(r.passed);
  EXPECT_FALSE(r.correlation);
  EXPECT_EQ(failed(r), (Names{"correlation"}));
  EXPECT_TRUE(r.to_json()["correlation"].is_null());
}

TEST(Convergence, DifferentLengthsFail) {
  ConvergenceResult r = check_convergence(falling(19), falling(20));
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.failed.front(), "same_length");
}

TEST(Convergence, ZeroReferenceUsesTheCandidatesMagnitude) {
  LossCurve g, c;
  for (int i = 0; i < 10; ++i) {
    g.loss.push_back(i == 9 ? 0.0 : 0.4 - 0.04 * i);
    c.loss.push_back(i == 9 ? 0.01 : 0.4 - 0.04 * i);
  }
  ConvergenceResult r = check_convergence(c, g);
  EXPECT_NEAR(r.final_loss_difference, 0.01, 1e-15);
  EXPECT_TRUE(r.final_loss_pass);
  EXPECT_EQ(r.pointwise_failures.size(), 0u);  // 0.01 <= 0.02
}

TEST(Convergence, ReadsMetricsJsonlAndPlainFiles) {
  const std::string jsonl = test::temp_path("metrics.jsonl");
  write_file_atomic(jsonl,
                    "{\"step\": 0, \"loss\": 2.5, \"grad_norm\": 1.5}\n"
                    "{\"step\": 1, \"loss\": 2.25, \"grad_norm\": null}\n"
                    "{\"step\": 2, \"loss\": NaN, \"grad_norm\": Infinity, \"note\": \"NaN inside a string\"}\n");
  LossCurve a = read_loss_curve(jsonl);
  ASSERT_EQ(a.loss.size(), 3u);
  EXPECT_EQ(a.loss[1], 2.25);
  EXPECT_TRUE(std::isnan(a.loss[2]));
  EXPECT_TRUE(std::isnan(a.grad_norm[1]));
  EXPECT_TRUE(std::isnan(a.grad_norm[2]));

  const std::string plain = test::temp_path("loss.txt");
  write_file_atomic(plain, "# loss per step\n2.5\n\n2.25 \nnan\n");
  LossCurve b = read_loss_curve(plain);
  ASSERT_EQ(b.loss.size(), 3u);
  EXPECT_TRUE(b.grad_norm.empty());
  EXPECT_TRUE(std::isnan(b.loss[2]));

  const std::string bad = test::temp_path("bad.txt");
  write_file_atomic(bad, "2.5\nabc\n");
  EXPECT_THROW(read_loss_curve(bad), Error);
  write_file_atomic(bad, "{\"step\": 0}\n");
  EXPECT_THROW(read_loss_curve(bad), Error);
  EXPECT_THROW(read_loss_curve(test::temp_path("missing.jsonl")), Error);
}

}  // namespace
}  // namespace quill
