// Tests of the CPU attention reference: forward against a naive [H, T, T] implementation with -inf
// masking, finite-difference gradients in double, float/double agreement and input validation.
// Legend: T positions, H query heads, G kv heads, d head dim, R bias rank, E bias extent.
#include "ops/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "base/error.h"
#include "util/test_util.h"

namespace quill {
namespace {

using ops::AttentionParams;
using test::get;
using test::random_tensor;
using test::rel_l2;
using test::set;

struct Config {
  std::string name;
  int64_t T, H, G, d, R, E;
  AttentionParams params;
};

void PrintTo(const Config& c, std::ostream* os) { *os << c.name; }

AttentionParams make_params(int64_t window, bool log_scaling = false, double floor = 128000.0) {
  AttentionParams p;
  p.window = window;
  p.scale = 0.45;  // larger than Inkling's 1/d so that random q, k give peaked, non-uniform softmax rows
  p.log_scaling = log_scaling;
  p.log_floor = floor;
  p.log_alpha = 0.1;
  return p;
}

std::vector<Config> configs() {
  return {
      {"full_causal_E_beyond_T", 11, 2, 1, 6, 3, 16, make_params(0)},
      {"sliding_window", 13, 2, 1, 6, 3, 4, make_params(4)},
      {"global_extent_below_T", 13, 2, 2, 6, 3, 5, make_params(0)},
      {"sliding_extent_beyond_window", 13, 2, 1, 6, 3, 7, make_params(4)},
      {"gqa_4_2_window", 9, 4, 2, 6, 3, 6, make_params(5)},
      {"gqa_H_eq_G", 10, 3, 3, 6, 3, 7, make_params(0)},
      {"log_scaling_small_floor", 13, 4, 2, 6, 3, 6, make_params(0, true, 3.0)},
      {"window_two", 8, 2, 1, 6, 3, 3, make_params(2)},
  };
}

struct Inputs {
  Tensor q, k, v, r, table;
};

Inputs make_inputs(const Config& c, DType dtype, uint64_t seed) {
  return {random_tensor({c.T, c.H, c.d}, dtype, seed + 1), random_tensor({c.T, c.G, c.d}, dtype, seed + 2),
          random_tensor({c.T, c.G, c.d}, dtype, seed + 3), random_tensor({c.T, c.H, c.R}, dtype, seed + 4),
          random_tensor({c.R, c.E}, dtype, seed + 5, 0.7)};
}

Inputs to_dtype(const Inputs& in, DType dtype) {
  return {convert_dtype(in.q, dtype), convert_dtype(in.k, dtype), convert_dtype(in.v, dtype),
          convert_dtype(in.r, dtype), convert_dtype(in.table, dtype)};
}

// Independent reference: materialise bias and scores for every (h, t, s), mask with -inf, softmax rows.
void naive_attention(const Config& c, const Inputs& in, std::vector<double>& out, std::vector<double>& lse) {
  const int64_t T = c.T, H = c.H, G = c.G, d = c.d, R = c.R, E = c.E;
  const AttentionParams& p = c.params;
  const double inf = std::numeric_limits<double>::infinity();
  // rel[h][t][dist] for every distance the table covers.
  std::vector<double> rel(H * T * E, 0.0);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t e = 0; e < E; ++e)
        for (int64_t i = 0; i < R; ++i)
          rel[(h * T + t) * E + e] += get(in.r, (t * H + h) * R + i) * get(in.table, i * E + e);
  std::vector<double> S(H * T * T);
  for (int64_t h = 0; h < H; ++h) {
    const int64_t g = h * G / H;
    for (int64_t t = 0; t < T; ++t) {
      const double tau = p.log_scaling ? 1.0 + p.log_alpha * std::log(std::max((t + 1.0) / p.log_floor, 1.0)) : 1.0;
      for (int64_t s = 0; s < T; ++s) {
        const bool allowed = s <= t && (p.window == 0 || t - s < p.window);
        double qk = 0;
        for (int64_t j = 0; j < d; ++j) qk += get(in.q, (t * H + h) * d + j) * get(in.k, (s * G + g) * d + j);
        const double bias = (t - s >= 0 && t - s < E) ? rel[(h * T + t) * E + (t - s)] : 0.0;
        S[(h * T + t) * T + s] = allowed ? tau * (p.scale * qk + bias) : -inf;
      }
    }
  }
  out.assign(T * H * d, 0.0);
  lse.assign(H * T, 0.0);
  for (int64_t h = 0; h < H; ++h) {
    const int64_t g = h * G / H;
    for (int64_t t = 0; t < T; ++t) {
      const double* row = &S[(h * T + t) * T];
      double m = -inf;
      for (int64_t s = 0; s < T; ++s) m = std::max(m, row[s]);
      double z = 0;
      for (int64_t s = 0; s < T; ++s) z += std::exp(row[s] - m);
      lse[h * T + t] = m + std::log(z);
      for (int64_t s = 0; s < T; ++s) {
        const double a = std::exp(row[s] - m) / z;
        for (int64_t j = 0; j < d; ++j) out[(t * H + h) * d + j] += a * get(in.v, (s * G + g) * d + j);
      }
    }
  }
}

struct Outputs {
  Tensor out, lse;
};

Outputs forward(const Config& c, const Inputs& in) {
  DType dt = in.q.dtype();
  Outputs o{Tensor::empty({c.T, c.H, c.d}, dt), Tensor::empty({c.H, c.T}, dt)};
  ops::attention_forward(DeviceContext::cpu(), in.q, in.k, in.v, in.r, in.table, c.params, o.out, o.lse);
  return o;
}

struct Grads {
  Tensor dq, dk, dv, dr, dtable;
};

// Backward with dtable starting from zero.
Grads backward(const Config& c, const Inputs& in, const Outputs& o, const Tensor& dout) {
  DType dt = in.q.dtype();
  Grads g{Tensor::empty({c.T, c.H, c.d}, dt), Tensor::empty({c.T, c.G, c.d}, dt), Tensor::empty({c.T, c.G, c.d}, dt),
          Tensor::empty({c.T, c.H, c.R}, dt), Tensor::zeros({c.R, c.E}, dt)};
  // Garbage in the overwritten gradients must not leak into the result.
  test::fill_normal(g.dq, 91, 5.0);
  test::fill_normal(g.dk, 92, 5.0);
  test::fill_normal(g.dv, 93, 5.0);
  test::fill_normal(g.dr, 94, 5.0);
  ops::attention_backward(DeviceContext::cpu(), in.q, in.k, in.v, in.r, in.table, c.params, o.out, o.lse, dout, g.dq,
                          g.dk, g.dv, g.dr, g.dtable);
  return g;
}

class AttentionConfigTest : public ::testing::TestWithParam<Config> {};

TEST_P(AttentionConfigTest, ForwardMatchesNaive) {
  const Config& c = GetParam();
  Inputs in = make_inputs(c, DType::F64, 100);
  Outputs o = forward(c, in);
  std::vector<double> out, lse;
  naive_attention(c, in, out, lse);
  double num = 0, den = 0;
  for (int64_t i = 0; i < o.out.numel(); ++i) {
    num += std::pow(get(o.out, i) - out[i], 2);
    den += out[i] * out[i];
  }
  EXPECT_LE(std::sqrt(num / den), 1e-12) << c.name << ": out";
  for (int64_t i = 0; i < o.lse.numel(); ++i) EXPECT_NEAR(get(o.lse, i), lse[i], 1e-12) << c.name << ": lse " << i;
}

TEST_P(AttentionConfigTest, GradientsMatchFiniteDifferences) {
  const Config& c = GetParam();
  Inputs in = make_inputs(c, DType::F64, 200);
  Tensor probe = random_tensor({c.T, c.H, c.d}, DType::F64, 299);
  Outputs o = forward(c, in);
  Grads g = backward(c, in, o, probe);
  auto loss = [&] { return test::dot(forward(c, in).out, probe); };
  SCOPED_TRACE(c.name);
  test::check_gradients(loss, {{"q", in.q, g.dq}, {"k", in.k, g.dk}, {"v", in.v, g.dv}, {"r", in.r, g.dr},
                               {"table", in.table, g.dtable}});
}

TEST_P(AttentionConfigTest, FloatMatchesDouble) {
  const Config& c = GetParam();
  Inputs in64 = make_inputs(c, DType::F64, 300);
  Inputs in32 = to_dtype(in64, DType::F32);
  // Round the double inputs to float values so both paths see identical numbers.
  in64 = to_dtype(in32, DType::F64);
  Tensor probe64 = convert_dtype(convert_dtype(random_tensor({c.T, c.H, c.d}, DType::F64, 399), DType::F32), DType::F64);
  Tensor probe32 = convert_dtype(probe64, DType::F32);
  Outputs o64 = forward(c, in64), o32 = forward(c, in32);
  Grads g64 = backward(c, in64, o64, probe64), g32 = backward(c, in32, o32, probe32);
  SCOPED_TRACE(c.name);
  EXPECT_LE(rel_l2(o32.out, o64.out), 1e-5);
  EXPECT_LE(rel_l2(o32.lse, o64.lse), 1e-5);
  EXPECT_LE(rel_l2(g32.dq, g64.dq), 1e-5);
  EXPECT_LE(rel_l2(g32.dk, g64.dk), 1e-5);
  EXPECT_LE(rel_l2(g32.dv, g64.dv), 1e-5);
  EXPECT_LE(rel_l2(g32.dr, g64.dr), 1e-5);
  EXPECT_LE(rel_l2(g32.dtable, g64.dtable), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Attention, AttentionConfigTest, ::testing::ValuesIn(configs()),
                         [](const ::testing::TestParamInfo<Config>& info) { return info.param.name; });

// A larger float/double comparison with sizes closer to the model's (long rows, log scaling on).
TEST(AttentionTest, FloatMatchesDoubleLarger) {
  Config c{"large", 70, 4, 2, 32, 5, 40, make_params(0, true, 20.0)};
  c.params.scale = 1.0 / 8;
  Inputs in32 = to_dtype(make_inputs(c, DType::F64, 400), DType::F32);
  Inputs in64 = to_dtype(in32, DType::F64);
  Tensor probe32 = random_tensor({c.T, c.H, c.d}, DType::F32, 499);
  Tensor probe64 = convert_dtype(probe32, DType::F64);
  Outputs o64 = forward(c, in64), o32 = forward(c, in32);
  Grads g64 = backward(c, in64, o64, probe64), g32 = backward(c, in32, o32, probe32);
  EXPECT_LE(rel_l2(o32.out, o64.out), 1e-5);
  EXPECT_LE(rel_l2(o32.lse, o64.lse), 1e-5);
  EXPECT_LE(rel_l2(g32.dq, g64.dq), 1e-5);
  EXPECT_LE(rel_l2(g32.dk, g64.dk), 1e-5);
  EXPECT_LE(rel_l2(g32.dv, g64.dv), 1e-5);
  EXPECT_LE(rel_l2(g32.dr, g64.dr), 1e-5);
  EXPECT_LE(rel_l2(g32.dtable, g64.dtable), 1e-5);
}

// A floor above every position makes tau exactly 1: the result must equal log scaling off bit for bit.
TEST(AttentionTest, LogScalingBelowFloorChangesNothing) {
  Config off{"off", 13, 4, 2, 6, 3, 6, make_params(0)};
  Config on = off;
  on.params.log_scaling = true;
  on.params.log_floor = 14.0;  // (t + 1) / floor < 1 for every t < 13
  Inputs in = make_inputs(off, DType::F64, 500);
  Tensor probe = random_tensor({off.T, off.H, off.d}, DType::F64, 599);
  Outputs a = forward(off, in), b = forward(on, in);
  EXPECT_EQ(test::max_abs_diff(a.out, b.out), 0.0);
  EXPECT_EQ(test::max_abs_diff(a.lse, b.lse), 0.0);
  Grads ga = backward(off, in, a, probe), gb = backward(on, in, b, probe);
  EXPECT_EQ(test::max_abs_diff(ga.dq, gb.dq), 0.0);
  EXPECT_EQ(test::max_abs_diff(ga.dr, gb.dr), 0.0);
  EXPECT_EQ(test::max_abs_diff(ga.dtable, gb.dtable), 0.0);
  // And a small floor does change the later positions.
  on.params.log_floor = 3.0;
  EXPECT_GT(test::max_abs_diff(forward(on, in).out, a.out), 1e-6);
}

// Window 1: each query sees only itself, so out = v and only dv is nonzero.
TEST(AttentionTest, WindowOneIsIdentity) {
  Config c{"window_one", 7, 4, 2, 6, 3, 3, make_params(1)};
  Inputs in = make_inputs(c, DType::F64, 650);
  Tensor probe = random_tensor({c.T, c.H, c.d}, DType::F64, 699);
  Outputs o = forward(c, in);
  for (int64_t t = 0; t < c.T; ++t)
    for (int64_t h = 0; h < c.H; ++h)
      for (int64_t j = 0; j < c.d; ++j)
        EXPECT_NEAR(get(o.out, (t * c.H + h) * c.d + j), get(in.v, (t * c.G + h / 2) * c.d + j), 1e-14);
  Grads g = backward(c, in, o, probe);
  EXPECT_EQ(test::max_abs_diff(g.dq, Tensor::zeros(g.dq.shape(), DType::F64)), 0.0);
  EXPECT_EQ(test::max_abs_diff(g.dtable, Tensor::zeros(g.dtable.shape(), DType::F64)), 0.0);
  // dv[t, g] is the sum of dout over the query heads reading kv head g.
  for (int64_t t = 0; t < c.T; ++t)
    for (int64_t kv = 0; kv < c.G; ++kv)
      for (int64_t j = 0; j < c.d; ++j)
        EXPECT_NEAR(get(g.dv, (t * c.G + kv) * c.d + j),
                    get(probe, (t * c.H + 2 * kv) * c.d + j) + get(probe, (t * c.H + 2 * kv + 1) * c.d + j), 1e-14);
}

// A window covering the whole row is full causal attention.
TEST(AttentionTest, WindowBeyondRowIsFullCausal) {
  Config full{"full", 9, 2, 1, 6, 3, 5, make_params(0)};
  Config wide = full;
  wide.params.window = 9;
  Inputs in = make_inputs(full, DType::F64, 600);
  EXPECT_EQ(test::max_abs_diff(forward(full, in).out, forward(wide, in).out), 0.0);
  wide.params.window = 8;  // now the last query loses its first key
  EXPECT_GT(test::max_abs_diff(forward(full, in).out, forward(wide, in).out), 1e-9);
}

// Hand-computed case: T = 2, one head, d = 1, R = 1, E = 1, so only distance 0 gets a bias.
TEST(AttentionTest, TinyHandComputed) {
  Config c{"tiny", 2, 1, 1, 1, 1, 1, make_params(0)};
  c.params.scale = 0.5;
  Inputs in{Tensor::empty({2, 1, 1}, DType::F64), Tensor::empty({2, 1, 1}, DType::F64),
            Tensor::empty({2, 1, 1}, DType::F64), Tensor::empty({2, 1, 1}, DType::F64),
            Tensor::empty({1, 1}, DType::F64)};
  set(in.q, 0, 1.0), set(in.q, 1, 2.0);
  set(in.k, 0, 3.0), set(in.k, 1, -1.0);
  set(in.v, 0, 10.0), set(in.v, 1, 20.0);
  set(in.r, 0, 0.3), set(in.r, 1, 4.0);
  set(in.table, 0, 0.5);
  Outputs o = forward(c, in);
  // t = 0: only s = 0, out = v0.
  EXPECT_DOUBLE_EQ(get(o.out, 0), 10.0);
  EXPECT_DOUBLE_EQ(get(o.lse, 0), 0.5 * 1 * 3 + 0.3 * 0.5);
  // t = 1: s = 0 at distance 1 (no bias): 0.5*2*3 = 3; s = 1 at distance 0: 0.5*2*(-1) + 4*0.5 = 1.
  const double a0 = std::exp(3.0) / (std::exp(3.0) + std::exp(1.0));
  EXPECT_NEAR(get(o.out, 1), a0 * 10 + (1 - a0) * 20, 1e-12);
  EXPECT_NEAR(get(o.lse, 1), std::log(std::exp(3.0) + std::exp(1.0)), 1e-12);
}

TEST(AttentionTest, DtableAccumulates) {
  Config c{"acc", 11, 4, 2, 6, 3, 5, make_params(4)};
  Inputs in = make_inputs(c, DType::F64, 700);
  Tensor probe = random_tensor({c.T, c.H, c.d}, DType::F64, 799);
  Outputs o = forward(c, in);
  Grads fresh = backward(c, in, o, probe);
  Tensor prior = random_tensor({c.R, c.E}, DType::F64, 798);
  Tensor dtable = prior.clone();
  Grads g = backward(c, in, o, probe);
  ops::attention_backward(DeviceContext::cpu(), in.q, in.k, in.v, in.r, in.table, c.params, o.out, o.lse, probe, g.dq,
                          g.dk, g.dv, g.dr, dtable);
  for (int64_t i = 0; i < dtable.numel(); ++i)
    EXPECT_NEAR(get(dtable, i), get(prior, i) + get(fresh.dtable, i), 1e-12) << i;
  // The overwritten gradients do not accumulate: a second call gives the same values.
  EXPECT_EQ(test::max_abs_diff(g.dq, fresh.dq), 0.0);
  EXPECT_EQ(test::max_abs_diff(g.dk, fresh.dk), 0.0);
  EXPECT_EQ(test::max_abs_diff(g.dv, fresh.dv), 0.0);
  EXPECT_EQ(test::max_abs_diff(g.dr, fresh.dr), 0.0);
}

// A frozen table (Miles's default) passes no dtable: the other gradients are the same bits, and nothing is written
// for the table.
TEST(AttentionTest, NoDtableLeavesTheOtherGradientsAsTheyAre) {
  Config c{"frozen", 11, 4, 2, 6, 3, 5, make_params(4)};
  Inputs in = make_inputs(c, DType::F64, 710);
  Tensor probe = random_tensor({c.T, c.H, c.d}, DType::F64, 711);
  Outputs o = forward(c, in);
  Grads with = backward(c, in, o, probe);
  Grads without = backward(c, in, o, probe);
  ops::attention_backward(DeviceContext::cpu(), in.q, in.k, in.v, in.r, in.table, c.params, o.out, o.lse, probe,
                          without.dq, without.dk, without.dv, without.dr, Tensor());
  // (max_abs_diff is exactly 0 only when every value is the same double)
  EXPECT_EQ(test::max_abs_diff(with.dq, without.dq), 0.0);
  EXPECT_EQ(test::max_abs_diff(with.dk, without.dk), 0.0);
  EXPECT_EQ(test::max_abs_diff(with.dv, without.dv), 0.0);
  EXPECT_EQ(test::max_abs_diff(with.dr, without.dr), 0.0);
}

TEST(AttentionTest, RejectsBadInputs) {
  const DeviceContext cpu = DeviceContext::cpu();
  Config c{"bad", 5, 4, 2, 6, 3, 4, make_params(0)};
  const DType f = DType::F64;
  Inputs in = make_inputs(c, f, 800);
  Tensor out = Tensor::empty({5, 4, 6}, f), lse = Tensor::empty({4, 5}, f);
  auto fwd = [&](const Inputs& x, const Tensor& o, const Tensor& l, const AttentionParams& p) {
    ops::attention_forward(cpu, x.q, x.k, x.v, x.r, x.table, p, o, l);
  };
  EXPECT_NO_THROW(fwd(in, out, lse, c.params));
  auto with = [&](Tensor Inputs::*field, const Shape& shape, DType dt = DType::F64) {
    Inputs x = in;
    x.*field = Tensor::zeros(shape, dt);
    return x;
  };
  EXPECT_THROW(fwd(with(&Inputs::q, {5, 4}), out, lse, c.params), Error);
  EXPECT_THROW(fwd(with(&Inputs::k, {5, 3, 6}), out, lse, c.params), Error);  // 4 heads, 3 kv heads
  EXPECT_THROW(fwd(with(&Inputs::k, {4, 2, 6}), out, lse, c.params), Error);
  EXPECT_THROW(fwd(with(&Inputs::v, {5, 2, 5}), out, lse, c.params), Error);
  EXPECT_THROW(fwd(with(&Inputs::r, {5, 4, 2}), out, lse, c.params), Error);
  EXPECT_THROW(fwd(with(&Inputs::table, {2, 4}), out, lse, c.params), Error);
  EXPECT_THROW(fwd(with(&Inputs::table, {3, 4, 1}), out, lse, c.params), Error);
  EXPECT_THROW(fwd(with(&Inputs::v, {5, 2, 6}, DType::F32), out, lse, c.params), Error);
  EXPECT_THROW(fwd(in, Tensor::empty({5, 4, 5}, f), lse, c.params), Error);
  EXPECT_THROW(fwd(in, out, Tensor::empty({5, 4}, f), c.params), Error);
  EXPECT_THROW(fwd(in, out, Tensor(), c.params), Error);
  EXPECT_THROW(fwd(to_dtype(in, DType::BF16), convert_dtype(out, DType::BF16), convert_dtype(lse, DType::BF16),
                   c.params),
               Error);
  AttentionParams bad = c.params;
  bad.window = -1;
  EXPECT_THROW(fwd(in, out, lse, bad), Error);
  bad = c.params;
  bad.log_scaling = true;
  bad.log_floor = 0;
  EXPECT_THROW(fwd(in, out, lse, bad), Error);

  Tensor dout = random_tensor({5, 4, 6}, f, 801);
  Grads g{Tensor::empty({5, 4, 6}, f), Tensor::empty({5, 2, 6}, f), Tensor::empty({5, 2, 6}, f),
          Tensor::empty({5, 4, 3}, f), Tensor::zeros({3, 4}, f)};
  auto bwd = [&](const Tensor& d, const Grads& gr) {
    ops::attention_backward(cpu, in.q, in.k, in.v, in.r, in.table, c.params, out, lse, d, gr.dq, gr.dk, gr.dv, gr.dr,
                            gr.dtable);
  };
  EXPECT_NO_THROW(bwd(dout, g));
  EXPECT_THROW(bwd(Tensor::empty({5, 2, 6}, f), g), Error);
  auto swap = [&](Tensor Grads::*field, const Shape& shape, DType dt = DType::F64) {
    Grads x = g;
    x.*field = Tensor::zeros(shape, dt);
    return x;
  };
  EXPECT_THROW(bwd(dout, swap(&Grads::dq, {5, 4, 5})), Error);
  EXPECT_THROW(bwd(dout, swap(&Grads::dk, {5, 4, 6})), Error);
  EXPECT_THROW(bwd(dout, swap(&Grads::dv, {5, 1, 6})), Error);
  EXPECT_THROW(bwd(dout, swap(&Grads::dr, {5, 4, 4})), Error);
  EXPECT_THROW(bwd(dout, swap(&Grads::dtable, {3, 5})), Error);
  EXPECT_THROW(bwd(dout, swap(&Grads::dtable, {3, 4}, DType::F32)), Error);

  // The message names the tensor.
  try {
    fwd(with(&Inputs::r, {5, 4, 2}), out, lse, c.params);
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("table_RE"), std::string::npos) << e.what();
  }
  try {
    fwd(with(&Inputs::v, {5, 2, 5}), out, lse, c.params);
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("v_TGd"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace quill
