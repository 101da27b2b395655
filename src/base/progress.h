// One progress line on stderr for work that can take a while (a data build, loading or saving a
// checkpoint, the Hugging Face export, tune's search): done/total, the rate, the time so far and the
// ETA. On a terminal the line is redrawn in place (at most 4 times a second); otherwise (logs, CI) a
// plain line every `every_s`. Work that ends within `silent_s` shows nothing, so that quick work stays
// quiet; work that showed a line ends with a closing one ("...: 64/64 tensors | 3.1 GB/s | done in 12s").
// Disabled (--quiet, a rank other than the lead), every call does nothing.
#pragma once

#include <cstdint>
#include <string>

#include "base/timer.h"

namespace quill {

struct ProgressOptions {
  bool enabled = true;
  std::string unit;      // what done/total count ("tensors", "layouts"); empty: plain numbers
  bool bytes = false;    // done/total are bytes: shown as MB or GB, the rate per second in the same
  double silent_s = 3;   // no line before this much time has passed
  double every_s = 5;    // a plain line this often when stderr is not a terminal

  // A count of `unit` ("tensors"; "" for plain numbers), or bytes.
  static ProgressOptions counting(bool enabled, std::string unit) {
    ProgressOptions o;
    o.enabled = enabled;
    o.unit = std::move(unit);
    return o;
  }
  static ProgressOptions in_bytes(bool enabled) {
    ProgressOptions o;
    o.enabled = enabled;
    o.bytes = true;
    return o;
  }
};

class Progress {
 public:
  Progress(std::string label, ProgressOptions options);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // done of total (total <= 0: unknown, no ETA); `extra` is appended ("rows 12"). `force` shows the
  // line now, the rate limit aside (never before silent_s).
  void update(int64_t done, int64_t total, const std::string& extra = {}, bool force = false);
  // Bytes read or written so far beside a count (a data build's lines): the line adds their MB/s.
  void set_bytes(int64_t bytes) { side_bytes_ = bytes; }
  // Shows the closing line when any line was shown (the last update's figures, "done in T"), and ends
  // the terminal's line. Later calls do nothing.
  void finish();
  double seconds() const { return timer_.seconds(); }

  // "42s", "3m05s", "1h02m"; "?" when not finite.
  static std::string format_duration(double seconds);
  // The line for done of total after `seconds` (no ETA when `closing`); for tests.
  std::string line(int64_t done, int64_t total, const std::string& extra, double seconds, bool closing) const;

 private:
  void show(const std::string& text);

  std::string label_;
  ProgressOptions options_;
  bool tty_ = false, open_ = false, shown_ = false, finished_ = false;
  Timer timer_;
  double last_ = -1;
  int64_t done_ = 0, total_ = 0, side_bytes_ = -1;
  std::string extra_;
};

}  // namespace quill
