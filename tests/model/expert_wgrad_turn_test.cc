// expert_wgrad_turn (model/expert_wgrad_turn.h): which backward holds its routed rows and which writes them with
// the held ones, for --moe-expert-wgrad-micro-batches 1 and 2; HeldExpertRows' checks of a skipped turn; and the
// pair's GEMM (ops::grouped_linear_backward_weight_pair): the merged order and the CPU's sums.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "model/expert_wgrad_pairs.h"
#include "ops/gather_rows.h"
#include "ops/moe.h"
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

// Expert e of the merge: the held micro-batch's rows of e, then this one's.
TEST(HeldExpertRows, MergesTheHeldRowsBeforeTheOwnPerExpert) {
  const ExpertRows held = rows_with({2, 0, 1}, 2, 100), own = rows_with({1, 2, 0}, 2, 200);  // 100 101 | - | 102
  const Tensor index = ops::expert_merge_index(held.counts_L, own.counts_L);                  // 200 | 201 202 | -
  ASSERT_EQ(index.dim(0), 6);
  EXPECT_EQ((std::vector<int32_t>(index.data_as<int32_t>(), index.data_as<int32_t>() + 6)),
            (std::vector<int32_t>{0, 1, 3, 4, 5, 2}));
  Tensor m = Tensor::empty({6, 2}, DType::F32);
  ops::gather_rows_from_pair(DeviceContext::cpu(), held.x_RD, own.x_RD, index, m);
  const std::vector<float> want_rows = {100, 101, 200, 201, 202, 102};
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(m.data_as<float>()[2 * i + 1], want_rows[static_cast<size_t>(i)]) << i;
  test::expect_error([&] { ops::expert_merge_index(held.counts_L, rows_with({1, 2}, 2, 0).counts_L); },
                     "3 experts in a, 2 in b");
}

// The pair's GEMM on the CPU is the one-source GEMM over the merged rows, bit for bit, accumulating and writing.
TEST(HeldExpertRows, ThePairsGemmIsTheMergedRowsGemm) {
  auto host_counts = [](const std::vector<int64_t>& c) { return rows_with(c, 1, 0).counts_L; };
  const Tensor ca = host_counts({3, 0, 5, 1}), cb = host_counts({2, 4, 0, 1});
  const Tensor dy_a = test::random_tensor({9, 6}, DType::F32, 1), x_a = test::random_tensor({9, 5}, DType::F32, 2);
  const Tensor dy_b = test::random_tensor({7, 6}, DType::F32, 3), x_b = test::random_tensor({7, 5}, DType::F32, 4);
  const Tensor index = ops::expert_merge_index(ca, cb);
  Tensor dy = Tensor::empty({16, 6}, DType::F32), x = Tensor::empty({16, 5}, DType::F32);
  const DeviceContext cpu = DeviceContext::cpu();
  ops::gather_rows_from_pair(cpu, dy_a, dy_b, index, dy);
  ops::gather_rows_from_pair(cpu, x_a, x_b, index, x);
  const Tensor counts = host_counts({5, 4, 5, 2});
  for (bool accumulate : {false, true}) {
    const Tensor dw0 = test::random_tensor({4, 6, 5}, DType::F32, 5);
    Tensor want = dw0.clone(), got = dw0.clone();
    ops::grouped_linear_backward_weight(cpu, dy, x, counts, want, accumulate);
    ops::grouped_linear_backward_weight_pair(cpu, dy_a, x_a, ca, dy_b, x_b, cb, got, accumulate);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), static_cast<size_t>(want.nbytes())), 0)
        << (accumulate ? "accumulating" : "writing");
  }
}

TEST(HeldExpertRows, ASkippedTurnIsAnError) {
  HeldExpertRows held;
  const Param w2, w13;
  test::expect_error([&] { held.write_with(DeviceContext::cpu(), rows_with({1}, 1, 0), w2, w13); }, "no rows held");
  held.hold(rows_with({1}, 1, 0));
  test::expect_error([&] { held.hold(rows_with({1}, 1, 0)); }, "held twice");
  test::expect_error([&] { held.expect_none(7); }, "expert weight gradients of layer 7: rows held");
}

}  // namespace
}  // namespace quill
