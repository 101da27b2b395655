// The convergence check of a candidate loss curve against a reference (recipes-and-measurement.md
// §4): Megatron-Bridge's validate_convergence with its pipeline thresholds.
//   1. skip the first int(n * 0.20) points of both curves;
//   2. Pearson correlation of the rest >= 0.95;
//   3. point-wise: tolerance by the reference value g (0.10 if g > 2, 0.05 if 0.5 < g <= 2, else 0.02);
//      a point fails when |c - g| / |g| > tol (|c| when g == 0); at most 10% of points fail;
//   4. final loss: |c_last - g_last| / |g_last| <= 0.05;
//   5. outliers of r = c - g: |r - mean(r)| > 3 std(r) (population); at most 10% of points;
//   6. any NaN/Inf loss or gradient norm fails, and so does an undefined correlation (a flat curve).
// Also the strict figure: the maximum relative difference over all steps.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace quill {

struct LossCurve {
  std::vector<double> loss;       // one per step
  std::vector<double> grad_norm;  // one per step, or empty when not recorded
};

// A metrics.jsonl file ("loss" and, when present, "grad_norm" of each line; a null counts as NaN)
// or a plain file of one loss per line ('#' comments and blank lines skipped).
LossCurve read_loss_curve(const std::string& path);

struct ConvergenceThresholds {
  double skip_fraction = 0.20;
  double min_correlation = 0.95;
  double high_loss_tolerance = 0.10;    // g > 2.0
  double medium_loss_tolerance = 0.05;  // 0.5 < g <= 2.0
  double low_loss_tolerance = 0.02;     // g <= 0.5
  double final_loss_tolerance = 0.05;
  double max_failure_ratio = 0.10;      // point-wise failures and outliers
  double outlier_sigma = 3.0;
};

struct PointFailure {
  int64_t step;
  double candidate, reference, relative_diff, tolerance;
};

struct ConvergenceResult {
  bool passed = false;
  int64_t points = 0, skipped = 0, compared = 0;
  std::optional<double> correlation;  // nothing when undefined
  bool correlation_pass = false;
  std::vector<PointFailure> pointwise_failures;
  bool pointwise_pass = false;
  double final_loss_candidate = 0, final_loss_reference = 0, final_loss_difference = 0;
  bool final_loss_pass = false;
  int64_t outlier_count = 0;
  bool outliers_pass = false;
  std::vector<std::string> non_finite;  // "candidate loss step 3: nan"
  bool finite_pass = false;
  bool same_length = true;
  double max_relative_difference = 0;  // strict figure, all steps
  int64_t max_relative_difference_step = 0;
  std::vector<std::string> failed;      // names of the failed rules
  nlohmann::json to_json() const;
};

ConvergenceResult check_convergence(const LossCurve& candidate, const LossCurve& reference,
                                    const ConvergenceThresholds& t = {});

}  // namespace quill
