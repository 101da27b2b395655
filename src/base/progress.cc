#include "base/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>

namespace quill {

namespace {

std::string bytes_text(double bytes) {
  if (bytes >= 1e9) return fmt::format("{:.2f} GB", bytes / 1e9);
  return fmt::format("{:.1f} MB", bytes / 1e6);
}

}  // namespace

Progress::Progress(std::string label, ProgressOptions options)
    : label_(std::move(label)), options_(std::move(options)), tty_(options_.enabled && ::isatty(STDERR_FILENO)) {}

Progress::~Progress() { finish(); }

std::string Progress::format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  auto t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02d}m", t / 3600, (t / 60) % 60);
  if (t >= 60) return fmt::format("{}m{:02d}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

std::string Progress::line(int64_t done, int64_t total, const std::string& extra, double seconds, bool closing) const {
  const double d = static_cast<double>(done), t = static_cast<double>(total);
  std::string s = label_ + ": ";
  if (options_.bytes) {
    s += total > 0 ? fmt::format("{} of {} ({:.0f}%)", bytes_text(d), bytes_text(t), 100 * d / t) : bytes_text(d);
  } else {
    s += std::to_string(done);
    if (total > 0) s += fmt::format("/{}", total);
    if (!options_.unit.empty()) s += " " + options_.unit;
    if (total > 0) s += fmt::format(" ({:.1f}%)", 100 * d / t);
  }
  if (!extra.empty()) s += " | " + extra;
  if (seconds > 0) {
    if (options_.bytes) s += fmt::format(" | {}/s", bytes_text(d / seconds));
    else if (!options_.unit.empty()) s += fmt::format(" | {:.3g} {}/s", d / seconds, options_.unit);
    if (side_bytes_ >= 0) s += fmt::format(" | {:.1f} MB/s", static_cast<double>(side_bytes_) / 1e6 / seconds);
  }
  if (closing) return s + " | done in " + format_duration(seconds);
  s += " | " + format_duration(seconds);
  if (total > 0 && done > 0 && done < total) s += " | ETA " + format_duration(seconds * (t - d) / d);
  return s;
}

void Progress::show(const std::string& text) {
  if (tty_) {
    std::fprintf(stderr, "\r\033[K%s", text.c_str());
    open_ = true;
  } else {
    std::fprintf(stderr, "%s\n", text.c_str());
  }
  std::fflush(stderr);
  shown_ = true;
}

void Progress::update(int64_t done, int64_t total, const std::string& extra, bool force) {
  if (!options_.enabled || finished_) return;
  done_ = done, total_ = total, extra_ = extra;
  const double now = timer_.seconds();
  if (now < options_.silent_s) return;
  if (!force && last_ >= 0 && now - last_ < (tty_ ? 0.25 : options_.every_s)) return;
  last_ = now;
  show(line(done, total, extra, now, /*closing=*/false));
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  if (shown_) show(line(done_, total_, extra_, timer_.seconds(), /*closing=*/true));
  if (open_) std::fputc('\n', stderr);
  open_ = false;
}

}  // namespace quill
