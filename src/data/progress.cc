#include "data/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fmt/format.h>

namespace quill {

Progress::Progress(std::string label, bool enabled)
    : label_(std::move(label)), enabled_(enabled), tty_(enabled && ::isatty(STDERR_FILENO)) {}

Progress::~Progress() { finish(); }

std::string Progress::format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  auto t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02d}m", t / 3600, (t / 60) % 60);
  if (t >= 60) return fmt::format("{}m{:02d}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

void Progress::update(int64_t done, int64_t total, int64_t bytes, const std::string& extra, bool force) {
  if (!enabled_) return;
  double now = timer_.seconds();
  if (!force && last_ >= 0 && now - last_ < (tty_ ? 0.25 : 10.0)) return;
  last_ = now;
  double mbps = now > 0 ? static_cast<double>(bytes) / 1e6 / now : 0;
  std::string line = fmt::format("{}: {}", label_, done);
  if (total > 0) line += fmt::format("/{} ({:.1f}%)", total, 100.0 * static_cast<double>(done) / static_cast<double>(total));
  if (!extra.empty()) line += " | " + extra;
  line += fmt::format(" | {:.1f} MB/s | {}", mbps, format_duration(now));
  if (total > 0 && done > 0 && done < total) {
    line += " | ETA " + format_duration(now * static_cast<double>(total - done) / static_cast<double>(done));
  }
  if (tty_) {
    std::fprintf(stderr, "\r\033[K%s", line.c_str());
    open_ = true;
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stderr);
}

void Progress::finish() {
  if (open_) std::fputc('\n', stderr);
  open_ = false;
}

}  // namespace quill
