#include "optim/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>

namespace quill {
namespace {

// The seed's 20 learning rates (recipes-and-measurement.md §3): 20 steps, warm-up fraction 0.1,
// cosine from 1e-5 to 1e-6.
TEST(LrSchedule, SeedRecipeTwentySteps) {
  LrSchedule s;
  s.max_lr = 1e-5;
  s.min_lr = 1e-6;
  s.warmup_fraction = 0.1;
  s.style = "cosine";
  const double expected[20] = {0,         5e-06,     1e-05,     9.932e-06, 9.729e-06, 9.397e-06, 8.947e-06,
                               8.393e-06, 7.75e-06,  7.039e-06, 6.281e-06, 5.5e-06,   4.719e-06, 3.961e-06,
                               3.25e-06,  2.607e-06, 2.053e-06, 1.603e-06, 1.271e-06, 1.068e-06};
  for (int k = 0; k < 20; ++k) EXPECT_NEAR(s.lr_at(k, 20), expected[k], 0.6e-9) << "step " << k;
}

TEST(LrSchedule, ConstantAndLinearAndNoWarmup) {
  LrSchedule s;
  s.max_lr = 2.0;
  s.min_lr = 1.0;
  s.style = "constant";
  EXPECT_EQ(s.lr_at(0, 10), 2.0);
  s.style = "linear";
  EXPECT_DOUBLE_EQ(s.lr_at(5, 10), 1.5);
  EXPECT_DOUBLE_EQ(s.lr_at(10, 10), 1.0);
  s.style = "cosine";
  EXPECT_DOUBLE_EQ(s.lr_at(0, 10), 2.0);  // no warm-up: step 0 trains at the peak
}

}  // namespace
}  // namespace quill
