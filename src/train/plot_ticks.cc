#include "train/plot_ticks.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace quill {

Ticks nice_ticks(double lo, double hi, int target) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) lo = 0, hi = 1;
  if (hi < lo) std::swap(lo, hi);
  if (hi - lo <= 1e-12 * std::max(1.0, std::abs(hi))) {  // a flat series: a little room around it
    const double pad = lo == 0 ? 1 : std::abs(lo) * 0.05;
    lo -= pad, hi += pad;
  }
  target = std::max(target, 2);
  // Steps of 1, 2 and 5 times the powers of ten around range / target; the one whose tick count is
  // nearest the target wins (the larger step on a tie: fewer, rounder labels).
  const int e = static_cast<int>(std::floor(std::log10((hi - lo) / target)));
  Ticks best;
  int64_t best_miss = -1;
  for (int p = e - 1; p <= e + 1; ++p)
    for (double m : {1.0, 2.0, 5.0}) {
      const double step = m * std::pow(10.0, p);
      const double first = std::floor(lo / step + 1e-9), last = std::ceil(hi / step - 1e-9);
      const int64_t n = static_cast<int64_t>(last - first) + 1;
      const int64_t miss = std::abs(n - target);
      if (best_miss >= 0 && miss > best_miss) continue;
      if (best_miss >= 0 && miss == best_miss && step < best.step) continue;
      best_miss = miss;
      best.step = step;
      best.lo = first * step;
      best.hi = last * step;
      best.values.clear();
      for (int64_t i = 0; i < n; ++i) best.values.push_back((first + static_cast<double>(i)) * step);
    }
  best.decimals = std::max(0, -static_cast<int>(std::floor(std::log10(best.step) + 1e-9)));
  return best;
}

std::string tick_label(double value, int decimals) {
  std::string s = fmt::format("{:.{}f}", value, decimals);
  if (s.find_first_not_of("-0.") == std::string::npos && s[0] == '-') s.erase(0, 1);  // "-0.00" -> "0.00"
  return s;
}

}  // namespace quill

namespace quill {

namespace {

// "1.2e-05" -> "1.2e-5": the exponent without its padding zero and plus sign.
std::string tidy_exponent(std::string s) {
  const size_t e = s.find('e');
  if (e == std::string::npos) return s;
  std::string exponent = s.substr(e + 1);
  const bool negative = !exponent.empty() && exponent[0] == '-';
  if (!exponent.empty() && (exponent[0] == '-' || exponent[0] == '+')) exponent.erase(0, 1);
  while (exponent.size() > 1 && exponent[0] == '0') exponent.erase(0, 1);
  return s.substr(0, e) + "e" + (negative ? "-" : "") + exponent;
}

}  // namespace

std::string short_tick_label(double value, const Ticks& t) {
  const double largest = std::max(std::abs(t.lo), std::abs(t.hi));
  if (std::abs(value) < t.step * 1e-9) return "0";
  if (largest >= 1e4) {
    // Thousands or millions, with the digits the step needs at that unit.
    const double unit = largest >= 1e6 ? 1e6 : 1e3;
    const int decimals = std::max(0, -static_cast<int>(std::floor(std::log10(t.step / unit) + 1e-9)));
    return tick_label(value / unit, decimals) + (unit == 1e6 ? "M" : "k");
  }
  if (t.decimals <= 3) return tick_label(value, t.decimals);
  // Small values: the significant digits down to the step's, as a power of ten.
  const int step_exponent = static_cast<int>(std::floor(std::log10(t.step) + 1e-9));
  const int value_exponent = static_cast<int>(std::floor(std::log10(std::abs(value)) + 1e-9));
  const int digits = std::max(1, value_exponent - step_exponent + 1);
  return tidy_exponent(fmt::format("{:.{}e}", value, digits - 1));
}

}  // namespace quill
