#include "recipe/plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace quill {

// ---- ticks ---------------------------------------------------------------------------------------

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

namespace {

// ---- layout (px) -----------------------------------------------------------------------------------
// 1000 x 760: the whole picture fits a browser window (1200 x 800) at 100%, text at 14-20 px.
constexpr double kWidth = 1000, kLeft = 100, kRight = 30, kPanelHeight = 250;
constexpr double kTop1 = 100, kGap = 95, kBottom = 65;
constexpr double kPlotWidth = kWidth - kLeft - kRight;
constexpr const char* kCandidateColor = "#1f5fa8";  // blue, solid
constexpr const char* kReferenceColor = "#e8710a";  // orange, dashed
constexpr const char* kTimeColor = "#2a8a3e";

struct Frame {
  double top;
  Ticks x, y;
  double px(double v) const { return kLeft + (v - x.lo) / (x.hi - x.lo) * kPlotWidth; }
  double py(double v) const { return top + kPanelHeight - (v - y.lo) / (y.hi - y.lo) * kPanelHeight; }
};

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '&') out += "&amp;";
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else out += c;
  }
  return out;
}

std::string text(double x, double y, double size, const std::string& anchor, const std::string& body,
                 const std::string& extra = "") {
  return fmt::format(R"(<text x="{:.1f}" y="{:.1f}" font-size="{}" text-anchor="{}"{}>{}</text>)", x, y, size, anchor,
                     extra, escape(body));
}

// Grid, tick labels, the frame and both axis labels of one panel.
std::string axes(const Frame& f, const std::string& y_label, const std::string& x_label) {
  std::string s;
  for (double v : f.y.values) {
    const double y = f.py(v);
    s += fmt::format(R"(<line x1="{}" y1="{:.1f}" x2="{}" y2="{:.1f}" stroke="#e3e3e3"/>)", kLeft, y, kLeft + kPlotWidth, y);
    s += text(kLeft - 10, y + 5, 14, "end", tick_label(v, f.y.decimals));
  }
  for (double v : f.x.values) {
    const double x = f.px(v);
    s += fmt::format(R"(<line x1="{:.1f}" y1="{}" x2="{:.1f}" y2="{}" stroke="#e3e3e3"/>)", x, f.top, x, f.top + kPanelHeight);
    s += text(x, f.top + kPanelHeight + 22, 14, "middle", tick_label(v, f.x.decimals));
  }
  s += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#666"/>)", kLeft, f.top, kPlotWidth,
                   kPanelHeight);
  const double mid = f.top + kPanelHeight / 2;
  s += text(28, mid, 16, "middle", y_label, fmt::format(R"svg( transform="rotate(-90 28 {:.1f})")svg", mid));
  s += text(kLeft + kPlotWidth / 2, f.top + kPanelHeight + 48, 16, "middle", x_label);
  return s;
}

std::string polyline(const Frame& f, const std::vector<double>& ys, double scale, const char* color, double width,
                     const char* dash) {
  std::string points;
  for (size_t i = 0; i < ys.size(); ++i)
    if (std::isfinite(ys[i])) points += fmt::format("{:.1f},{:.1f} ", f.px(static_cast<double>(i)), f.py(ys[i] * scale));
  return fmt::format(
      R"(<polyline fill="none" stroke="{}" stroke-width="{}" stroke-dasharray="{}" stroke-linejoin="round" points="{}"/>)",
      color, width, dash, points);
}

std::string window_shade(const Frame& f, int64_t begin, int64_t end) {
  return fmt::format(R"(<rect x="{:.1f}" y="{}" width="{:.1f}" height="{}" fill="#eaf1fb"/>)", f.px(static_cast<double>(begin)),
                     f.top, f.px(static_cast<double>(end)) - f.px(static_cast<double>(begin)), kPanelHeight);
}

// One legend entry: a short line in the series' style, then its name; returns the entry's width.
double legend_entry(std::string& s, double x, double y, const char* color, const char* dash, const std::string& name) {
  s += fmt::format(R"(<line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" stroke="{}" stroke-width="3" stroke-dasharray="{}"/>)",
                   x, y - 5, x + 40, y - 5, color, dash);
  s += text(x + 48, y, 15, "start", name);
  return 48 + 9.0 * static_cast<double>(name.size()) + 30;
}

std::pair<double, Ticks> time_axis(const std::vector<double>& seconds) {
  double hi = 0;
  for (double t : seconds)
    if (std::isfinite(t)) hi = std::max(hi, t);
  const double scale = hi < 1 ? 1000 : 1;  // milliseconds below a second
  return {scale, nice_ticks(0, hi * scale * 1.05, 5)};
}

}  // namespace

std::string run_picture_svg(const RunPicture& p) {
  const size_t steps = std::max({p.loss.size(), p.reference_loss.size(), p.step_time_s.size(), size_t{1}});
  const double height = kTop1 + 2 * kPanelHeight + kGap + kBottom;
  std::string s = fmt::format(
      R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" viewBox="0 0 {} {}" font-family="DejaVu Sans, Arial, sans-serif">)"
      R"(<rect width="100%" height="100%" fill="white"/>)",
      kWidth, height, kWidth, height);
  s += text(kLeft, 34, 20, "start", p.title, R"( font-weight="bold")");

  const Ticks x = nice_ticks(0, static_cast<double>(steps > 1 ? steps - 1 : 1), 10);
  const bool window = p.window_begin >= 0 && p.window_end >= p.window_begin;

  // Legend, above the loss panel.
  double lx = kLeft;
  lx += legend_entry(s, lx, 68, kCandidateColor, "none", "candidate (this run)");
  if (!p.reference_loss.empty()) lx += legend_entry(s, lx, 68, kReferenceColor, "9 6", "reference");
  if (window) {
    s += fmt::format(R"(<rect x="{:.1f}" y="56" width="40" height="16" fill="#eaf1fb" stroke="#b9cbe6"/>)", lx);
    s += text(lx + 48, 68, 15, "start", fmt::format("measured window (steps {}-{})", p.window_begin, p.window_end));
  }

  // Loss: the candidate solid underneath, the reference dashed on top, so both show where they agree.
  double lo = INFINITY, hi = -INFINITY;
  for (const auto* series : {&p.loss, &p.reference_loss})
    for (double v : *series)
      if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  const double margin = std::isfinite(hi - lo) ? (hi - lo) * 0.03 : 0;  // no line drawn on the frame
  const Frame loss{kTop1, x, nice_ticks(lo - margin, hi + margin, 6)};
  if (window) s += window_shade(loss, p.window_begin, p.window_end);
  s += axes(loss, "loss (cross-entropy, nats per token)", "step");
  s += polyline(loss, p.loss, 1, kCandidateColor, 3, "none");
  if (!p.reference_loss.empty()) s += polyline(loss, p.reference_loss, 1, kReferenceColor, 2.5, "9 6");

  // Step time.
  const auto [scale, time_ticks] = time_axis(p.step_time_s);
  const Frame time{kTop1 + kPanelHeight + kGap, x, time_ticks};
  if (window) s += window_shade(time, p.window_begin, p.window_end);
  s += axes(time, scale == 1 ? "step time (s)" : "step time (ms)", "step");
  s += polyline(time, p.step_time_s, scale, kTimeColor, 2.5, "none");
  return s + "</svg>\n";
}

}  // namespace quill
