#include "train/run_plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/file_util.h"
#include "train/expert_load.h"
#include "train/plot_ticks.h"

namespace quill {

namespace {

// ---- records ---------------------------------------------------------------------------------------

double number_or_nan(const nlohmann::json& record, const char* key) {
  const auto it = record.find(key);
  if (it == record.end() || !it->is_number()) return NAN;  // absent, or null (nlohmann writes NaN as null)
  const double v = it->get<double>();
  return std::isfinite(v) ? v : NAN;
}

std::optional<PlotPoint> point_of(const std::string& line) {
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  const auto step = j.find("step");
  if (step == j.end() || !step->is_number_integer()) return std::nullopt;
  PlotPoint p;
  p.step = step->get<int64_t>();
  p.loss = number_or_nan(j, "loss");
  p.valid_loss = number_or_nan(j, "valid_loss");
  p.lr = number_or_nan(j, "lr");
  p.grad_norm = number_or_nan(j, "grad_norm");
  const double tokens = number_or_nan(j, "tokens"), seconds = number_or_nan(j, "step_time_s");
  if (tokens >= 0 && seconds > 0) p.tokens_per_s = tokens / seconds;
  // expert_tokens: per MoE layer, per expert, the step's routed tokens over the world.
  const auto counts = j.find("expert_tokens");
  if (counts != j.end() && counts->is_array() && !counts->empty()) {
    std::vector<std::vector<int64_t>> tokens_per_layer;
    std::vector<int64_t> layers;
    int64_t idle = 0;
    for (const nlohmann::json& layer : *counts) {
      if (!layer.is_array()) return p;  // not the trainer's counts: no expert load
      std::vector<int64_t>& row = tokens_per_layer.emplace_back();
      for (const nlohmann::json& n : layer) {
        if (!n.is_number_integer()) return p;
        row.push_back(n.get<int64_t>());
        idle += row.back() == 0;
      }
      layers.push_back(static_cast<int64_t>(layers.size()));
    }
    p.idle_experts = static_cast<double>(idle);
    if (const ExpertImbalance worst = worst_imbalance(tokens_per_layer, layers); worst.layer >= 0)
      p.expert_max_over_mean = worst.max_over_mean;
  }
  return p;
}

// A later record's values over an earlier one's of the same step.
void merge_into(PlotPoint& into, const PlotPoint& from) {
  for (auto field : {&PlotPoint::loss, &PlotPoint::valid_loss, &PlotPoint::lr, &PlotPoint::grad_norm,
                     &PlotPoint::tokens_per_s, &PlotPoint::expert_max_over_mean, &PlotPoint::idle_experts})
    if (std::isfinite(from.*field)) into.*field = from.*field;
}

// ---- layout (px) -----------------------------------------------------------------------------------
// 1200 x 1022: two columns of three panels; the whole picture fits a browser window at 80-100%, text at
// 13-22 px.
constexpr double kWidth = 1200, kColumnWidth = 600, kLeft = 92, kRight = 26;
constexpr double kPlotWidth = kColumnWidth - kLeft - kRight;
constexpr double kPanelHeight = 200, kTop = 140, kRowPitch = kPanelHeight + 118, kBottom = 64;
constexpr int kRows = 3;
constexpr const char* kTrainingColor = "#1f5fa8";    // blue, solid
constexpr const char* kValidationColor = "#e8710a";  // orange, points joined
constexpr const char* kReferenceColor = "#7b3fa0";   // purple, dashed
// A run longer than this many steps is drawn as each bucket's lowest and highest value (spikes stay).
constexpr size_t kMaxDrawnSteps = 2400;

struct Frame {
  double left, top;
  Ticks x, y;
  double px(double v) const { return left + (v - x.lo) / (x.hi - x.lo) * kPlotWidth; }
  double py(double v) const { return top + kPanelHeight - (v - y.lo) / (y.hi - y.lo) * kPanelHeight; }
};

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '&') out += "&amp;";
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

std::string text(double x, double y, double size, const char* anchor, const std::string& body,
                 const std::string& extra = "") {
  return fmt::format(R"(<text x="{:.1f}" y="{:.1f}" font-size="{}" text-anchor="{}"{}>{}</text>)", x, y, size, anchor,
                     extra, escape(body));
}

// ---- series ----------------------------------------------------------------------------------------

struct Series {
  std::vector<double> x, y;
};

Series series_of(const std::vector<PlotPoint>& points, double PlotPoint::*field) {
  Series s;
  for (const PlotPoint& p : points) {
    s.x.push_back(static_cast<double>(p.step));
    s.y.push_back(p.*field);
  }
  return s;
}

// Each bucket's lowest and highest finite value in step order (a bucket with none: a gap), so that a
// long run draws a few thousand points and keeps its spikes.
Series thinned(const Series& s) {
  if (s.x.size() <= kMaxDrawnSteps) return s;
  const size_t per_bucket = (s.x.size() + kMaxDrawnSteps / 2 - 1) / (kMaxDrawnSteps / 2);
  Series out;
  for (size_t begin = 0; begin < s.x.size(); begin += per_bucket) {
    const size_t end = std::min(s.x.size(), begin + per_bucket);
    size_t lo = end, hi = end;
    for (size_t i = begin; i < end; ++i) {
      if (!std::isfinite(s.y[i])) continue;
      if (lo == end || s.y[i] < s.y[lo]) lo = i;
      if (hi == end || s.y[i] > s.y[hi]) hi = i;
    }
    if (lo == end) {
      out.x.push_back(s.x[begin]), out.y.push_back(NAN);
      continue;
    }
    for (size_t i : {std::min(lo, hi), std::max(lo, hi)}) out.x.push_back(s.x[i]), out.y.push_back(s.y[i]);
  }
  return out;
}

bool has_values(const Series& s) {
  return std::any_of(s.y.begin(), s.y.end(), [](double v) { return std::isfinite(v); });
}

// The series as a line broken where a value is missing (join_gaps false) or joining the values it has
// (true: an evaluation every N steps), and a dot on each value that no line reaches.
std::string draw_series(const Frame& f, const Series& raw, const char* color, double width, const char* dash,
                        bool join_gaps, bool dots) {
  const Series s = thinned(raw);
  std::string path, marks;
  bool pen_down = false;
  for (size_t i = 0; i < s.x.size(); ++i) {
    if (!std::isfinite(s.y[i])) {
      if (!join_gaps) pen_down = false;
      continue;
    }
    path += fmt::format("{}{:.1f} {:.1f} ", pen_down ? "L" : "M", f.px(s.x[i]), f.py(s.y[i]));
    const bool joined_before = pen_down;
    pen_down = true;
    // Isolated: no finite neighbour joined to it on either side.
    size_t next = i + 1;
    if (join_gaps)
      while (next < s.x.size() && !std::isfinite(s.y[next])) ++next;
    const bool joined_after = next < s.x.size() && std::isfinite(s.y[next]);
    if (dots || (!joined_before && !joined_after))
      marks += fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="{}" fill="{}"/>)", f.px(s.x[i]), f.py(s.y[i]),
                           dots ? 3.5 : 2.5, color);
  }
  std::string out;
  if (!path.empty())
    out = fmt::format(R"(<path fill="none" stroke="{}" stroke-width="{}" stroke-dasharray="{}" stroke-linejoin="round" d="{}"/>)",
                      color, width, dash, path.substr(0, path.size() - 1));
  return out + marks;
}

