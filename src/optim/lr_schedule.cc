#include "optim/lr_schedule.h"

#include <cmath>

#include "base/error.h"

namespace quill {

double LrSchedule::lr_at(int64_t step, int64_t train_steps) const {
  const double decay = static_cast<double>(decay_steps > 0 ? decay_steps : train_steps);
  const double warmup = warmup_steps >= 0 ? static_cast<double>(warmup_steps) : warmup_fraction * decay;
  const double k = static_cast<double>(step);
  if (warmup > 0 && k <= warmup) return max_lr * k / warmup;
  if (style == "constant") return max_lr;
  if (k > decay) return min_lr;
  const double ratio = (k - warmup) / (decay - warmup);
  double coeff;
  if (style == "cosine") coeff = 0.5 * (std::cos(M_PI * ratio) + 1.0);
  else if (style == "linear") coeff = 1.0 - ratio;
  else QUILL_FAIL("unknown lr decay style '{}' (cosine, linear or constant)", style);
  return min_lr + coeff * (max_lr - min_lr);
}

}  // namespace quill
