// CUDA router (src/ops/cuda/router.cu) against the CPU reference, everything fp32. The choice must be
// identical to the CPU's: rows are built with well-separated choice scores (so one-ulp differences
// between the device's and the host's exp cannot reorder them), plus rows of exact ties (equal logits,
// zero bias) that must break to the lower expert index. Weights within 1e-6; backward within 1e-5, with
// dglobal_scale accumulated onto a nonzero value.
// Legend: N tokens, E routed, S shared, k top_k, W = k + S.
#include "ops/router.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "cuda/harness.h"
#include "util/test_util.h"

namespace quill {
namespace {

using ops::RouterParams;
using test::expect_close;
using test::poisoned_output;
using test::random_tensor;
using test::to_device;
using test::to_guarded_device;
using test::to_host;
using test::to_host_f32;

using test::expect_error;

struct Case {
  std::string name;
  int64_t N, E, S, k;
  bool ties = false;  // equal logits in groups of about 4, zero bias
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

RouterParams params_of(const Case& c) {
  RouterParams p;
  p.n_routed = c.E;
  p.n_shared = c.S;
  p.top_k = c.k;
  p.route_scale = 2.5;
  return p;
}

struct Inputs {
  Tensor logits, bias, gs;
};

// Each row's choices are a shuffled ladder 0.05 .. 0.95 (steps of 0.9 / E), reached through a fixed
// per-expert bias: logit_e = logit(choice_e - bias_e).
Inputs make_inputs(const Case& c, uint32_t seed) {
  Inputs in;
  const int64_t X = c.E + c.S;
  in.logits = random_tensor({c.N, X}, DType::F32, seed);  // shared logits keep these
  in.bias = Tensor::zeros({c.E}, DType::F32);
  in.gs = Tensor::empty({1}, DType::F32);
  in.gs.data_as<float>()[0] = 0.8f;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> bias_dist(-0.04f, 0.04f);
  if (!c.ties)
    for (int64_t e = 0; e < c.E; ++e) in.bias.data_as<float>()[e] = bias_dist(rng);
  std::vector<int64_t> rank(static_cast<size_t>(c.E));
  for (int64_t n = 0; n < c.N; ++n) {
    float* row = in.logits.data_as<float>() + n * X;
    if (c.ties) {
      // G levels in [-1.6, 1.6): sigmoid keeps distinct levels far apart, equal ones bit-equal.
      const int64_t G = c.E / 4 + 1;
      for (int64_t e = 0; e < c.E; ++e)
        row[e] = -1.6f + 3.2f * static_cast<float>((e * 7 + n) % G) / static_cast<float>(G);
      continue;
    }
    std::iota(rank.begin(), rank.end(), 0);
    std::shuffle(rank.begin(), rank.end(), rng);
    for (int64_t e = 0; e < c.E; ++e) {
      const double choice = 0.05 + 0.9 * (static_cast<double>(rank[e]) + 0.5) / static_cast<double>(c.E);
      const double s = choice - in.bias.data_as<float>()[e];
      row[e] = static_cast<float>(std::log(s / (1.0 - s)));
    }
  }
  return in;
}

struct Out {
  Tensor topk, weights;
};

Out cpu_forward(const Case& c, const Inputs& in) {
  Out o{Tensor::empty({c.N, c.k}, DType::I32), Tensor::empty({c.N, c.k + c.S}, DType::F32)};
  ops::router_forward(DeviceContext::cpu(), in.logits, in.bias, in.gs, params_of(c), o.topk, o.weights);
  return o;
}

int64_t mismatches(const Tensor& a, const Tensor& b) {
  int64_t n = 0;
  for (int64_t i = 0; i < a.numel(); ++i) n += a.data_as<int32_t>()[i] != b.data_as<int32_t>()[i];
  return n;
}

class CudaRouterTest : public ::testing::TestWithParam<Case> {};

TEST_P(CudaRouterTest, ForwardChoosesAndWeighsLikeCpu) {
  QUILL_REQUIRE_GPU();
  const Case& c = GetParam();
  const Inputs in = make_inputs(c, 1400);
  const Out ref = cpu_forward(c, in);

  auto topk = poisoned_output({c.N, c.k}, DType::I32);
  auto weights = poisoned_output({c.N, c.k + c.S}, DType::F32);
  ops::router_forward(test::gpu_ctx(), to_device(in.logits, DType::F32), to_device(in.bias, DType::F32),
                      to_device(in.gs, DType::F32), params_of(c), topk->tensor(), weights->tensor());
  EXPECT_EQ(mismatches(to_host(topk->tensor()), ref.topk), 0) << c.name << ": topk differs from the CPU's";
  expect_close(c.name + " weights", to_host_f32(weights->tensor()), ref.weights, 1e-6);
  EXPECT_TRUE(topk->guards_intact()) << c.name << ": topk written outside its bounds";
  EXPECT_TRUE(weights->guards_intact()) << c.name << ": weights written outside its bounds";
}

TEST_P(CudaRouterTest, ReplayWeighsAGivenChoiceLikeCpu) {
  QUILL_REQUIRE_GPU();
  const Case& c = GetParam();
  const Inputs in = make_inputs(c, 1500);
  // A choice that is not the top-k: k distinct random experts per row.
  Tensor topk = Tensor::empty({c.N, c.k}, DType::I32);
  std::mt19937 rng(1501);
  std::vector<int32_t> pool(static_cast<size_t>(c.E));
  for (int64_t n = 0; n < c.N; ++n) {
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng);
    std::copy_n(pool.begin(), c.k, topk.data_as<int32_t>() + n * c.k);
  }
  Tensor ref = Tensor::empty({c.N, c.k + c.S}, DType::F32);
  ops::router_forward_replay(DeviceContext::cpu(), in.logits, in.gs, params_of(c), topk, ref);

