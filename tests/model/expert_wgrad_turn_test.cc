// expert_wgrad_turn (model/expert_wgrad_turn.h): which backward holds its routed rows and which writes them with
// the held ones, for --moe-expert-wgrad-micro-batches 1 and 2; and HeldExpertRows' checks of a skipped turn.
#include <gtest/gtest.h>

#include <vector>

#include "model/expert_wgrad_pairs.h"
#include "util/test_util.h"

namespace quill {
namespace {

using T = ExpertWgradTurn;

std::vector<T> turns(int64_t n, int per_gemm) {
  std::vector<T> v;
  for (int64_t k = 0; k < n; ++k) v.push_back(expert_wgrad_turn(k, n, per_gemm));
  return v;
}

TEST(ExpertWgradTurn, PairsConsecutiveBackwardsAndEndsTheStepWritten) {
  EXPECT_EQ(turns(1, 2), (std::vector<T>{T::Write}));
  EXPECT_EQ(turns(2, 2), (std::vector<T>{T::Hold, T::WriteWithHeld}));
  EXPECT_EQ(turns(3, 2), (std::vector<T>{T::Hold, T::WriteWithHeld, T::Write}));
  EXPECT_EQ(turns(4, 2), (std::vector<T>{T::Hold, T::WriteWithHeld, T::Hold, T::WriteWithHeld}));
  EXPECT_EQ(turns(5, 1), std::vector<T>(5, T::Write));
}

TEST(ExpertWgradTurn, RefusesOtherCountsAndOutOfRangeBackwards) {
  test::expect_error([] { expert_wgrad_turn(0, 4, 3); }, "--moe-expert-wgrad-micro-batches must be 1 or 2, got 3");
  test::expect_error([] { expert_wgrad_turn(4, 4, 2); }, "backward 4 of a step of 4");
}

ExpertRows rows_with(const std::vector<int64_t>& counts, int64_t D, float base) {
  int64_t R = 0;
  for (int64_t c : counts) R += c;
  ExpertRows r;
  r.counts_L = Tensor::empty({static_cast<int64_t>(counts.size())}, DType::I64);
  for (size_t e = 0; e < counts.size(); ++e) r.counts_L.data_as<int64_t>()[e] = counts[e];
  for (Tensor* t : {&r.dy2_RD, &r.a_RF, &r.dh13_R2F, &r.x_RD}) {
    *t = Tensor::empty({R, D}, DType::F32);
    for (int64_t i = 0; i < R * D; ++i) t->data_as<float>()[i] = base + static_cast<float>(i / D);  // row number
  }
  return r;
}

// Expert e of the merge: the held micro-batch's rows of e, then this one's; counts summed.
TEST(HeldExpertRows, MergesTheHeldRowsBeforeTheOwnPerExpert) {
  HeldExpertRows held;
  held.hold(rows_with({2, 0, 1}, 2, 100));  // rows 100, 101 | - | 102
  EXPECT_TRUE(held.holding());
  const ExpertRows m = held.merge_with(DeviceContext::cpu(), rows_with({1, 2, 0}, 2, 200));  // 200 | 201, 202 | -
  EXPECT_FALSE(held.holding());
  const std::vector<float> want_rows = {100, 101, 200, 201, 202, 102};
  ASSERT_EQ(m.x_RD.dim(0), 6);
  for (const Tensor* t : {&m.dy2_RD, &m.a_RF, &m.dh13_R2F, &m.x_RD})
    for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(t->data_as<float>()[2 * i + 1], want_rows[static_cast<size_t>(i)]) << i;
  EXPECT_EQ((std::vector<int64_t>(m.counts_L.data_as<int64_t>(), m.counts_L.data_as<int64_t>() + 3)),
            (std::vector<int64_t>{3, 2, 1}));
}

TEST(HeldExpertRows, ASkippedTurnIsAnError) {
  HeldExpertRows held;
  test::expect_error([&] { held.merge_with(DeviceContext::cpu(), rows_with({1}, 1, 0)); }, "no rows held");
  held.hold(rows_with({1}, 1, 0));
  test::expect_error([&] { held.hold(rows_with({1}, 1, 0)); }, "held twice");
  test::expect_error([&] { held.expect_none(7); }, "expert weight gradients of layer 7: rows held");
}

}  // namespace
}  // namespace quill
