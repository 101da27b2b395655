#include "recipe/convergence.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <sstream>

#include "base/error.h"
#include "base/file_util.h"

namespace quill {

namespace {

// Python's json writes NaN, Infinity and -Infinity, which are not JSON; read them as null.
std::string python_json_to_json(const std::string& line) {
  std::string out;
  bool in_string = false;
  size_t i = 0;
  while (i < line.size()) {
    char c = line[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < line.size()) out += line[++i];
      else if (c == '"') in_string = false;
      ++i;
      continue;
    }
    bool replaced = false;
    for (const char* word : {"-Infinity", "Infinity", "NaN"}) {
      size_t n = std::char_traits<char>::length(word);
      if (line.compare(i, n, word) == 0) {
        out += "null";
        i += n;
        replaced = true;
        break;
      }
    }
    if (replaced) continue;
    if (c == '"') in_string = true;
    out += c;
    ++i;
  }
  return out;
}

double json_number(const nlohmann::json& j, const std::string& where) {
  if (j.is_null()) return std::nan("");
  QUILL_CHECK(j.is_number(), "{}: expected a number, got {}", where, j.dump());
  return j.get<double>();
}

}  // namespace

LossCurve read_loss_curve(const std::string& path) {
  QUILL_CHECK(path_exists(path), "{}: no such loss curve file", path);
  std::istringstream in(read_file(path));
  LossCurve curve;
  std::string line;
  int64_t line_no = 0;
  bool json_lines = false, any = false;
  while (std::getline(in, line)) {
    ++line_no;
    size_t start = line.find_first_not_of(" \t\r");
    if (start == std::string::npos || line[start] == '#') continue;
    if (!any) json_lines = line[start] == '{';
    any = true;
    const std::string where = fmt::format("{}:{}", path, line_no);
    if (json_lines) {
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(python_json_to_json(line));
      } catch (const nlohmann::json::exception& e) {
        QUILL_FAIL("{}: malformed JSON line: {}", where, e.what());
      }
      QUILL_CHECK(j.is_object() && j.contains("loss"), "{}: a metrics line needs a \"loss\" field", where);
      curve.loss.push_back(json_number(j["loss"], where + " loss"));
      if (j.contains("grad_norm")) curve.grad_norm.push_back(json_number(j["grad_norm"], where + " grad_norm"));
    } else {
      std::string text = line.substr(start);
      while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
      char* end = nullptr;
      double v = std::strtod(text.c_str(), &end);
      QUILL_CHECK(end != text.c_str() && *end == '\0', "{}: expected one number per line, got '{}'", where, text);
      curve.loss.push_back(v);
    }
  }
  QUILL_CHECK(!curve.loss.empty(), "{}: no loss values", path);
  QUILL_CHECK(curve.grad_norm.empty() || curve.grad_norm.size() == curve.loss.size(),
              "{}: {} lines have a grad_norm, {} have a loss", path, curve.grad_norm.size(), curve.loss.size());
  return curve;
}

namespace {

double relative_diff(double c, double g) { return g != 0 ? std::fabs(c - g) / std::fabs(g) : std::fabs(c); }

void find_non_finite(const std::vector<double>& v, const char* what, std::vector<std::string>& out) {
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i])) out.push_back(fmt::format("{} step {}: {}", what, i, v[i]));
}

std::optional<double> pearson(const std::vector<double>& x, const std::vector<double>& y) {
  const size_t n = x.size();
  if (n < 2) return std::nullopt;
  double mx = 0, my = 0;
  for (size_t i = 0; i < n; ++i) {
    mx += x[i];
    my += y[i];
  }
  mx /= static_cast<double>(n);
  my /= static_cast<double>(n);
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < n; ++i) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
    syy += (y[i] - my) * (y[i] - my);
  }
  if (sxx <= 0 || syy <= 0) return std::nullopt;  // a flat curve: undefined
  double r = sxy / std::sqrt(sxx * syy);
  if (!std::isfinite(r)) return std::nullopt;
  return r;
}

}  // namespace