// ---- panels ----------------------------------------------------------------------------------------

struct LegendEntry {
  const char* color;
  const char* dash;  // "none": solid
  bool dot;
  std::string name;
};

struct Panel {
  std::string title, y_label, missing;  // missing: the panel's text when no record has its values
  std::vector<std::pair<Series, LegendEntry>> series;
  bool from_zero = false;     // the y axis starts at 0 (rates, counts)
  bool counts = false;        // whole numbers: the axis spans at least 0-4, so that its ticks are too
  double reference_line = NAN;  // a dashed horizontal line at this value (1: a balanced load)
  bool shade_window = false;
};

std::string legend(double right, double baseline, const std::vector<LegendEntry>& entries) {
  // Right-aligned on the title's line: each entry a short sample of its line, then its name.
  double width = 0;
  for (const LegendEntry& e : entries) width += 34 + 7.2 * static_cast<double>(e.name.size()) + 16;
  double x = right - width + 16;
  std::string s;
  for (const LegendEntry& e : entries) {
    s += fmt::format(R"(<line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" stroke="{}" stroke-width="3" stroke-dasharray="{}"/>)",
                     x, baseline - 5, x + 26, baseline - 5, e.color, e.dash);
    if (e.dot) s += fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="3.5" fill="{}"/>)", x + 13, baseline - 5, e.color);
    s += text(x + 32, baseline, 13, "start", e.name);
    x += 34 + 7.2 * static_cast<double>(e.name.size()) + 16;
  }
  return s;
}

