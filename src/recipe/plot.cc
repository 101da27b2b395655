#include "recipe/plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace quill {

namespace {

constexpr double kWidth = 760, kPanelHeight = 230, kLeft = 70, kRight = 20, kTop = 40, kGap = 60;

struct Axis {
  double lo, hi;
  double map(double v, double pixels_lo, double pixels_hi) const {
    return hi > lo ? pixels_lo + (v - lo) / (hi - lo) * (pixels_hi - pixels_lo) : (pixels_lo + pixels_hi) / 2;
  }
};

Axis axis_of(const std::vector<const std::vector<double>*>& series, bool from_zero) {
  double lo = from_zero ? 0 : INFINITY, hi = -INFINITY;
  for (const auto* s : series)
    for (double v : *s)
      if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  if (!std::isfinite(lo) || !std::isfinite(hi)) return {0, 1};
  const double pad = (hi - lo) * 0.05 + 1e-12;
  return {from_zero ? lo : lo - pad, hi + pad};
}

std::string polyline(const std::vector<double>& ys, size_t steps, const Axis& y, double top, const char* color,
                     const char* dash) {
  std::string points;
  for (size_t i = 0; i < ys.size(); ++i) {
    if (!std::isfinite(ys[i])) continue;
    const double px = kLeft + (steps > 1 ? static_cast<double>(i) / static_cast<double>(steps - 1) : 0.5) *
                                  (kWidth - kLeft - kRight);
    points += fmt::format("{:.1f},{:.1f} ", px, y.map(ys[i], top + kPanelHeight, top));
  }
  return fmt::format(R"(<polyline fill="none" stroke="{}" stroke-width="2" stroke-dasharray="{}" points="{}"/>)",
                     color, dash, points);
}

std::string frame(double top, const Axis& y, const std::string& label, size_t steps) {
  std::string s = fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#999"/>)", kLeft, top,
                              kWidth - kLeft - kRight, kPanelHeight);
  for (int i = 0; i <= 4; ++i) {
    const double v = y.lo + (y.hi - y.lo) * i / 4.0, py = y.map(v, top + kPanelHeight, top);
    s += fmt::format(R"(<text x="{}" y="{:.1f}" font-size="11" text-anchor="end">{:.4g}</text>)", kLeft - 6, py + 4, v);
  }
  s += fmt::format(R"svg(<text x="14" y="{:.1f}" font-size="12" transform="rotate(-90 14 {:.1f})">{}</text>)svg",
                   top + kPanelHeight / 2, top + kPanelHeight / 2, label);
  s += fmt::format(R"(<text x="{}" y="{:.1f}" font-size="11">step 0</text>)", kLeft, top + kPanelHeight + 16);
  s += fmt::format(R"(<text x="{}" y="{:.1f}" font-size="11" text-anchor="end">step {}</text>)", kWidth - kRight,
                   top + kPanelHeight + 16, steps ? steps - 1 : 0);
  return s;
}

}  // namespace

std::string run_picture_svg(const RunPicture& p) {
  const size_t steps = std::max({p.loss.size(), p.reference_loss.size(), p.step_time_s.size(), size_t{1}});
  const double height = kTop + 2 * kPanelHeight + kGap + 40;
  std::string s = fmt::format(
      R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif">)"
      R"(<rect width="100%" height="100%" fill="white"/><text x="{}" y="24" font-size="15">{}</text>)",
      kWidth, height, kLeft, p.title);

  // Loss panel.
  const Axis loss_axis = axis_of({&p.loss, &p.reference_loss}, false);
  const double top1 = kTop;
  if (p.window_begin >= 0 && steps > 1) {
    auto x = [&](double i) { return kLeft + i / static_cast<double>(steps - 1) * (kWidth - kLeft - kRight); };
    for (double t : {top1, top1 + kPanelHeight + kGap})
      s += fmt::format(R"(<rect x="{:.1f}" y="{}" width="{:.1f}" height="{}" fill="#eef4ff"/>)", x(p.window_begin), t,
                       x(p.window_end) - x(p.window_begin), kPanelHeight);
  }
  s += frame(top1, loss_axis, "loss", steps);
  if (!p.reference_loss.empty()) s += polyline(p.reference_loss, steps, loss_axis, top1, "#d62728", "6 4");
  s += polyline(p.loss, steps, loss_axis, top1, "#1f77b4", "none");
  s += fmt::format(R"(<text x="{}" y="{}" font-size="12" fill="#1f77b4">candidate</text>)", kWidth - 200, top1 + 16);
  if (!p.reference_loss.empty())
    s += fmt::format(R"(<text x="{}" y="{}" font-size="12" fill="#d62728">reference</text>)", kWidth - 110, top1 + 16);

  // Step-time panel.
  const double top2 = top1 + kPanelHeight + kGap;
  const Axis time_axis = axis_of({&p.step_time_s}, true);
  s += frame(top2, time_axis, "step time (s)", steps);
  s += polyline(p.step_time_s, steps, time_axis, top2, "#2ca02c", "none");
  if (p.window_begin >= 0)
    s += fmt::format(R"(<text x="{}" y="{}" font-size="11" fill="#555">shaded: measured window, steps {}-{}</text>)",
                     kLeft + 8, top2 + 16, p.window_begin, p.window_end);
  return s + "</svg>\n";
}

}  // namespace quill
