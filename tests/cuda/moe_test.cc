// CUDA routed-expert token plumbing (src/ops/cuda/moe_plumbing.cu) against the CPU reference: the
// route plan (slot rows and counts identical to the CPU's, at the realistic P = 49,208 too, with skewed
// loads and empty experts), permute and unpermute with their backwards (bf16 rows rounded first, fp32
// weights), and the errors (an expert outside [0, E) names [token, slot]; the row ops check shapes and
// dtypes, and skip a row outside [0, P) without touching memory: they do not synchronise to check the
// permutation, which the plan writes).
// Legend: N tokens, k slots per token, E experts, P = N * k, D width.
#include "ops/moe.h"

#include <gtest/gtest.h>

#include <functional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "cuda/harness.h"
#include "util/test_util.h"

namespace quill {
namespace {

using test::expect_close;
using test::poisoned_output;
using test::random_tensor;
using test::round_bf16;
using test::to_device;
using test::to_guarded_device;
using test::to_host;
using test::to_host_f32;

using test::expect_error;

// k distinct experts per token drawn from `allowed`, in a seeded random order.
Tensor random_topk(int64_t N, int64_t k, const std::vector<int32_t>& allowed, uint32_t seed) {
  std::mt19937 rng(seed);
  Tensor t = Tensor::empty({N, k}, DType::I32);
  std::vector<int32_t> pool;
  for (int64_t n = 0; n < N; ++n) {
    pool = allowed;
    for (int64_t j = 0; j < k; ++j) {
      const size_t pick = j + rng() % (pool.size() - j);
      std::swap(pool[j], pool[pick]);
      t.data_as<int32_t>()[n * k + j] = pool[j];
    }
  }
  return t;
}

std::vector<int32_t> all_experts(int64_t E) {
  std::vector<int32_t> v(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) v[e] = static_cast<int32_t>(e);
  return v;
}

struct Plan {
  Tensor slot_rows, counts;  // host
};

Plan cpu_plan(const Tensor& topk, int64_t E) {
  Plan p{Tensor::empty(topk.shape(), DType::I32), Tensor::empty({E}, DType::I64)};
  ops::moe_route_plan(DeviceContext::cpu(), topk, E, p.slot_rows, p.counts);
  return p;
}

int64_t mismatches_i32(const Tensor& a, const Tensor& b) {
  int64_t n = 0;
  for (int64_t i = 0; i < a.numel(); ++i) n += a.data_as<int32_t>()[i] != b.data_as<int32_t>()[i];
  return n;
}

struct PlanCase {
  std::string name;
  int64_t N, k, E;
  std::vector<int32_t> allowed;  // empty: all experts
};

void PrintTo(const PlanCase& c, std::ostream* os) { *os << c.name; }

class CudaRoutePlanTest : public ::testing::TestWithParam<PlanCase> {};

TEST_P(CudaRoutePlanTest, SlotRowsAndCountsIdenticalToCpu) {
  QUILL_REQUIRE_GPU();
  const PlanCase& c = GetParam();
  const Tensor topk = random_topk(c.N, c.k, c.allowed.empty() ? all_experts(c.E) : c.allowed, 2100);
  const Plan ref = cpu_plan(topk, c.E);

  auto rows = poisoned_output({c.N, c.k}, DType::I32);
  Tensor counts = Tensor::empty({c.E}, DType::I64);
  for (int64_t e = 0; e < c.E; ++e) counts.data_as<int64_t>()[e] = -7;
  ops::moe_route_plan(test::gpu_ctx(), to_device(topk, DType::I32), c.E, rows->tensor(), counts);
  EXPECT_EQ(mismatches_i32(to_host(rows->tensor()), ref.slot_rows), 0) << c.name << ": slot rows differ from the CPU's";
  int64_t bad_counts = 0;
  for (int64_t e = 0; e < c.E; ++e) bad_counts += counts.data_as<int64_t>()[e] != ref.counts.data_as<int64_t>()[e];
  EXPECT_EQ(bad_counts, 0) << c.name << ": counts differ from the CPU's";
  EXPECT_TRUE(rows->guards_intact()) << c.name << ": slot rows written outside their bounds";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaRoutePlanTest,
    ::testing::Values(PlanCase{"realistic_N6151_k8_E256", 6151, 8, 256, {}},  // P = 49,208
                      PlanCase{"small_N4_k2_E4", 4, 2, 4, {0, 2, 3}},         // expert 1 empty
                      PlanCase{"skewed_N3000_k2_E37", 3000, 2, 37, {3, 5, 7, 11, 13}},
                      PlanCase{"one_expert_N1500_k1_E1", 1500, 1, 1, {}},
                      PlanCase{"partial_batch_N1025_k3_E300", 1025, 3, 300, {}},
                      // the slice's layer: P = 49,152, exactly 24 chunks of the three-kernel plan
                      PlanCase{"slice_N8192_k6_E32", 8192, 6, 32, {}},
                      // the most experts the plan's shared memory holds; most experts empty
                      PlanCase{"widest_N3000_k4_E8192", 3000, 4, 8192, {}}),
    [](const ::testing::TestParamInfo<PlanCase>& info) { return info.param.name; });

TEST(CudaRoutePlan, ExpertOutsideRangeNamesTokenAndSlot) {
  QUILL_REQUIRE_GPU();
  Tensor topk = random_topk(50, 3, all_experts(8), 2200);
  topk.data_as<int32_t>()[40] = 8;  // token 13, slot 1
  topk.data_as<int32_t>()[44] = -1;
  auto rows = poisoned_output({50, 3}, DType::I32);
  Tensor counts = Tensor::empty({8}, DType::I64);
  expect_error([&] { ops::moe_route_plan(test::gpu_ctx(), to_device(topk, DType::I32), 8, rows->tensor(), counts); },
               "moe_route_plan: topk_idx_Nk[13, 1] is expert 8, outside [0, 8)");
  expect_error(
      [&] {
        ops::moe_route_plan(test::gpu_ctx(), to_device(topk, DType::I32), 8, rows->tensor(), Tensor::empty({9}, DType::I64));
      },
      "moe_route_plan: counts_E has shape");
}

// The deferred form on the device (counts and check word I64 [E + 1], no synchronisation): the host form's rows and
// counts, the all-in-range word; with bad experts zero counts and the first bad assignment, named by the check.
TEST(CudaRoutePlan, TheDeferredFormGivesTheHostFormsPlanAndTheCheckWord) {
  QUILL_REQUIRE_GPU();
  const int64_t N = 2048, k = 6, E = 256;  // a seed rank's micro-batch
  const Tensor topk = random_topk(N, k, all_experts(E), 2300);
  const Plan ref = cpu_plan(topk, E);
  const Tensor d_topk = to_device(topk, DType::I32);
  auto rows = poisoned_output({N, k}, DType::I32);
  auto counts = poisoned_output({E + 1}, DType::I64);
  ops::moe_route_plan(test::gpu_ctx(), d_topk, E, rows->tensor(), counts->tensor());
  EXPECT_EQ(mismatches_i32(to_host(rows->tensor()), ref.slot_rows), 0) << "slot rows differ from the CPU's";
  const Tensor got = to_host(counts->tensor());
  for (int64_t e = 0; e < E; ++e) ASSERT_EQ(got.data_as<int64_t>()[e], ref.counts.data_as<int64_t>()[e]) << e;
  EXPECT_EQ(got.data_as<int64_t>()[E], ops::kRoutePlanAllInRange);
  EXPECT_TRUE(counts->guards_intact());

  Tensor bad = topk.clone();
  bad.data_as<int32_t>()[1000] = 300;  // token 166, slot 4
  bad.data_as<int32_t>()[2000] = -1;
  const Tensor d_bad = to_device(bad, DType::I32);
  ops::moe_route_plan(test::gpu_ctx(), d_bad, E, rows->tensor(), counts->tensor());
  const Tensor got_bad = to_host(counts->tensor());
  for (int64_t e = 0; e < E; ++e) ASSERT_EQ(got_bad.data_as<int64_t>()[e], 0) << e;
  EXPECT_EQ(got_bad.data_as<int64_t>()[E], 1000);
  expect_error([&] { ops::moe_route_plan_check(test::gpu_ctx(), d_bad, E, got_bad.data_as<int64_t>()[E]); },
               "moe_route_plan: topk_idx_Nk[166, 4] is expert 300, outside [0, 256)");
}

// ---- permute / unpermute --------------------------------------------------------------------------

// shift: the bf16 tensors start that many bytes past a 16-byte boundary (a row view), which sends
// D % 8 == 0 to the scalar path too.
struct RowCase {
  int64_t N, k, E, D;
  size_t shift = 0;
};

void PrintTo(const RowCase& c, std::ostream* os) {
  *os << "N" << c.N << "_k" << c.k << "_D" << c.D;
  if (c.shift) *os << "_misaligned" << c.shift;
}

struct Routed {
  Tensor rows;    // host I32 [N, k]
  Tensor d_rows;  // device copy
};

Routed route(const RowCase& c, uint32_t seed) {
  const Tensor topk = random_topk(c.N, c.k, all_experts(c.E), seed);
  Routed r;
  r.rows = cpu_plan(topk, c.E).slot_rows;
  r.d_rows = to_device(r.rows, DType::I32);
  return r;
}

class CudaPermuteTest : public ::testing::TestWithParam<RowCase> {};

TEST_P(CudaPermuteTest, PermuteIsAnExactGather) {
  QUILL_REQUIRE_GPU();
  const RowCase c = GetParam();
  const Routed r = route(c, 2300);
  const Tensor x = round_bf16(random_tensor({c.N, c.D}, DType::F32, 2301));
  Tensor ref = Tensor::empty({c.N * c.k, c.D}, DType::F32);
  ops::moe_permute(DeviceContext::cpu(), x, r.rows, ref);
  auto xp = poisoned_output({c.N * c.k, c.D}, DType::BF16, c.shift);
  auto d_x = to_guarded_device(x, DType::BF16, c.shift);
  ops::moe_permute(test::gpu_ctx(), d_x->tensor(), r.d_rows, xp->tensor());
  EXPECT_EQ(test::max_abs_diff(to_host_f32(xp->tensor()), ref), 0.0) << "permute is a copy";
  EXPECT_TRUE(xp->guards_intact()) << "xp written outside its bounds";
}

TEST_P(CudaPermuteTest, PermuteBackwardSumsSlots) {
  QUILL_REQUIRE_GPU();
  const RowCase c = GetParam();
  const Routed r = route(c, 2400);
  const Tensor dxp = round_bf16(random_tensor({c.N * c.k, c.D}, DType::F32, 2401));
  Tensor ref = Tensor::empty({c.N, c.D}, DType::F32);
  ops::moe_permute_backward(DeviceContext::cpu(), dxp, r.rows, ref);
  auto dx = poisoned_output({c.N, c.D}, DType::BF16, c.shift);
  auto d_dxp = to_guarded_device(dxp, DType::BF16, c.shift);
  ops::moe_permute_backward(test::gpu_ctx(), d_dxp->tensor(), r.d_rows, dx->tensor());
  expect_close("dx", to_host_f32(dx->tensor()), ref, 1e-2);
  EXPECT_TRUE(dx->guards_intact()) << "dx written outside its bounds";
}

TEST_P(CudaPermuteTest, UnpermuteWeighsSlots) {
  QUILL_REQUIRE_GPU();
  const RowCase c = GetParam();
  const Routed r = route(c, 2500);
  const Tensor yp = round_bf16(random_tensor({c.N * c.k, c.D}, DType::F32, 2501));
  const Tensor w = random_tensor({c.N, c.k}, DType::F32, 2502, 0.5);
  Tensor ref = Tensor::empty({c.N, c.D}, DType::F32);
  ops::moe_unpermute(DeviceContext::cpu(), yp, r.rows, w, ref);
  auto out = poisoned_output({c.N, c.D}, DType::BF16, c.shift);
  auto d_yp = to_guarded_device(yp, DType::BF16, c.shift);
  ops::moe_unpermute(test::gpu_ctx(), d_yp->tensor(), r.d_rows, to_device(w, DType::F32), out->tensor());
  expect_close("out", to_host_f32(out->tensor()), ref, 1e-2);
  EXPECT_TRUE(out->guards_intact()) << "out written outside its bounds";
}

TEST_P(CudaPermuteTest, UnpermuteBackwardMatchesCpu) {
  QUILL_REQUIRE_GPU();
  const RowCase c = GetParam();
  const Routed r = route(c, 2600);
  const Tensor dout = round_bf16(random_tensor({c.N, c.D}, DType::F32, 2601));
  const Tensor yp = round_bf16(random_tensor({c.N * c.k, c.D}, DType::F32, 2602));
  const Tensor w = random_tensor({c.N, c.k}, DType::F32, 2603, 0.5);
  Tensor dyp_ref = Tensor::empty({c.N * c.k, c.D}, DType::F32), dw_ref = Tensor::empty({c.N, c.k}, DType::F32);
  ops::moe_unpermute_backward(DeviceContext::cpu(), dout, yp, r.rows, w, dyp_ref, dw_ref);
  auto dyp = poisoned_output({c.N * c.k, c.D}, DType::BF16, c.shift);
  auto dw = poisoned_output({c.N, c.k}, DType::F32);
  auto d_dout = to_guarded_device(dout, DType::BF16, c.shift);
  auto d_yp = to_guarded_device(yp, DType::BF16, c.shift);
  ops::moe_unpermute_backward(test::gpu_ctx(), d_dout->tensor(), d_yp->tensor(), r.d_rows, to_device(w, DType::F32),
                              dyp->tensor(), dw->tensor());
  expect_close("dyp", to_host_f32(dyp->tensor()), dyp_ref, 1e-2);
  expect_close("dweights", to_host_f32(dw->tensor()), dw_ref, 1e-4);
  EXPECT_TRUE(dyp->guards_intact()) << "dyp written outside its bounds";
  EXPECT_TRUE(dw->guards_intact()) << "dweights written outside its bounds";
}

// The kernel paths (src/ops/cuda/moe_plumbing.cu): D % 8 == 0 with aligned rows moves 16-byte units,
// anything else single elements; a thread loads up to 8 slots' rows before summing them, so k > 8
// takes a second batch.
INSTANTIATE_TEST_SUITE_P(Shapes, CudaPermuteTest,
                         ::testing::Values(RowCase{77, 3, 10, 200},       // D % 8 == 0: 16-byte units
                                           RowCase{64, 2, 5, 77},         // odd D
                                           RowCase{33, 8, 256, 1024},     // Inkling-like k and E
                                           RowCase{5, 1, 3, 4096},        // k = 1, model width
                                           RowCase{40, 6, 32, 4096},      // the slice: k = 6, 32 experts
                                           RowCase{21, 10, 12, 64},       // k = 10: two slot batches
                                           RowCase{19, 9, 10, 36},        // k = 9, D % 8 == 4: scalar
                                           RowCase{30, 3, 7, 64, 2},      // D % 8 == 0, misaligned: scalar
                                           RowCase{12, 6, 8, 4096, 8}));  // 8-byte aligned only: scalar

TEST(CudaPermute, RowsOutsideTheRangeAreSkippedAndShapesAreChecked) {
  QUILL_REQUIRE_GPU();
  const RowCase c{6, 2, 4, 16};
  Tensor rows = route(c, 2700).rows;
  const Tensor x_host = round_bf16(random_tensor({c.N, c.D}, DType::F32, 2701));
  const Tensor x = to_device(x_host, DType::BF16);

  // Slot (1, 1)'s row out of range: every other row is written as the CPU writes it, nothing outside xp.
  Tensor out_of_range = rows.clone();
  const int32_t skipped = out_of_range.data_as<int32_t>()[3];
  out_of_range.data_as<int32_t>()[3] = 9999;
  auto xp = poisoned_output({c.N * c.k, c.D}, DType::BF16);
  ops::moe_permute(test::gpu_ctx(), x, to_device(out_of_range, DType::I32), xp->tensor());
  Tensor ref = Tensor::empty({c.N * c.k, c.D}, DType::F32);
  ops::moe_permute(DeviceContext::cpu(), x_host, rows, ref);
  const Tensor got = to_host_f32(xp->tensor());
  int64_t differing = 0;
  for (int64_t p = 0; p < c.N * c.k; ++p)
    if (p != skipped)
      for (int64_t d = 0; d < c.D; ++d) differing += got.data_as<float>()[p * c.D + d] != ref.data_as<float>()[p * c.D + d];
  EXPECT_EQ(differing, 0);
  EXPECT_TRUE(xp->guards_intact()) << "xp written outside its bounds";

  auto out = poisoned_output({c.N, c.D}, DType::BF16);
  const Tensor yp = to_device(random_tensor({c.N * c.k, c.D}, DType::F32, 2702), DType::BF16);
  auto dx = poisoned_output({c.N, c.D}, DType::BF16);
  expect_error([&] { ops::moe_permute_backward(test::gpu_ctx(), yp, to_device(rows.reshape({4, 3}), DType::I32), dx->tensor()); },
               "moe_permute_backward: slot_rows_Nk has shape");
  expect_error([&] { ops::moe_permute_backward(test::gpu_ctx(), x, to_device(rows, DType::I32), dx->tensor()); },
               "moe_permute_backward: dxp_PD has shape");
  expect_error(
      [&] {
        ops::moe_unpermute(test::gpu_ctx(), yp, to_device(rows, DType::I32), to_device(random_tensor({c.N, c.k}, DType::F32, 1), DType::BF16),
                           out->tensor());
      },
      "moe_unpermute: weights_Nk has dtype BF16, expected F32");
}

}  // namespace
}  // namespace quill