Ticks y_ticks(const Panel& p) {
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& [s, entry] : p.series)
    for (double v : s.y)
      if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  if (!std::isfinite(lo)) return nice_ticks(0, 1, 5);
  if (std::isfinite(p.reference_line)) lo = std::min(lo, p.reference_line), hi = std::max(hi, p.reference_line);
  if (p.counts) hi = std::max(hi, 4.0);
  const double margin = (hi - lo) * 0.04;  // no line drawn on the frame
  if (p.from_zero && lo >= 0) return nice_ticks(0, hi > 0 ? hi + margin : 1, 6);
  // A positive series (a loss, a norm) gets no negative ticks from its margin.
  return nice_ticks(lo >= 0 ? std::max(0.0, lo - margin) : lo - margin, hi + margin, 6);
}

std::string draw_panel(const Panel& p, double left, double top, const Ticks& x, int64_t window_begin,
                       int64_t window_end) {
  const Frame f{left, top, x, y_ticks(p)};
  std::string s = text(left, top - 14, 16, "start", p.title, R"( font-weight="bold")");
  std::vector<LegendEntry> entries;
  bool any = false;
  for (const auto& [series, entry] : p.series)
    if (has_values(series)) entries.push_back(entry), any = true;
  const bool window = p.shade_window && window_begin >= 0 && window_end >= window_begin;
  if (window)
    s += fmt::format(R"(<rect x="{:.1f}" y="{}" width="{:.1f}" height="{}" fill="#e4edf9"/>)",
                     f.px(static_cast<double>(window_begin)), top,
                     f.px(static_cast<double>(window_end)) - f.px(static_cast<double>(window_begin)), kPanelHeight);
  // Grid and ticks.
  for (double v : f.y.values) {
    const double y = f.py(v);
    s += fmt::format(R"(<line x1="{}" y1="{:.1f}" x2="{}" y2="{:.1f}" stroke="#e3e3e3"/>)", left, y, left + kPlotWidth, y);
    if (any) s += text(left - 8, y + 4.5, 13, "end", short_tick_label(v, f.y));
  }
  for (double v : f.x.values) {
    const double px = f.px(v);
    s += fmt::format(R"(<line x1="{:.1f}" y1="{}" x2="{:.1f}" y2="{}" stroke="#e3e3e3"/>)", px, top, px, top + kPanelHeight);
    s += text(px, top + kPanelHeight + 19, 13, "middle", short_tick_label(v, f.x));
  }
  s += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#666"/>)", left, top, kPlotWidth,
                   kPanelHeight);
  const double mid = top + kPanelHeight / 2, label_x = left - 68;
  s += text(label_x, mid, 14, "middle", p.y_label, fmt::format(R"svg( transform="rotate(-90 {:.1f} {:.1f})")svg", label_x, mid));
  s += text(left + kPlotWidth / 2, top + kPanelHeight + 40, 14, "middle", "step");
  if (!any) {
    s += text(left + kPlotWidth / 2, mid + 5, 14, "middle", p.missing, R"( fill="#777")");
    return s;
  }
  if (std::isfinite(p.reference_line))
    s += fmt::format(R"(<line x1="{}" y1="{:.1f}" x2="{}" y2="{:.1f}" stroke="#999" stroke-width="1.5" stroke-dasharray="4 4"/>)",
                     left, f.py(p.reference_line), left + kPlotWidth, f.py(p.reference_line));
  for (const auto& [series, entry] : p.series) {
    const bool joined = entry.dot;  // a sparse series (evaluations) joins its values
    s += draw_series(f, series, entry.color, entry.dot ? 2 : 2.5, entry.dash, joined, entry.dot);
  }
  if (window) entries.push_back({"#e4edf9", "none", false, fmt::format("measured window {}-{}", window_begin, window_end)});
  if (entries.size() > 1 || window) s += legend(left + kPlotWidth, top - 14, entries);
  return s;
}

}  // namespace

void RunPlot::add_record(const std::string& line) {
  const std::optional<PlotPoint> p = point_of(line);
  if (!p) return;
  if (!points_.empty() && points_.back().step == p->step) merge_into(points_.back(), *p);
  else points_.push_back(*p);
}

void RunPlot::read_new_records(const std::string& metrics_path) {
  std::ifstream in(metrics_path, std::ios::binary);
  if (!in) return;
  in.seekg(static_cast<std::streamoff>(read_offset_));
  std::string fresh((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t whole = fresh.rfind('\n');
  if (whole == std::string::npos) return;  // a line still being written waits for the next call
  size_t begin = 0;
  while (begin <= whole) {
    const size_t end = fresh.find('\n', begin);
    add_record(fresh.substr(begin, end - begin));
    begin = end + 1;
  }
  read_offset_ += whole + 1;
}

std::string RunPlot::svg() const {
  const double height = kTop + kRows * kRowPitch - (kRowPitch - kPanelHeight) + kBottom;
  std::string s = fmt::format(
      R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" viewBox="0 0 {} {}" font-family="DejaVu Sans, Arial, sans-serif">)"
      R"(<rect width="100%" height="100%" fill="white"/>)",
      kWidth, height, kWidth, height);
  s += text(kLeft, 36, 22, "start", title_, R"( font-weight="bold")");
  // The steps drawn, and the last record's values: what a person looks for first.
  std::string summary = subtitle_;
  if (!points_.empty()) {
    const PlotPoint& last = points_.back();
    summary += summary.empty() ? "" : "; ";
    summary += points_.size() == 1 ? fmt::format("1 record, step {}", last.step)
                                   : fmt::format("{} records, steps {}-{}", points_.size(), points_.front().step, last.step);
    if (std::isfinite(last.loss)) summary += fmt::format("; last loss {:.4f}", last.loss);
  } else {
    summary += std::string(summary.empty() ? "" : "; ") + "no records in metrics.jsonl yet";
  }
  s += text(kLeft, 64, 14, "start", summary, R"( fill="#444")");

  double first = 0, last = 1;
  if (!points_.empty()) {
    first = static_cast<double>(points_.front().step), last = static_cast<double>(points_.back().step);
    for (const PlotPoint& p : points_) first = std::min(first, double(p.step)), last = std::max(last, double(p.step));
  }
  if (!reference_loss_.empty()) last = std::max(last, static_cast<double>(reference_loss_.size() - 1));
  if (last <= first) last = first + 1;  // one step: an axis around it
  const Ticks x = nice_ticks(first, last, 8);

  Series reference;
  for (size_t i = 0; i < reference_loss_.size(); ++i) {
    reference.x.push_back(static_cast<double>(i));
    reference.y.push_back(std::isfinite(reference_loss_[i]) ? reference_loss_[i] : NAN);
  }
  std::vector<Panel> panels(6);
  panels[0] = {"Loss", "nats per token", "no loss in metrics.jsonl",
               {{series_of(points_, &PlotPoint::loss), {kTrainingColor, "none", false, "training"}},
                {series_of(points_, &PlotPoint::valid_loss), {kValidationColor, "none", true, "validation"}},
                {reference, {kReferenceColor, "8 5", false, "reference"}}}};
  panels[1] = {"Learning rate", "learning rate", "no lr in metrics.jsonl",
               {{series_of(points_, &PlotPoint::lr), {"#2a8a3e", "none", false, "lr"}}}, true};
  panels[2] = {"Gradient norm", "L2 norm, before clipping", "no grad_norm in metrics.jsonl",
               {{series_of(points_, &PlotPoint::grad_norm), {"#a23b72", "none", false, "grad norm"}}}};
  panels[3] = {"Throughput", "tokens/s (whole job)", "no tokens and step_time_s in metrics.jsonl",
               {{series_of(points_, &PlotPoint::tokens_per_s), {"#1b7a8c", "none", false, "tokens/s"}}}, true};
  panels[3].shade_window = true;
  panels[4] = {"Expert load, worst MoE layer", "max / mean tokens", "no expert_tokens in metrics.jsonl",
               {{series_of(points_, &PlotPoint::expert_max_over_mean), {"#8a5a00", "none", false, "max / mean"}}}};
  panels[4].reference_line = 1;  // a perfectly balanced layer
  panels[5] = {"Idle experts, all MoE layers", "experts without a token", "no expert_tokens in metrics.jsonl",
               {{series_of(points_, &PlotPoint::idle_experts), {"#5a5a5a", "none", false, "idle"}}}, true, true};
  for (size_t i = 0; i < panels.size(); ++i) {
    const double left = static_cast<double>(i % 2) * kColumnWidth + kLeft;
    const double top = kTop + static_cast<double>(i / 2) * kRowPitch;
    s += draw_panel(panels[i], left, top, x, window_begin_, window_end_);
  }
  return s + "</svg>\n";
}

void RunPlot::write(const std::string& path) const { write_file_atomic(path, svg()); }

}  // namespace quill
