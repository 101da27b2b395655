#include "ops/busy_timeline.h"

#include <algorithm>

namespace quill {

BusyTimeline::BusyTimeline(std::vector<TimeSpan> busy) {
  std::erase_if(busy, [](const TimeSpan& s) { return !(s.end > s.begin); });
  std::sort(busy.begin(), busy.end(), [](const TimeSpan& a, const TimeSpan& b) { return a.begin < b.begin; });
  for (const TimeSpan& s : busy) {
    if (!merged_.empty() && s.begin <= merged_.back().end)
      merged_.back().end = std::max(merged_.back().end, s.end);
    else
      merged_.push_back(s);
  }
  prefix_.assign(merged_.size() + 1, 0.0);
  for (size_t i = 0; i < merged_.size(); ++i) prefix_[i + 1] = prefix_[i] + (merged_[i].end - merged_[i].begin);
}

double BusyTimeline::covered(TimeSpan span) const {
  if (!(span.end > span.begin) || merged_.empty()) return 0;
  // First interval ending after span.begin, first beginning at or after span.end.
  const auto first = std::upper_bound(merged_.begin(), merged_.end(), span.begin,
                                      [](double t, const TimeSpan& s) { return t < s.end; });
  const auto last = std::lower_bound(merged_.begin(), merged_.end(), span.end,
                                     [](const TimeSpan& s, double t) { return s.begin < t; });
  if (first >= last) return 0;
  const size_t i = static_cast<size_t>(first - merged_.begin()), j = static_cast<size_t>(last - merged_.begin());
  double total = prefix_[j] - prefix_[i];
  // Trim the partial ends (the union's intervals are disjoint, so only the first and last can stick out).
  total -= std::max(0.0, span.begin - merged_[i].begin);
  total -= std::max(0.0, merged_[j - 1].end - span.end);
  return total;
}

}  // namespace quill
