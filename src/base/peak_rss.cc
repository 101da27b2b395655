#include "base/peak_rss.h"

#include <fstream>
#include <string>

namespace quill {

RssSample read_rss() {
  RssSample s;
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    // "VmHWM:	  123456 kB"
    const bool hwm = line.rfind("VmHWM:", 0) == 0, rss = line.rfind("VmRSS:", 0) == 0;
    if (!hwm && !rss) continue;
    const int64_t kb = std::stoll(line.substr(6));
    (hwm ? s.hwm : s.rss) = kb * 1024;
  }
  return s;
}

bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  if (!out) return false;
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

void PhasePeak::start() {
  reset_ = reset_peak_rss();
  base_ = read_rss().rss;
}

int64_t PhasePeak::added_bytes() const {
  const RssSample now = read_rss();
  if (!reset_ || base_ < 0 || now.hwm < 0) return -1;
  return now.hwm - base_;
}

}  // namespace quill
