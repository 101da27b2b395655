// Tests of the CPU routed-expert plumbing: the route plan, permute/unpermute against a dense
// per-token computation, grouped linear against per-expert loops, and finite-difference gradients
// (double) through permute -> grouped_linear -> unpermute.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "ops/moe.h"
#include "util/test_util.h"

namespace quill {
namespace {

using test::get;
using test::set;

const DeviceContext kCpu = DeviceContext::cpu();

Tensor topk_tensor(int64_t N, int64_t k, const std::vector<int32_t>& ids) {
  Tensor t = Tensor::empty({N, k}, DType::I32);
  EXPECT_EQ(t.numel(), static_cast<int64_t>(ids.size()));
  std::copy(ids.begin(), ids.end(), t.data_as<int32_t>());
  return t;
}

// k distinct experts per token drawn from `allowed`, in a seeded random order.
Tensor random_topk(int64_t N, int64_t k, const std::vector<int32_t>& allowed, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids;
  for (int64_t n = 0; n < N; ++n) {
    std::vector<int32_t> pool = allowed;
    for (int64_t j = 0; j < k; ++j) {
      const size_t pick = j + rng() % (pool.size() - j);
      std::swap(pool[j], pool[pick]);
      ids.push_back(pool[j]);
    }
  }
  return topk_tensor(N, k, ids);
}

struct Plan {
  Tensor slot_rows, counts;
};

Plan route_plan(const Tensor& topk, int64_t E) {
  Plan p{Tensor::empty(topk.shape(), DType::I32), Tensor::empty({E}, DType::I64)};
  ops::moe_route_plan(kCpu, topk, E, p.slot_rows, p.counts);
  return p;
}

std::vector<int64_t> counts_of(const Tensor& t) {
  return std::vector<int64_t>(t.data_as<int64_t>(), t.data_as<int64_t>() + t.numel());
}

Tensor counts_tensor(const std::vector<int64_t>& counts) {
  Tensor t = Tensor::empty({static_cast<int64_t>(counts.size())}, DType::I64);
  std::copy(counts.begin(), counts.end(), t.data_as<int64_t>());
  return t;
}

using test::expect_error;

TEST(MoeTest, RoutePlanSortsStablyByExpert) {
  // Expert 1 gets no token.
  Tensor topk = topk_tensor(4, 2, {2, 0, /**/ 0, 2, /**/ 3, 0, /**/ 2, 3});
  Plan p = route_plan(topk, 4);
  // Rows in expert order: expert 0 takes assignments 1, 2, 5 (rows 0-2), expert 2 takes 0, 3, 6, expert 3 4, 7.
  const int32_t* rows = p.slot_rows.data_as<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(rows, rows + 8), (std::vector<int32_t>{3, 0, 1, 4, 6, 2, 5, 7}));
  EXPECT_EQ(counts_of(p.counts), (std::vector<int64_t>{3, 0, 3, 2}));
}

TEST(MoeTest, RoutePlanRejectsOutOfRangeExperts) {
  Tensor rows = Tensor::empty({2, 2}, DType::I32), counts = Tensor::empty({3}, DType::I64);
  expect_error([&] { ops::moe_route_plan(kCpu, topk_tensor(2, 2, {0, 1, 3, 2}), 3, rows, counts); },
               "moe_route_plan: topk_idx_Nk[1, 0] is expert 3");
  expect_error([&] { ops::moe_route_plan(kCpu, topk_tensor(2, 2, {0, -1, 1, 2}), 3, rows, counts); }, "expert -1");
  expect_error([&] { ops::moe_route_plan(kCpu, topk_tensor(2, 2, {0, 1, 1, 2}), 4, rows, counts); }, "counts_E");
  expect_error([&] { ops::moe_route_plan(kCpu, topk_tensor(2, 2, {0, 1, 1, 2}), 3, Tensor::empty({4}, DType::I32), counts); },
               "slot_rows_Nk");
}

// The deferred form (counts I64 [E + 1], the check word last): the same rows and counts, the check word; with a bad
// expert zero counts, the word naming the first bad assignment and moe_route_plan_check naming it.
TEST(MoeTest, RoutePlanDeferredFormKeepsTheCheckWord) {
  const Tensor topk = topk_tensor(4, 2, {2, 0, /**/ 0, 2, /**/ 3, 0, /**/ 2, 3});
  const Plan p = route_plan(topk, 4);
  Tensor rows = Tensor::empty({4, 2}, DType::I32), counts = Tensor::empty({5}, DType::I64);
  ops::moe_route_plan(kCpu, topk, 4, rows, counts);
  EXPECT_EQ(std::vector<int32_t>(rows.data_as<int32_t>(), rows.data_as<int32_t>() + 8),
            std::vector<int32_t>(p.slot_rows.data_as<int32_t>(), p.slot_rows.data_as<int32_t>() + 8));
  EXPECT_EQ(counts_of(counts), (std::vector<int64_t>{3, 0, 3, 2, ops::kRoutePlanAllInRange}));
  ops::moe_route_plan_check(kCpu, topk, 4, counts.data_as<int64_t>()[4]);

  const Tensor bad = topk_tensor(2, 2, {0, 1, 3, -2});
  Tensor rows2 = Tensor::empty({2, 2}, DType::I32), counts2 = Tensor::empty({4}, DType::I64);
  ops::moe_route_plan(kCpu, bad, 3, rows2, counts2);
  EXPECT_EQ(counts_of(counts2), (std::vector<int64_t>{0, 0, 0, 2}));
  expect_error([&] { ops::moe_route_plan_check(kCpu, bad, 3, counts2.data_as<int64_t>()[3]); },
               "moe_route_plan: topk_idx_Nk[1, 0] is expert 3, outside [0, 3)");
}

// Grouped linear forward and backward against plain per-expert loops, including an empty expert.
TEST(MoeTest, GroupedLinearMatchesPerExpertLoops) {
  const std::vector<int64_t> counts = {3, 0, 5, 1, 4};
  const int64_t E = 5, P = 13, K = 6, M = 4;
  Tensor counts_E = counts_tensor(counts);
  Tensor x = test::random_tensor({P, K}, DType::F64, 1);
  Tensor w = test::random_tensor({E, M, K}, DType::F64, 2);
  Tensor dy = test::random_tensor({P, M}, DType::F64, 3);
  Tensor y = test::random_tensor({P, M}, DType::F64, 4);     // overwritten
  Tensor dx = test::random_tensor({P, K}, DType::F64, 5);    // overwritten
  Tensor dw0 = test::random_tensor({E, M, K}, DType::F64, 6);
  Tensor dw = dw0.clone();                                   // accumulated
  ops::grouped_linear_forward(kCpu, x, w, counts_E, y);
  ops::grouped_linear_backward_input(kCpu, dy, w, counts_E, dx);
  ops::grouped_linear_backward_weight(kCpu, dy, x, counts_E, dw);

  Tensor y_ref = Tensor::zeros({P, M}, DType::F64), dx_ref = Tensor::zeros({P, K}, DType::F64);
  Tensor dw_ref = dw0.clone();
  int64_t row = 0;
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t r = row; r < row + counts[e]; ++r)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t j = 0; j < K; ++j) {
          const double we = get(w, (e * M + m) * K + j);
          set(y_ref, r * M + m, get(y_ref, r * M + m) + get(x, r * K + j) * we);
          set(dx_ref, r * K + j, get(dx_ref, r * K + j) + get(dy, r * M + m) * we);
          set(dw_ref, (e * M + m) * K + j, get(dw_ref, (e * M + m) * K + j) + get(dy, r * M + m) * get(x, r * K + j));
        }
    row += counts[e];
  }
  EXPECT_LT(test::max_abs_diff(y, y_ref), 1e-12);
  EXPECT_LT(test::max_abs_diff(dx, dx_ref), 1e-12);
  EXPECT_LT(test::max_abs_diff(dw, dw_ref), 1e-12);
  // Expert 1 saw no rows: its gradient is untouched.
  for (int64_t i = M * K; i < 2 * M * K; ++i) EXPECT_EQ(get(dw, i), get(dw0, i));

  // Float agrees with double.
  Tensor y32 = Tensor::empty({P, M}, DType::F32);
  ops::grouped_linear_forward(kCpu, convert_dtype(x, DType::F32), convert_dtype(w, DType::F32), counts_E, y32);
  EXPECT_LT(test::rel_l2(y32, y), 1e-6);
}

