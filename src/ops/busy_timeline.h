// The union of the intervals during which a stream was busy, and how much of another interval it
// covers: how the profiler says what part of a collective's time on its communication stream ran
// while the compute stream ran ops (ops/cuda/profiling.h, "hidden"). Plain C++, tested on the CPU.
#pragma once

#include <vector>

namespace quill {

struct TimeSpan {
  double begin = 0;  // any unit; the profiler's are milliseconds from the step's start
  double end = 0;
};

class BusyTimeline {
 public:
  // Intervals in any order; they may overlap or touch. An interval with end <= begin is ignored.
  explicit BusyTimeline(std::vector<TimeSpan> busy);
  // The length of `span` inside the union (0 when span.end <= span.begin).
  double covered(TimeSpan span) const;
  // The union as disjoint intervals, in order.
  const std::vector<TimeSpan>& merged() const { return merged_; }

 private:
  std::vector<TimeSpan> merged_;
  std::vector<double> prefix_;  // prefix_[i]: total length of merged_[0, i)
};

}  // namespace quill
