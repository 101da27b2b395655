// This process's resident memory and its peak, from /proc/self/status (VmRSS, VmHWM), and a reset of
// the peak (writing 5 to /proc/self/clear_refs, Linux 4.0+), so that the peak of one phase (the
// export) can be told from the peaks before it: reset, note VmRSS, run the phase, read VmHWM.
#pragma once

#include <cstdint>

namespace quill {

struct RssSample {
  int64_t rss = -1, hwm = -1;  // bytes; -1 when /proc does not say
};
RssSample read_rss();

// Resets VmHWM to the current VmRSS; false when the kernel refuses (the peak then spans the process).
bool reset_peak_rss();

// The host memory a phase adds at its peak: started by start(), read by added_bytes() (-1 when the
// peak could not be reset or read).
class PhasePeak {
 public:
  void start();
  int64_t added_bytes() const;

 private:
  bool reset_ = false;
  int64_t base_ = -1;
};

}  // namespace quill
