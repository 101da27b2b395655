// A picture of a run for a person: the loss curve (and the reference's, when given) above the
// step-time series, as a self-contained SVG (no plotting library; any browser shows it). Axes carry
// round tick values and labels with units; the candidate is a solid blue line, the reference a
// dashed orange one, named in a legend.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace quill {

struct RunPicture {
  std::string title;
  std::vector<double> loss;            // candidate, one per step
  std::vector<double> reference_loss;  // optional
  std::vector<double> step_time_s;     // one per step
  int64_t window_begin = -1, window_end = -1;  // measured window, shaded when >= 0
};

std::string run_picture_svg(const RunPicture& picture);

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

}  // namespace quill