TEST(MoeTest, GroupedLinearRejectsBadCounts) {
  Tensor x = test::random_tensor({7, 3}, DType::F32, 1), w = test::random_tensor({2, 4, 3}, DType::F32, 2);
  Tensor y = Tensor::empty({7, 4}, DType::F32);
  expect_error([&] { ops::grouped_linear_forward(kCpu, x, w, counts_tensor({3, 3}), y); },
               "grouped_linear_forward: counts_E sums to 6, but there are 7 rows");
  expect_error([&] { ops::grouped_linear_forward(kCpu, x, w, counts_tensor({8, -1}), y); }, "counts_E[1] is -1");
  expect_error([&] { ops::grouped_linear_forward(kCpu, x, w, counts_tensor({3, 2, 2}), y); }, "counts_E");
  Tensor w_bad = test::random_tensor({2, 4, 5}, DType::F32, 3);
  expect_error([&] { ops::grouped_linear_forward(kCpu, x, w_bad, counts_tensor({3, 4}), y); }, "x_PK");
}

// The whole routed path: out[t] = sum_slot w[t, slot] * (x[t] . W_e^T) with e = topk[t, slot].
struct MoePath {
  int64_t N, k, E, D, M;
  Tensor topk, x, w, weights;  // w is [E, M, D]
  Plan plan;
  Tensor xp, yp, out;

