// Axis ticks for the run picture (train/run_plot.h): round values, and labels that print them exactly
// and stay short ("2e-5" for a learning rate, "1.2M" for tokens/s).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace quill {

// Round tick values for an axis over [lo, hi]: a step of 1, 2 or 5 times a power of ten, chosen so that
// about `target` ticks cover the range, and the axis widened to the ticks around it.
struct Ticks {
  double lo = 0, hi = 1, step = 1;  // the axis range (multiples of step) and the step
  std::vector<double> values;       // lo, lo + step, ..., hi
  int decimals = 0;                 // digits after the point that print every value exactly
};
Ticks nice_ticks(double lo, double hi, int target = 5);
// A tick value as printed: `decimals` digits, no "-0".
std::string tick_label(double value, int decimals);
// A tick value of `ticks` as an axis shows it: tick_label's digits while they are few; a power of ten
// ("2e-5") when they would be many (a learning rate); a k or M suffix for large values ("1.2M").
std::string short_tick_label(double value, const Ticks& ticks);

}  // namespace quill