ConvergenceResult check_convergence(const LossCurve& cand, const LossCurve& ref, const ConvergenceThresholds& t) {
  ConvergenceResult r;
  find_non_finite(cand.loss, "candidate loss", r.non_finite);
  find_non_finite(cand.grad_norm, "candidate grad_norm", r.non_finite);
  find_non_finite(ref.loss, "reference loss", r.non_finite);
  find_non_finite(ref.grad_norm, "reference grad_norm", r.non_finite);
  r.finite_pass = r.non_finite.empty();
  r.same_length = cand.loss.size() == ref.loss.size() && !cand.loss.empty();
  r.points = static_cast<int64_t>(std::min(cand.loss.size(), ref.loss.size()));

  // The strict figure over all steps.
  for (int64_t i = 0; i < r.points; ++i) {
    double d = relative_diff(cand.loss[i], ref.loss[i]);
    if (!(d <= r.max_relative_difference)) {  // NaN wins
      r.max_relative_difference = d;
      r.max_relative_difference_step = i;
    }
  }

  r.skipped = static_cast<int64_t>(static_cast<double>(r.points) * t.skip_fraction);
  std::vector<double> c(cand.loss.begin() + r.skipped, cand.loss.begin() + r.points);
  std::vector<double> g(ref.loss.begin() + r.skipped, ref.loss.begin() + r.points);
  r.compared = static_cast<int64_t>(c.size());
  const double n = static_cast<double>(r.compared);

  if (r.compared > 0 && r.finite_pass) {
    r.correlation = pearson(c, g);
    r.correlation_pass = r.correlation && *r.correlation >= t.min_correlation;

    for (int64_t i = 0; i < r.compared; ++i) {
      double tol = g[i] > 2.0 ? t.high_loss_tolerance : g[i] > 0.5 ? t.medium_loss_tolerance : t.low_loss_tolerance;
      double d = relative_diff(c[i], g[i]);
      if (d > tol) r.pointwise_failures.push_back({r.skipped + i, c[i], g[i], d, tol});
    }
    r.pointwise_pass = static_cast<double>(r.pointwise_failures.size()) / n <= t.max_failure_ratio;

    r.final_loss_candidate = c.back();
    r.final_loss_reference = g.back();
    r.final_loss_difference = relative_diff(c.back(), g.back());
    r.final_loss_pass = r.final_loss_difference <= t.final_loss_tolerance;

    double mean = 0;
    for (int64_t i = 0; i < r.compared; ++i) mean += c[i] - g[i];
    mean /= n;
    double var = 0;
    for (int64_t i = 0; i < r.compared; ++i) var += (c[i] - g[i] - mean) * (c[i] - g[i] - mean);
    const double sd = std::sqrt(var / n);  // population
    for (int64_t i = 0; i < r.compared; ++i)
      if (std::fabs(c[i] - g[i] - mean) > t.outlier_sigma * sd) ++r.outlier_count;
    r.outliers_pass = static_cast<double>(r.outlier_count) / n <= t.max_failure_ratio;
  }

  if (!r.same_length) r.failed.push_back("same_length");
  if (!r.finite_pass) r.failed.push_back("finite");
  if (!r.correlation_pass) r.failed.push_back("correlation");
  if (!r.pointwise_pass) r.failed.push_back("pointwise");
  if (!r.final_loss_pass) r.failed.push_back("final_loss");
  if (!r.outliers_pass) r.failed.push_back("outliers");
  r.passed = r.failed.empty();
  return r;
}

nlohmann::json ConvergenceResult::to_json() const {
  auto num = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
  nlohmann::json j;
  j["result"] = passed ? "pass" : "fail";
  j["points"] = points;
  j["skipped"] = skipped;
  j["compared"] = compared;
  j["correlation"] = correlation ? nlohmann::json(*correlation) : nlohmann::json(nullptr);
  j["final_loss_candidate"] = num(final_loss_candidate);
  j["final_loss_reference"] = num(final_loss_reference);
  j["final_loss_difference"] = num(final_loss_difference);
  j["pointwise_failures"] = pointwise_failures.size();
  j["pointwise_failure_ratio"] = compared ? static_cast<double>(pointwise_failures.size()) / compared : 0.0;
  j["outlier_count"] = outlier_count;
  j["max_relative_difference"] = num(max_relative_difference);
  j["max_relative_difference_step"] = max_relative_difference_step;
  nlohmann::json failures = nlohmann::json::array();
  for (const PointFailure& f : pointwise_failures)
    failures.push_back({{"step", f.step}, {"candidate", f.candidate}, {"reference", f.reference},
                        {"relative_diff", f.relative_diff}, {"tolerance", f.tolerance}});
  j["pointwise_failure_points"] = failures;
  j["non_finite"] = non_finite;
  auto verdict = [](bool ok) { return ok ? "pass" : "fail"; };
  j["checks"] = {{"same_length", verdict(same_length)}, {"finite", verdict(finite_pass)},
                 {"correlation", verdict(correlation_pass)}, {"pointwise", verdict(pointwise_pass)},
                 {"final_loss", verdict(final_loss_pass)}, {"outliers", verdict(outliers_pass)}};
  j["failed"] = failed;
  return j;
}

}  // namespace quill
