// train/expert_load.h: the worst layer's max/mean, and the idle-expert warning (once per run of idle
// steps, again after the expert got tokens and went idle again; never with the limit off).
#include "train/expert_load.h"

#include <gtest/gtest.h>

namespace quill {
namespace {

TEST(ExpertLoad, WorstImbalanceNamesTheModelLayer) {
  // Layers 1 and 3 are MoE; layer 3 sends everything to one of 8 experts: max/mean 8.
  const ExpertImbalance w = worst_imbalance({{2, 2, 2, 2, 2, 2, 2, 2}, {16, 0, 0, 0, 0, 0, 0, 0}}, {1, 3});
  EXPECT_EQ(w.layer, 3);
  EXPECT_DOUBLE_EQ(w.max_over_mean, 8.0);
  const ExpertImbalance even = worst_imbalance({{1, 1, 1, 1}}, {0});
  EXPECT_EQ(even.layer, 0);
  EXPECT_DOUBLE_EQ(even.max_over_mean, 1.0);
  EXPECT_EQ(worst_imbalance({}, {}).layer, -1);
  EXPECT_EQ(worst_imbalance({{0, 0}}, {5}).layer, -1);  // nothing routed: no ratio
}

TEST(ExpertLoad, IdleExpertsAreReportedOnceWhenTheyReachTheLimit) {
  IdleExpertWatch watch({2, 5}, 3);
  const std::vector<std::vector<int64_t>> idle2 = {{4, 0, 4, 0}, {8, 0, 0, 0}};
  EXPECT_TRUE(watch.observe(0, idle2).empty());
  EXPECT_TRUE(watch.observe(1, idle2).empty());
  const std::vector<std::string> third = watch.observe(2, idle2);
  ASSERT_EQ(third.size(), 2u);
  EXPECT_NE(third[0].find("step 3: layer 2: experts 1, 3 received no token for 3 steps in a row (2 of the layer's 4"),
            std::string::npos)
      << third[0];
  EXPECT_NE(third[1].find("layer 5: experts 1, 2, 3"), std::string::npos) << third[1];
  EXPECT_TRUE(watch.observe(3, idle2).empty()) << "a run is reported once";
  // Expert 1 of layer 2 gets tokens, then goes idle again: reported again after 3 more steps.
  EXPECT_TRUE(watch.observe(4, {{4, 1, 4, 0}, {8, 1, 1, 1}}).empty());
  EXPECT_TRUE(watch.observe(5, idle2).empty());
  EXPECT_TRUE(watch.observe(6, idle2).empty());
  const std::vector<std::string> again = watch.observe(7, idle2);
  ASSERT_EQ(again.size(), 2u);
  EXPECT_NE(again[0].find("layer 2: expert 1 received"), std::string::npos) << again[0];
}

TEST(ExpertLoad, NoWarningWithTheLimitOff) {
  IdleExpertWatch off({0}, 0);
  for (int s = 0; s < 20; ++s) EXPECT_TRUE(off.observe(s, {{0, 5}}).empty());
}

}  // namespace
}  // namespace quill
