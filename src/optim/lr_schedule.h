// Learning-rate schedule with Megatron's definitions (recipes-and-measurement.md §3): linear
// warm-up over W = warmup_fraction * decay_steps steps from 0, then cosine (or constant) decay to
// min_lr at decay_steps. Step k is 0-based and counts the steps taken before it, so step 0 trains at
// lr 0 whenever there is a warm-up.
#pragma once

#include <cstdint>
#include <string>

namespace quill {

struct LrSchedule {
  double max_lr = 1e-5;
  double min_lr = 0.0;
  double warmup_fraction = 0.0;
  int64_t warmup_steps = -1;  // when >= 0, overrides warmup_fraction
  int64_t decay_steps = 0;    // 0: the run's train steps
  std::string style = "cosine";  // cosine | linear | constant

  double lr_at(int64_t step, int64_t train_steps) const;
};

}  // namespace quill
