// Tests of the CPU Inkling router: selection (bias, ties), weights, finite-difference gradients in
// double, and float/double agreement.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "base/error.h"
#include "ops/router.h"
#include "util/test_util.h"

namespace quill {
namespace {

using test::get;
using test::set;

Tensor from_values(const Shape& shape, DType dtype, const std::vector<double>& values) {
  Tensor t = Tensor::empty(shape, dtype);
  EXPECT_EQ(t.numel(), static_cast<int64_t>(values.size()));
  for (size_t i = 0; i < values.size(); ++i) set(t, static_cast<int64_t>(i), values[i]);
  return t;
}

std::vector<int32_t> ints(const Tensor& t) {
  const int32_t* p = t.data_as<int32_t>();
  return std::vector<int32_t>(p, p + t.numel());
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

struct RouterOut {
  Tensor topk, weights;
};

RouterOut run_forward(const Tensor& logits, const Tensor& bias, const Tensor& gs, const ops::RouterParams& params) {
  const int64_t N = logits.dim(0);
  RouterOut out{Tensor::empty({N, params.top_k}, DType::I32),
                Tensor::empty({N, params.top_k + params.n_shared}, logits.dtype())};
  ops::router_forward(DeviceContext::cpu(), logits, bias, gs, params, out.topk, out.weights);
  return out;
}

// Logits whose routed choices sigmoid(l) + bias are far apart (so a finite-difference step never
// changes the selection): each row is a shuffle of evenly spaced values; bias in [0, 0.01).
Tensor separated_logits(int64_t N, int64_t E, int64_t S, DType dtype, uint64_t seed) {
  Tensor logits = test::random_tensor({N, E + S}, dtype, seed);
  Tensor u = Tensor::empty({N, E}, DType::F64);
  test::fill_uniform(u, seed + 1, 0.0, 1.0);
  for (int64_t n = 0; n < N; ++n) {
    std::vector<int64_t> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return get(u, n * E + a) < get(u, n * E + b); });
    for (int64_t j = 0; j < E; ++j) set(logits, n * (E + S) + order[j], -2.0 + 4.0 * j / (E - 1));
  }
  return logits;
}

TEST(RouterTest, BiasSelectsButDoesNotWeight) {
  // sigmoid: 0.881, 0.818, 0.731, 0.622; with bias 0.5 on expert 2 its choice (1.231) is the best.
  ops::RouterParams params{.n_routed = 4, .n_shared = 2, .top_k = 2, .route_scale = 3.0};
  Tensor logits = from_values({1, 6}, DType::F64, {2.0, 1.5, 1.0, 0.5, -0.3, 0.4});
  Tensor gs = from_values({1}, DType::F64, {0.8});
  Tensor no_bias = from_values({4}, DType::F64, {0, 0, 0, 0});
  Tensor bias = from_values({4}, DType::F64, {0, 0, 0.5, 0});

  RouterOut plain = run_forward(logits, no_bias, gs, params);
  EXPECT_EQ(ints(plain.topk), (std::vector<int32_t>{0, 1}));
  RouterOut biased = run_forward(logits, bias, gs, params);
  EXPECT_EQ(ints(biased.topk), (std::vector<int32_t>{2, 0}));

  // Weights are sigmoid(l_i) / sum_j sigmoid(l_j) over the chosen and shared logits, bias-free.
  const std::vector<double> l = {1.0, 2.0, -0.3, 0.4};
  double sum = 0;
  for (double v : l) sum += sigmoid(v);
  for (size_t i = 0; i < l.size(); ++i)
    EXPECT_NEAR(get(biased.weights, i), sigmoid(l[i]) / sum * 3.0 * 0.8, 1e-14) << "weight " << i;
}

TEST(RouterTest, ExactTiesGoToTheLowerIndex) {
  for (DType dtype : {DType::F32, DType::F64}) {
    ops::RouterParams params{.n_routed = 5, .n_shared = 1, .top_k = 2, .route_scale = 1.0};
    Tensor logits = from_values({3, 6}, dtype,
                                {-1.0, 1.0, 0.0, 1.0, 1.0, 0.2,     // three-way tie at the top
                                 0.5, 0.5, 0.5, 0.5, 0.5, 0.2,      // bias lifts 0, then 1..4 tie
                                 -1.0, 0.3, 0.7, 0.3, 0.7, 0.2});   // ties at both ranks
    Tensor bias = from_values({5}, dtype, {0.25, 0.0, 0.0, 0.0, 0.0});
    Tensor gs = from_values({1}, dtype, {1.0});
    // Expert 0 with logit -1 gets sigmoid(-1) + 0.25 = 0.519, below sigmoid(0.3) = 0.574.
    RouterOut out = run_forward(logits, bias, gs, params);
    EXPECT_EQ(ints(out.topk), (std::vector<int32_t>{1, 3, 0, 1, 2, 4})) << dtype_name(dtype);
  }
  // A tie made by the bias: sigmoid(0) + 0.25 == sigmoid(0) + 0.25 on experts 1 and 3.
  ops::RouterParams params{.n_routed = 4, .n_shared = 0, .top_k = 1, .route_scale = 1.0};
  Tensor logits = from_values({1, 4}, DType::F32, {0.0, 0.0, 0.5, 0.0});
  Tensor bias = from_values({4}, DType::F32, {0.0, 0.5, 0.0, 0.5});
  Tensor gs = from_values({1}, DType::F32, {1.0});
  RouterOut out = run_forward(logits, bias, gs, params);
  EXPECT_EQ(ints(out.topk), (std::vector<int32_t>{1}));
  EXPECT_NEAR(get(out.weights, 0), 1.0, 1e-7);  // one weight, no shared: softmax of one is 1
}

TEST(RouterTest, SelectionAndWeightsMatchTheDefinition) {
  const int64_t N = 9, E = 7, S = 2, k = 3;
  ops::RouterParams params{.n_routed = E, .n_shared = S, .top_k = k, .route_scale = 8.0};
  Tensor logits = test::random_tensor({N, E + S}, DType::F64, 11, 1.5);
  Tensor bias = test::random_tensor({E}, DType::F64, 12, 0.1);
  Tensor gs = from_values({1}, DType::F64, {0.37});
  RouterOut out = run_forward(logits, bias, gs, params);
  for (int64_t n = 0; n < N; ++n) {
    std::vector<double> choice(E);
    for (int64_t e = 0; e < E; ++e) choice[e] = sigmoid(get(logits, n * (E + S) + e)) + get(bias, e);
    std::vector<int32_t> expect(E);
    std::iota(expect.begin(), expect.end(), 0);
    std::stable_sort(expect.begin(), expect.end(), [&](int32_t a, int32_t b) { return choice[a] > choice[b]; });
    double sum_sig = 0, sum_w = 0;
    for (int64_t j = 0; j < k; ++j) {
      EXPECT_EQ(out.topk.data_as<int32_t>()[n * k + j], expect[j]) << "token " << n << " slot " << j;
      sum_sig += sigmoid(get(logits, n * (E + S) + expect[j]));
    }
    for (int64_t s = 0; s < S; ++s) sum_sig += sigmoid(get(logits, n * (E + S) + E + s));
    for (int64_t i = 0; i < k + S; ++i) {
      const int64_t col = i < k ? expect[i] : E + (i - k);
      const double w = get(out.weights, n * (k + S) + i);
      EXPECT_NEAR(w, sigmoid(get(logits, n * (E + S) + col)) / sum_sig * 8.0 * 0.37, 1e-13);
      sum_w += w;
    }
    EXPECT_NEAR(sum_w, 8.0 * 0.37, 1e-13) << "token " << n;
  }
}

TEST(RouterTest, ExtremeLogitsStayFinite) {
  ops::RouterParams params{.n_routed = 3, .n_shared = 1, .top_k = 2, .route_scale = 8.0};
  Tensor logits = from_values({2, 4}, DType::F32, {-200.0, 90.0, -120.0, -300.0, 150.0, -90.0, 0.0, 100.0});
  Tensor bias = from_values({3}, DType::F32, {0, 0, 0});
  Tensor gs = from_values({1}, DType::F32, {1.0});
  RouterOut out = run_forward(logits, bias, gs, params);
  double sum = 0;
  for (int64_t i = 0; i < out.weights.numel(); ++i) {
    EXPECT_TRUE(std::isfinite(get(out.weights, i))) << i;
    sum += get(out.weights, i);
  }
  EXPECT_NEAR(sum, 16.0, 1e-5);
  // Row 0: expert 1 first; its weight is ~8 because the other logits' sigmoids are ~e^-120 or less.
  EXPECT_EQ(out.topk.data_as<int32_t>()[0], 1);
  EXPECT_NEAR(get(out.weights, 0), 8.0, 1e-5);
}

TEST(RouterTest, GradientsMatchFiniteDifferences) {
  const int64_t N = 6, E = 8, S = 2, k = 3;
  ops::RouterParams params{.n_routed = E, .n_shared = S, .top_k = k, .route_scale = 2.5};
  Tensor logits = separated_logits(N, E, S, DType::F64, 21);
  Tensor bias = Tensor::empty({E}, DType::F64);
  test::fill_uniform(bias, 22, 0.0, 0.01);
  Tensor gs = from_values({1}, DType::F64, {0.7});
  Tensor probe = test::random_tensor({N, k + S}, DType::F64, 23);

  RouterOut out = run_forward(logits, bias, gs, params);
  Tensor dlogits = test::random_tensor({N, E + S}, DType::F64, 24);  // overwritten
  Tensor dgs = from_values({1}, DType::F64, {0.0});
  ops::router_backward(DeviceContext::cpu(), logits, out.topk, out.weights, gs, params, probe, dlogits, dgs);

  // Unchosen routed logits get exactly zero.
  for (int64_t n = 0; n < N; ++n)
    for (int64_t e = 0; e < E; ++e) {
      const int32_t* tk = out.topk.data_as<int32_t>() + n * k;
      if (std::find(tk, tk + k, e) == tk + k) {
        EXPECT_EQ(get(dlogits, n * (E + S) + e), 0.0) << n << "," << e;
      }
    }

  const std::vector<int32_t> chosen = ints(out.topk);
  auto loss = [&] {
    RouterOut o = run_forward(logits, bias, gs, params);
    EXPECT_EQ(ints(o.topk), chosen) << "a finite-difference step changed the selection";
    return test::dot(o.weights, probe);
  };
  test::check_gradients(loss, {{"logits", logits, dlogits}, {"global_scale", gs, dgs}}, 1e-6, 1e-7);
}

TEST(RouterTest, BackwardAccumulatesGlobalScaleAndOverwritesLogits) {
  const int64_t N = 4, E = 5, S = 1, k = 2;
  ops::RouterParams params{.n_routed = E, .n_shared = S, .top_k = k, .route_scale = 8.0};
  Tensor logits = test::random_tensor({N, E + S}, DType::F64, 31);
  Tensor bias = test::random_tensor({E}, DType::F64, 32, 0.05);
  Tensor gs = from_values({1}, DType::F64, {1.3});
  Tensor dw = test::random_tensor({N, k + S}, DType::F64, 33);
  RouterOut out = run_forward(logits, bias, gs, params);

  Tensor dlogits1 = Tensor::zeros({N, E + S}, DType::F64);
  Tensor dgs1 = from_values({1}, DType::F64, {0.0});
  ops::router_backward(DeviceContext::cpu(), logits, out.topk, out.weights, gs, params, dw, dlogits1, dgs1);
  Tensor dlogits2 = test::random_tensor({N, E + S}, DType::F64, 34);
  Tensor dgs2 = from_values({1}, DType::F64, {5.0});
  ops::router_backward(DeviceContext::cpu(), logits, out.topk, out.weights, gs, params, dw, dlogits2, dgs2);
  EXPECT_EQ(test::max_abs_diff(dlogits1, dlogits2), 0.0);
  EXPECT_NEAR(get(dgs2, 0), 5.0 + get(dgs1, 0), 1e-12);
  EXPECT_NE(get(dgs1, 0), 0.0);
}

TEST(RouterTest, FloatMatchesDouble) {
  const int64_t N = 13, E = 11, S = 2, k = 4;
  ops::RouterParams params{.n_routed = E, .n_shared = S, .top_k = k, .route_scale = 8.0};
  Tensor logits64 = separated_logits(N, E, S, DType::F64, 41);
  Tensor bias64 = Tensor::empty({E}, DType::F64);
  test::fill_uniform(bias64, 42, 0.0, 0.01);
  Tensor gs64 = from_values({1}, DType::F64, {0.9});
  Tensor dw64 = test::random_tensor({N, k + S}, DType::F64, 43);
  Tensor logits32 = convert_dtype(logits64, DType::F32), bias32 = convert_dtype(bias64, DType::F32);
  Tensor gs32 = convert_dtype(gs64, DType::F32), dw32 = convert_dtype(dw64, DType::F32);

  RouterOut o64 = run_forward(logits64, bias64, gs64, params);
  RouterOut o32 = run_forward(logits32, bias32, gs32, params);
  EXPECT_EQ(ints(o32.topk), ints(o64.topk));
  EXPECT_LT(test::rel_l2(o32.weights, o64.weights), 1e-6);

  Tensor dl64 = Tensor::empty({N, E + S}, DType::F64), dl32 = Tensor::empty({N, E + S}, DType::F32);
  Tensor dgs64 = Tensor::zeros({1}, DType::F64), dgs32 = Tensor::zeros({1}, DType::F32);
  ops::router_backward(DeviceContext::cpu(), logits64, o64.topk, o64.weights, gs64, params, dw64, dl64, dgs64);
  ops::router_backward(DeviceContext::cpu(), logits32, o32.topk, o32.weights, gs32, params, dw32, dl32, dgs32);
  EXPECT_LT(test::rel_l2(dl32, dl64), 1e-5);
  EXPECT_NEAR(get(dgs32, 0), get(dgs64, 0), 1e-5 * std::fabs(get(dgs64, 0)));
}

using test::expect_error;

TEST(RouterTest, RejectsBadInputs) {
  const int64_t N = 3, E = 4, S = 1, k = 2;
  ops::RouterParams params{.n_routed = E, .n_shared = S, .top_k = k, .route_scale = 1.0};
  Tensor logits = test::random_tensor({N, E + S}, DType::F32, 51);
  Tensor bias = Tensor::zeros({E}, DType::F32);
  Tensor gs = from_values({1}, DType::F32, {1.0});
  Tensor topk = Tensor::empty({N, k}, DType::I32);
  Tensor weights = Tensor::empty({N, k + S}, DType::F32);
  const auto ctx = DeviceContext::cpu();

  Tensor wrong_logits = test::random_tensor({N, E}, DType::F32, 52);
  expect_error([&] { ops::router_forward(ctx, wrong_logits, bias, gs, params, topk, weights); }, "logits_NX");
  expect_error([&] { ops::router_forward(ctx, logits, Tensor::zeros({E + 1}, DType::F32), gs, params, topk, weights); },
               "router_forward: bias_E");
  ops::RouterParams too_many = params;
  too_many.top_k = E + 1;
  expect_error([&] { ops::router_forward(ctx, logits, bias, gs, too_many, topk, weights); }, "top_k");
  expect_error([&] { ops::router_forward(ctx, logits, bias, gs, params, Tensor::empty({N, k}, DType::I64), weights); },
               "topk_idx_Nk");

  ops::router_forward(ctx, logits, bias, gs, params, topk, weights);
  topk.data_as<int32_t>()[3] = static_cast<int32_t>(E);
  Tensor dlogits = Tensor::empty({N, E + S}, DType::F32), dgs = Tensor::zeros({1}, DType::F32);
  expect_error([&] { ops::router_backward(ctx, logits, topk, weights, gs, params, weights, dlogits, dgs); },
               "router_backward: topk_idx_Nk element 3 is expert 4");
  topk.data_as<int32_t>()[3] = -1;
  expect_error([&] { ops::router_backward(ctx, logits, topk, weights, gs, params, weights, dlogits, dgs); },
               "outside");
}

}  // namespace
}  // namespace quill