  const Tensor d_topk = to_device(topk, DType::I32);
  auto weights = poisoned_output({c.N, c.k + c.S}, DType::F32);
  ops::router_forward_replay(test::gpu_ctx(), to_device(in.logits, DType::F32), to_device(in.gs, DType::F32),
                             params_of(c), d_topk, weights->tensor());
  expect_close(c.name + " replayed weights", to_host_f32(weights->tensor()), ref, 1e-6);
  EXPECT_EQ(mismatches(to_host(d_topk), topk), 0) << "replay must not write topk";
  EXPECT_TRUE(weights->guards_intact()) << c.name << ": weights written outside its bounds";
}

TEST_P(CudaRouterTest, BackwardMatchesCpu) {
  QUILL_REQUIRE_GPU();
  const Case& c = GetParam();
  const Inputs in = make_inputs(c, 1600);
  const Out fwd = cpu_forward(c, in);
  const Tensor dweights = random_tensor({c.N, c.k + c.S}, DType::F32, 1601);
  Tensor dlogits_ref = Tensor::empty({c.N, c.E + c.S}, DType::F32);
  Tensor dgs_ref = Tensor::empty({1}, DType::F32);
  dgs_ref.data_as<float>()[0] = 0.3f;
  const Tensor dgs_init = dgs_ref.clone();
  ops::router_backward(DeviceContext::cpu(), in.logits, fwd.topk, fwd.weights, in.gs, params_of(c), dweights,
                       dlogits_ref, dgs_ref);

  auto dlogits = poisoned_output({c.N, c.E + c.S}, DType::F32);
  auto dgs = to_guarded_device(dgs_init, DType::F32);
  ops::router_backward(test::gpu_ctx(), to_device(in.logits, DType::F32), to_device(fwd.topk, DType::I32),
                       to_device(fwd.weights, DType::F32), to_device(in.gs, DType::F32), params_of(c),
                       to_device(dweights, DType::F32), dlogits->tensor(), dgs->tensor());
  expect_close(c.name + " dlogits", to_host_f32(dlogits->tensor()), dlogits_ref, 1e-5);
  expect_close(c.name + " dglobal_scale", to_host_f32(dgs->tensor()), dgs_ref, 1e-5);
  EXPECT_TRUE(dlogits->guards_intact()) << c.name << ": dlogits written outside its bounds";
  EXPECT_TRUE(dgs->guards_intact()) << c.name << ": dglobal_scale written outside its bounds";
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaRouterTest,
                         ::testing::Values(Case{"E256_S1_k8", 300, 256, 1, 8},  // Inkling-like
                                           Case{"E64_S2_k6", 77, 64, 2, 6},
                                           Case{"E37_S0_k3", 45, 37, 0, 3},     // a partial second lane set
                                           Case{"E1000_S1_k8", 33, 1000, 1, 8}, // 32 experts per lane
                                           Case{"E8_S1_k8", 19, 8, 1, 8},       // k == E
                                           Case{"E16_S1_k6_ties", 40, 16, 1, 6, true},
                                           Case{"E256_S0_k8_ties", 50, 256, 0, 8, true}),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// The replayed forward names a bad element; the backward (ops/router.h) does not synchronise to check its choice
// again: it skips the rows naming an expert outside [0, E), their dlogits untouched and nothing added for them,
// and gives every other row the bits of a backward where the skipped rows' dweights are zero.
TEST(CudaRouter, BadReplayedExpertNamesTheElementAndTheBackwardSkipsItsRow) {
  QUILL_REQUIRE_GPU();
  const Case c{"bad", 6, 16, 1, 4};
  const Inputs in = make_inputs(c, 1700);
  Out o = cpu_forward(c, in);
  const Tensor good_topk = to_device(o.topk, DType::I32);
  o.topk.data_as<int32_t>()[13] = 16;  // row 3
  o.topk.data_as<int32_t>()[21] = -1;  // row 5
  const Tensor d_topk = to_device(o.topk, DType::I32);
  const Tensor logits = to_device(in.logits, DType::F32), gs = to_device(in.gs, DType::F32);
  auto weights = poisoned_output({c.N, c.k + c.S}, DType::F32);
  expect_error([&] { ops::router_forward_replay(test::gpu_ctx(), logits, gs, params_of(c), d_topk, weights->tensor()); },
               "router_forward_replay: topk_idx_Nk element 13 is expert 16, outside [0, 16)");

  const int64_t W = c.k + c.S, X = c.E + c.S;
  Tensor dw_host = random_tensor({c.N, W}, DType::F32, 1701);
  const Tensor d_weights = to_device(o.weights, DType::F32);
  auto dlogits = poisoned_output({c.N, X}, DType::F32);
  Tensor zero = Tensor::empty({1}, DType::F32);
  zero.data_as<float>()[0] = 0.f;
  auto dgs_zeroed = to_guarded_device(zero, DType::F32);
  ops::router_backward(test::gpu_ctx(), logits, d_topk, d_weights, gs, params_of(c), to_device(dw_host, DType::F32),
                       dlogits->tensor(), dgs_zeroed->tensor());
  for (int64_t w = 0; w < W; ++w) dw_host.data_as<float>()[3 * W + w] = dw_host.data_as<float>()[5 * W + w] = 0.f;
  Tensor ref = Tensor::empty({c.N, X}, DType::F32);
  auto dgs_ref = to_guarded_device(zero, DType::F32);
  {
    auto d_ref = poisoned_output({c.N, X}, DType::F32);
    ops::router_backward(test::gpu_ctx(), logits, good_topk, d_weights, gs, params_of(c),
                         to_device(dw_host, DType::F32), d_ref->tensor(), dgs_ref->tensor());
    ref = to_host_f32(d_ref->tensor());
  }
  const Tensor got = to_host_f32(dlogits->tensor());
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t x = 0; x < X; ++x) {
      const float g = got.data_as<float>()[n * X + x], r = ref.data_as<float>()[n * X + x];
      if (n == 3 || n == 5)
        EXPECT_TRUE(std::isnan(g)) << "row " << n << " column " << x << " was written: " << g;
      else
        EXPECT_EQ(g, r) << "row " << n << " column " << x;
    }
  EXPECT_EQ(to_host_f32(dgs_zeroed->tensor()).data_as<float>()[0], to_host_f32(dgs_ref->tensor()).data_as<float>()[0]);
  EXPECT_TRUE(dlogits->guards_intact());
  EXPECT_TRUE(dgs_zeroed->guards_intact());
}

TEST(CudaRouter, WrongDtypesAndParamsNameTheTensor) {
  QUILL_REQUIRE_GPU();
  const Case c{"dtypes", 4, 16, 1, 4};
  const Inputs in = make_inputs(c, 1800);
  const Tensor logits = to_device(in.logits, DType::F32), gs = to_device(in.gs, DType::F32);
  auto topk = poisoned_output({c.N, c.k}, DType::I32);
  auto weights = poisoned_output({c.N, c.k + c.S}, DType::F32);
  expect_error(
      [&] {
        ops::router_forward(test::gpu_ctx(), to_device(in.logits, DType::BF16), to_device(in.bias, DType::F32), gs,
                            params_of(c), topk->tensor(), weights->tensor());
      },
      "router_forward: logits_NX has dtype BF16, expected F32");
  expect_error(
      [&] {
        ops::router_forward(test::gpu_ctx(), logits, to_device(Tensor::zeros({c.E + 1}, DType::F32), DType::F32), gs,
                            params_of(c), topk->tensor(), weights->tensor());
      },
      "router_forward: bias_E has shape");
  RouterParams too_many = params_of(c);
  too_many.top_k = c.E + 1;
  expect_error(
      [&] {
        ops::router_forward(test::gpu_ctx(), logits, to_device(in.bias, DType::F32), gs, too_many, topk->tensor(),
                            weights->tensor());
      },
      "top_k");
}

}  // namespace
}  // namespace quill