  MoePath(int64_t N_, int64_t k_, int64_t E_, int64_t D_, int64_t M_, const std::vector<int32_t>& allowed)
      : N(N_), k(k_), E(E_), D(D_), M(M_) {
    topk = random_topk(N, k, allowed, 7);
    x = test::random_tensor({N, D}, DType::F64, 8);
    w = test::random_tensor({E, M, D}, DType::F64, 9);
    weights = test::random_tensor({N, k}, DType::F64, 10);
    plan = route_plan(topk, E);
    xp = Tensor::empty({N * k, D}, DType::F64);
    yp = Tensor::empty({N * k, M}, DType::F64);
    out = Tensor::empty({N, M}, DType::F64);
  }

  void forward() {
    ops::moe_permute(kCpu, x, plan.slot_rows, xp);
    ops::grouped_linear_forward(kCpu, xp, w, plan.counts, yp);
    ops::moe_unpermute(kCpu, yp, plan.slot_rows, weights, out);
  }
};

TEST(MoeTest, PermuteUnpermuteMatchDenseComputation) {
  // N=7, k=3, E=5 with expert 3 never chosen.
  MoePath path(7, 3, 5, 6, 4, {0, 1, 2, 4});
  path.forward();
  EXPECT_EQ(get(path.plan.counts, 3), 0.0);
  for (int64_t t = 0; t < path.N; ++t)
    for (int64_t m = 0; m < path.M; ++m) {
      double expect = 0;
      for (int64_t s = 0; s < path.k; ++s) {
        const int64_t e = path.topk.data_as<int32_t>()[t * path.k + s];
        double y = 0;
        for (int64_t d = 0; d < path.D; ++d) y += get(path.x, t * path.D + d) * get(path.w, (e * path.M + m) * path.D + d);
        expect += get(path.weights, t * path.k + s) * y;
      }
      EXPECT_NEAR(get(path.out, t * path.M + m), expect, 1e-12) << "token " << t << " column " << m;
    }
  // Every token's slot rows hold its row.
  for (int64_t a = 0; a < path.N * path.k; ++a) {
    const int64_t p = path.plan.slot_rows.data_as<int32_t>()[a], t = a / path.k;
    for (int64_t d = 0; d < path.D; ++d) EXPECT_EQ(get(path.xp, p * path.D + d), get(path.x, t * path.D + d));
  }
}

TEST(MoeTest, GradientsMatchFiniteDifferences) {
  MoePath path(7, 3, 5, 6, 4, {0, 1, 2, 3, 4});
  Tensor probe = test::random_tensor({path.N, path.M}, DType::F64, 11);
  path.forward();

  const int64_t P = path.N * path.k;
  Tensor dyp = test::random_tensor({P, path.M}, DType::F64, 12);        // overwritten
  Tensor dweights = test::random_tensor({path.N, path.k}, DType::F64, 13);
  Tensor dxp = test::random_tensor({P, path.D}, DType::F64, 14);
  Tensor dx = test::random_tensor({path.N, path.D}, DType::F64, 15);
  Tensor dw = Tensor::zeros({path.E, path.M, path.D}, DType::F64);
  ops::moe_unpermute_backward(kCpu, probe, path.yp, path.plan.slot_rows, path.weights, dyp, dweights);
  ops::grouped_linear_backward_input(kCpu, dyp, path.w, path.plan.counts, dxp);
  ops::grouped_linear_backward_weight(kCpu, dyp, path.xp, path.plan.counts, dw);
  ops::moe_permute_backward(kCpu, dxp, path.plan.slot_rows, dx);

  auto loss = [&] {
    path.forward();
    return test::dot(path.out, probe);
  };
  test::check_gradients(loss, {{"x", path.x, dx}, {"w_EMK", path.w, dw}, {"weights_Nk", path.weights, dweights}},
                        1e-6, 1e-7);
}

TEST(MoeTest, SlotRowsMustBeAPermutation) {
  Tensor x = test::random_tensor({2, 3}, DType::F32, 1), xp = Tensor::empty({4, 3}, DType::F32);
  Tensor rows = Tensor::empty({2, 2}, DType::I32);
  std::vector<int32_t> values = {0, 1, 1, 3};
  std::copy(values.begin(), values.end(), rows.data_as<int32_t>());
  expect_error([&] { ops::moe_permute(kCpu, x, rows, xp); }, "moe_permute: slot_rows_Nk[1, 0] repeats row 1");
  rows.data_as<int32_t>()[2] = 4;
  expect_error([&] { ops::moe_permute(kCpu, x, rows, xp); }, "slot_rows_Nk[1, 0] is row 4, outside [0, 4)");
  rows.data_as<int32_t>()[2] = 2;
  expect_error([&] { ops::moe_permute(kCpu, x, rows.reshape({4, 1}), xp); }, "moe_permute: slot_rows_Nk");
  Tensor weights = test::random_tensor({2, 2}, DType::F32, 2), out = Tensor::empty({2, 3}, DType::F32);
  expect_error([&] { ops::moe_unpermute(kCpu, xp, rows, test::random_tensor({2, 3}, DType::F32, 3), out); },
               "moe_unpermute: slot_rows_Nk");
  expect_error([&] { ops::moe_unpermute(kCpu, xp, rows, weights, Tensor::empty({2, 3}, DType::F64)); }, "out_ND");
}

}  // namespace
}  // namespace quill
