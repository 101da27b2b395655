// A progress line on stderr for long data jobs: redrawn in place on a terminal (at most 4 times a
// second), a plain line every 10 s otherwise (logs, CI).
#pragma once

#include <cstdint>
#include <string>

#include "base/timer.h"

namespace quill {

class Progress {
 public:
  // enabled false: every call does nothing.
  Progress(std::string label, bool enabled);
  ~Progress();
  // done/total in `unit` (total <= 0: unknown), `bytes` processed so far (for MB/s); `extra` is
  // appended ("rows 12/6400"). ETA from done/total.
  void update(int64_t done, int64_t total, int64_t bytes, const std::string& extra = {}, bool force = false);
  // Ends the line (on a terminal) so later output starts on a fresh line.
  void finish();
  double seconds() const { return timer_.seconds(); }

  static std::string format_duration(double seconds);

 private:
  std::string label_;
  bool enabled_, tty_, open_ = false;
  Timer timer_;
  double last_ = -1;
};

}  // namespace quill
