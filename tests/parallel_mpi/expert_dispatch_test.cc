// The dispatcher's exchange under mpirun (ep = every rank), dropless: rows dispatched to the ranks
// holding their experts, transformed there by their expert, and combined back equal the same
// transformation done on one rank; the received rows are grouped by local expert with the GEMM's
// group sizes; and combine is dispatch's exact adjoint (so each is the other's backward). Edge
// cases: an expert no rank routes to, a rank that sends nothing to some peer, a rank whose every
// token goes to the same two experts, ranks of different token counts. The deferred plan (the route plan's counts
// exchanged where they are, one copy back) equals the plan from host counts; a bad expert is named after it.
#include <gtest/gtest.h>

#include "comm/mpi_test_env.h"
#include "base/error.h"
#include "ops/moe.h"

#include <cmath>
#include "parallel/expert_dispatch.h"

namespace quill::test {
namespace {

constexpr int64_t kE = 8, kK = 2, kD = 3;

struct Routed {
  Tensor xp;                     // [P, D] in expert order
  std::vector<int64_t> counts;   // per expert
  std::vector<int64_t> expert;   // the expert of each permuted row
  Tensor topk;                   // [N, k] the routing
};

Routed route(int rank, uint64_t seed) {
  const int64_t N = 5 + 3 * rank;
  Tensor x = Tensor::empty({N, kD}, DType::F32), topk = Tensor::empty({N, kK}, DType::I32);
  uint64_t s = seed * 7919 + static_cast<uint64_t>(rank) + 1;
  auto next = [&] { return s = s * 6364136223846793005ull + 1442695040888963407ull, s >> 33; };
  for (int64_t i = 0; i < N * kD; ++i) x.data_as<float>()[i] = static_cast<float>(next() % 1000) / 100.0f - 5.0f;
  for (int64_t t = 0; t < N; ++t) {
    int32_t a, b;
    if (rank == 0) a = 2, b = 5;                                  // every token to the same two experts
    else if (rank == 1) a = 4 + static_cast<int32_t>(next() % 3), b = a == 6 ? 4 : a + 1;  // nothing for rank 0's experts
    else a = static_cast<int32_t>(next() % 7), b = (a + 1 + static_cast<int32_t>(next() % 6)) % 7;  // never expert 7
    topk.data_as<int32_t>()[t * kK] = a;
    topk.data_as<int32_t>()[t * kK + 1] = b;
  }
  const DeviceContext ctx = DeviceContext::cpu();
  Routed r;
  r.topk = topk;
  Tensor slot_rows = Tensor::empty({N, kK}, DType::I32), counts = Tensor::empty({kE}, DType::I64);
  ops::moe_route_plan(ctx, topk, kE, slot_rows, counts);
  r.xp = Tensor::empty({N * kK, kD}, DType::F32);
  ops::moe_permute(ctx, x, slot_rows, r.xp);
  r.counts.assign(counts.data_as<int64_t>(), counts.data_as<int64_t>() + kE);
  for (int64_t e = 0; e < kE; ++e)
    for (int64_t i = 0; i < r.counts[e]; ++i) r.expert.push_back(e);
  return r;
}

double dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += static_cast<double>(a.data_as<float>()[i]) * b.data_as<float>()[i];
  return s;
}

TEST(ExpertDispatch, DispatchTransformCombineEqualsOneRankAndCombineIsTheAdjoint) {
  MpiComm& world = mpi_world();
  const int ep = world.size(), rank = world.rank();
  const DeviceContext ctx = DeviceContext::cpu();
  const Routed r = route(rank, 1);
  const DispatchPlan plan = plan_dispatch(ctx, r.counts, &world);
  ASSERT_EQ(plan.local_experts, kE / ep);
  // The GEMM groups: every rank's rows of each local expert.
  Tensor all = Tensor::empty({kE}, DType::I64);
  std::copy(r.counts.begin(), r.counts.end(), all.data_as<int64_t>());
  world.all_reduce(all, ReduceOp::Sum);
  for (int64_t e = 0; e < plan.local_experts; ++e)
    EXPECT_EQ(plan.local_counts[e], all.data_as<int64_t>()[rank * plan.local_experts + e]) << "local expert " << e;
  EXPECT_EQ(all.data_as<int64_t>()[kE - 1], 0) << "expert 7 was meant to get no token";

  // Expert e multiplies its rows by (e + 1).
  Tensor got = dispatch_tokens(ctx, plan, r.xp, &world);
  ASSERT_EQ(got.dim(0), plan.received_rows());
  int64_t row = 0;
  for (int64_t e = 0; e < plan.local_experts; ++e)
    for (int64_t i = 0; i < plan.local_counts[e]; ++i, ++row)
      for (int64_t d = 0; d < kD; ++d) got.data_as<float>()[row * kD + d] *= static_cast<float>(rank * plan.local_experts + e + 1);
  const Tensor back = combine_tokens(ctx, plan, got, &world);
  ASSERT_EQ(back.dim(0), r.xp.dim(0));
  for (int64_t p = 0; p < r.xp.dim(0); ++p)
    for (int64_t d = 0; d < kD; ++d)
      ASSERT_EQ(back.data_as<float>()[p * kD + d], r.xp.data_as<float>()[p * kD + d] * static_cast<float>(r.expert[p] + 1))
          << "row " << p << " of expert " << r.expert[p];

  // <dispatch(x), y> = <x, combine(y)>, summed over ranks.
  Tensor y = Tensor::empty({plan.received_rows(), kD}, DType::F32);
  for (int64_t i = 0; i < y.numel(); ++i) y.data_as<float>()[i] = 0.25f * static_cast<float>((i * 7 + rank) % 11) - 1.0f;
  Tensor sums = Tensor::empty({2}, DType::F64);
  sums.data_as<double>()[0] = dot(dispatch_tokens(ctx, plan, r.xp, &world), y);
  sums.data_as<double>()[1] = dot(r.xp, combine_tokens(ctx, plan, y, &world));
  world.all_reduce(sums, ReduceOp::Sum);
  EXPECT_NEAR(sums.data_as<double>()[0], sums.data_as<double>()[1], 1e-9 * (1 + std::abs(sums.data_as<double>()[0])));
}

// The route plan's deferred form (counts and check word in one tensor) through plan_dispatch_deferred.
DispatchPlan deferred_plan(const DeviceContext& ctx, const Tensor& topk, MpiComm& world, const Tensor& counts,
                           int64_t* check_word) {
  Tensor plan = Tensor::empty({2 * kE + 1}, DType::I64), slot_rows = Tensor::empty({topk.dim(0), kK}, DType::I32);
  ops::moe_route_plan(ctx, topk, kE, slot_rows, plan.rows(0, kE + 1));
  return plan_dispatch_deferred(ctx, plan, &world, counts, check_word);
}

TEST(ExpertDispatch, TheDeferredPlanEqualsThePlanFromHostCounts) {
  MpiComm& world = mpi_world();
  const int rank = world.rank();
  const DeviceContext ctx = DeviceContext::cpu();
  const Routed r = route(rank, 1);
  const DispatchPlan want = plan_dispatch(ctx, r.counts, &world);
  Tensor counts = Tensor::empty({kE}, DType::I64);
  int64_t check_word = 0;
  const DispatchPlan got = deferred_plan(ctx, r.topk, world, counts, &check_word);
  EXPECT_EQ(check_word, ops::kRoutePlanAllInRange);
  ops::moe_route_plan_check(ctx, r.topk, kE, check_word);  // nothing to name
  EXPECT_EQ(std::vector<int64_t>(counts.data_as<int64_t>(), counts.data_as<int64_t>() + kE), r.counts);
  EXPECT_EQ(got.send_rows, want.send_rows);
  EXPECT_EQ(got.recv_rows, want.recv_rows);
  EXPECT_EQ(got.recv_counts, want.recv_counts);
  EXPECT_EQ(got.local_counts, want.local_counts);
  ASSERT_EQ(got.to_expert_order.defined(), want.to_expert_order.defined());
  if (want.to_expert_order.defined()) {
    const int64_t R = want.received_rows();
    for (int64_t i = 0; i < R; ++i) {
      ASSERT_EQ(got.to_expert_order.data_as<int32_t>()[i], want.to_expert_order.data_as<int32_t>()[i]) << i;
      ASSERT_EQ(got.to_source_order.data_as<int32_t>()[i], want.to_source_order.data_as<int32_t>()[i]) << i;
    }
  }
}

// A rank whose routing names expert 9 of 8: its counts go out as zeros (the exchange stays well-formed for every
// rank), and the check word names [token, slot] and the expert.
TEST(ExpertDispatch, TheDeferredPlanNamesABadExpertAfterTheExchange) {
  MpiComm& world = mpi_world();
  const int rank = world.rank();
  const DeviceContext ctx = DeviceContext::cpu();
  Routed r = route(rank, 2);
  if (rank == 0) r.topk.data_as<int32_t>()[3] = 9;  // token 1, slot 1
  Tensor counts = Tensor::empty({kE}, DType::I64);
  int64_t check_word = 0;
  const DispatchPlan got = deferred_plan(ctx, r.topk, world, counts, &check_word);
  if (rank != 0) {
    EXPECT_EQ(check_word, ops::kRoutePlanAllInRange);
    EXPECT_EQ(got.recv_counts[0], std::vector<int64_t>(static_cast<size_t>(got.local_experts), 0)) << "rank 0 sends none";
    return;
  }
  EXPECT_EQ(check_word, 3);
  EXPECT_EQ(got.send_rows, std::vector<int64_t>(static_cast<size_t>(world.size()), 0));
  try {
    ops::moe_route_plan_check(ctx, r.topk, kE, check_word);
    FAIL() << "a bad expert was not named";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("moe_route_plan: topk_idx_Nk[1, 1] is expert 9, outside [0, 8)"),
              std::string::npos)
        << e.what();
  }
}

TEST(ExpertDispatch, ExpertsThatDoNotDivideAreRefused) {
  MpiComm& world = mpi_world();
  if (world.size() != 4) GTEST_SKIP() << "needs 4 ranks";
  try {
    plan_dispatch(DeviceContext::cpu(), std::vector<int64_t>(6, 1), &world);
    FAIL() << "6 experts over 4 ranks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--expert-model-parallel-size 4 does not divide the 6 routed experts"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace quill::test
