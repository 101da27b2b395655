// A picture of a run for a person: the loss curve (and the reference's, when given) above the
// step-time series, as a self-contained SVG (no plotting library; any browser shows it).
#pragma once

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

}  // namespace quill
