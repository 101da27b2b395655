// The FP8 GEMMs (ops/fp8.h) against a straightforward reference: operands quantised element by element
// by their tile (found from the indices; amax by a scan), then triple loops in double. The weight
// gradient's operands are tiled along the tokens (its contraction), which a test tells apart from the
// forward's tiling; grouped GEMMs equal the dense ones per group; and on inputs that are their own
// quantisation the forward and both backward GEMMs satisfy the adjoint identities exactly (the finite-
// difference check that is meaningful for a quantised product: elsewhere it is piecewise constant).
#include "ops/fp8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <vector>

#include "ops/fp8_e4m3.h"
#include "util/test_util.h"

namespace quill {
namespace {

using ops::Fp8Tensor;
using ops::Fp8Tiling;

const DeviceContext kCpu = DeviceContext::cpu();

Tensor varied(const Shape& shape, uint64_t seed) {
  Tensor x = test::random_tensor(shape, DType::F32, seed);
  const int64_t C = shape.back();
  for (int64_t i = 0; i < x.numel(); ++i)
    test::set(x, i, test::get(x, i) * std::ldexp(1.0, static_cast<int>(((i / C) * 5 + (i % C) * 3) % 17) - 8));
  return x;
}

// x [R, C] as the GEMM sees it: each element quantised with its tile's scale, dequantised, in double.
std::vector<double> seen(const Tensor& x, const std::function<int64_t(int64_t, int64_t)>& tile_of) {
  const int64_t R = x.dim(0), C = x.dim(1);
  const float* v = x.data_as<float>();
  std::map<int64_t, float> amax;  // by tile
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) amax[tile_of(r, c)] = std::max(amax[tile_of(r, c)], std::fabs(v[r * C + c]));
  std::vector<double> out(static_cast<size_t>(R * C));
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) {
      const float s = fp8::block_scale(amax[tile_of(r, c)]);
      const uint8_t code = fp8::e4m3_from_float(v[r * C + c] * s);
      out[static_cast<size_t>(r * C + c)] = static_cast<double>(fp8::e4m3_to_float(code)) / s;
    }
  return out;
}
int64_t row_tile(int64_t r, int64_t c) { return r * 1000 + c / 128; }
int64_t column_tile(int64_t r, int64_t c) { return (r / 128) * 100000 + c; }
int64_t block_tile(int64_t r, int64_t c) { return (r / 128) * 1000 + c / 128; }

Fp8Tensor quantized_weight(const Tensor& w) {
  Fp8Tensor q = ops::fp8_empty(kCpu, w.shape(), Fp8Tiling::kBlocks128);
  ops::fp8_quantize(kCpu, w, q);
  return q;
}

double rel_err(const Tensor& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double d = test::get(got, i) - want[static_cast<size_t>(i)];
    num += d * d;
    den += want[static_cast<size_t>(i)] * want[static_cast<size_t>(i)];
  }
  return std::sqrt(num / den);
}

// Sizes that cross a tile in every dimension: N tokens 130, K 200, M 140.
constexpr int64_t N = 130, K = 200, M = 140;

TEST(Fp8Linear, ForwardMatchesReference) {
  Tensor x = varied({N, K}, 1), w = varied({M, K}, 2), y = Tensor::empty({N, M}, DType::F32);
  ops::fp8_linear_forward(kCpu, x, quantized_weight(w), y);
  const std::vector<double> xs = seen(x, row_tile), ws = seen(w, block_tile);
  std::vector<double> want(N * M, 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t k = 0; k < K; ++k) want[n * M + m] += xs[n * K + k] * ws[m * K + k];
  EXPECT_LE(rel_err(y, want), 1e-6);
}

TEST(Fp8Linear, BackwardInputMatchesReferenceAndAccumulates) {
  Tensor dy = varied({N, M}, 3), w = varied({M, K}, 4), dx = Tensor::empty({N, K}, DType::F32);
  const Fp8Tensor wq = quantized_weight(w);
  ops::fp8_linear_backward_input(kCpu, dy, wq, dx);
  const std::vector<double> dys = seen(dy, row_tile), ws = seen(w, block_tile);
  std::vector<double> want(N * K, 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t m = 0; m < M; ++m) want[n * K + k] += dys[n * M + m] * ws[m * K + k];
  EXPECT_LE(rel_err(dx, want), 1e-6);
  ops::fp8_linear_backward_input(kCpu, dy, wq, dx, /*accumulate=*/true);
  for (double& v : want) v *= 2;
  EXPECT_LE(rel_err(dx, want), 1e-6);
}

TEST(Fp8Linear, BackwardWeightTilesBothOperandsAlongTheTokens) {
  Tensor dy = varied({N, M}, 5), x = varied({N, K}, 6), dw = Tensor::empty({M, K}, DType::F32);
  // An outlier in one token of one feature: tiled along the tokens it sets the scale of its feature's
  // first 128 tokens (their small values fall into E4M3's subnormals); tiled along the features it would
  // set its token's instead. With power-of-two scales only such out-of-range neighbours tell tilings apart.
  test::set(x, 3 * K + 5, 3e6);
  test::set(dy, 7 * M + 11, -2e6);
  ops::fp8_linear_backward_weight(kCpu, dy, x, dw, /*accumulate=*/false);
  auto product = [&](const std::vector<double>& a, const std::vector<double>& b) {
    std::vector<double> out(M * K, 0.0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t k = 0; k < K; ++k) out[m * K + k] += a[n * M + m] * b[n * K + k];
    return out;
  };
  const std::vector<double> want = product(seen(dy, column_tile), seen(x, column_tile));
  EXPECT_LE(rel_err(dw, want), 1e-6);
  // Tiles along the features (the forward's) give another result: the test above is not vacuous. Away
  // from the outliers' own row and column of dw (which they dominate), token 3's and 7's other features
  // are what the feature tiling would crush instead.
  const std::vector<double> by_features = product(seen(dy, row_tile), seen(x, row_tile));
  double num = 0, den = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) {
      if (m == 11 || k == 5) continue;
      const double d = test::get(dw, m * K + k) - by_features[m * K + k];
      num += d * d;
      den += by_features[m * K + k] * by_features[m * K + k];
    }
  EXPECT_GT(std::sqrt(num / den), 1e-3);
  ops::fp8_linear_backward_weight(kCpu, dy, x, dw, /*accumulate=*/true);
  std::vector<double> twice = want;
  for (double& v : twice) v *= 2;
  EXPECT_LE(rel_err(dw, twice), 1e-6);
}

// Grouped GEMMs: per expert, the dense FP8 GEMMs on that expert's rows and matrix (the token tiles of
// the weight gradient restart at each expert's first row).
TEST(Fp8Linear, GroupedEqualsDensePerGroup) {
  const std::vector<int64_t> counts = {3, 0, 140, 7};
  const int64_t E = 4, P = 150, Kg = 136, Mg = 72;
  Tensor counts_E = Tensor::empty({E}, DType::I64);
  for (int64_t e = 0; e < E; ++e) counts_E.data_as<int64_t>()[e] = counts[static_cast<size_t>(e)];
  Tensor x = varied({P, Kg}, 7), dy = varied({P, Mg}, 8), w = varied({E, Mg, Kg}, 9);
  const Fp8Tensor wq = quantized_weight(w);
  Tensor y = Tensor::empty({P, Mg}, DType::F32), dx = Tensor::empty({P, Kg}, DType::F32);
  Tensor dw = Tensor::empty({E, Mg, Kg}, DType::F32);
  ops::fp8_grouped_linear_forward(kCpu, x, wq, counts_E, y);
  ops::fp8_grouped_linear_backward_input(kCpu, dy, wq, counts_E, dx);
  ops::fp8_grouped_linear_backward_weight(kCpu, dy, x, counts_E, dw, /*accumulate=*/false);
  int64_t row = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t c = counts[static_cast<size_t>(e)];
    Tensor dw_e = Tensor::empty({Mg, Kg}, DType::F32);
    ops::fp8_linear_backward_weight(kCpu, dy.rows(row, row + c), x.rows(row, row + c), dw_e, false);
    // The grouped and dense CPU GEMMs sum in different orders: equal up to fp32 rounding.
    if (c > 0) EXPECT_LE(test::rel_l2(dw.rows(e, e + 1).reshape({Mg, Kg}), dw_e), 1e-6) << "expert " << e;
    else EXPECT_EQ(test::max_abs_diff(dw.rows(e, e + 1).reshape({Mg, Kg}), dw_e), 0.0) << "expert " << e;
    if (c > 0) {
      Tensor y_e = Tensor::empty({c, Mg}, DType::F32), dx_e = Tensor::empty({c, Kg}, DType::F32);
      ops::fp8_linear_forward(kCpu, x.rows(row, row + c), ops::fp8_matrix(wq, e), y_e);
      ops::fp8_linear_backward_input(kCpu, dy.rows(row, row + c), ops::fp8_matrix(wq, e), dx_e);
      EXPECT_LE(test::rel_l2(y.rows(row, row + c), y_e), 1e-6) << "expert " << e;
      EXPECT_LE(test::rel_l2(dx.rows(row, row + c), dx_e), 1e-6) << "expert " << e;
    }
    row += c;
  }
}

// Inputs that are their own quantisation: E4M3 values with 448 in every row and every column, so every
// tile (1x128 or 128x1, one per row or column here) has scale 1. There the three GEMMs are exact
// products of the same values, and <dy, x w^T> = <dy w, x> = <dy^T x, w>.
Tensor representable(int64_t R, int64_t C, uint64_t seed) {
  Tensor t = test::random_tensor({R, C}, DType::F32, seed, 40.0);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float v = fp8::e4m3_to_float(fp8::e4m3_from_float(t.data_as<float>()[i]));
    t.data_as<float>()[i] = v;
  }
  for (int64_t r = 0; r < std::max(R, C); ++r) t.data_as<float>()[(r % R) * C + r % C] = r % 2 ? 448.0f : -448.0f;
  return t;
}

TEST(Fp8Linear, AdjointIdentitiesOnRepresentableInputs) {
  const int64_t n = 40, k = 24, m = 20;
  Tensor x = representable(n, k, 10), dy = representable(n, m, 11), w = representable(m, k, 12);
  Tensor y = Tensor::empty({n, m}, DType::F32), dx = Tensor::empty({n, k}, DType::F32);
  Tensor dw = Tensor::empty({m, k}, DType::F32);
  const Fp8Tensor wq = quantized_weight(w);
  ops::fp8_linear_forward(kCpu, x, wq, y);
  ops::fp8_linear_backward_input(kCpu, dy, wq, dx);
  ops::fp8_linear_backward_weight(kCpu, dy, x, dw, false);
  const double a = test::dot(dy, y), b = test::dot(dx, x), c = test::dot(dw, w);
  EXPECT_NEAR(a, b, 1e-6 * std::fabs(a));
  EXPECT_NEAR(a, c, 1e-6 * std::fabs(a));
}

// A non-finite operand is never saturated into a finite product (docs/fp8.md): its whole tile turns NaN,
// so every output that contracts over that tile is NaN, and no other output is. A saturating cast
// would have turned an inf into +-448 x scale_inv and every output here finite.
TEST(Fp8Linear, NonFiniteOperandsReachTheOutputsAsNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  auto nan_pattern = [](const Tensor& t, const std::function<bool(int64_t, int64_t)>& expect_nan) {
    const int64_t C = t.dim(1);
    for (int64_t i = 0; i < t.numel(); ++i)
      ASSERT_EQ(std::isnan(test::get(t, i)), expect_nan(i / C, i % C)) << "element (" << i / C << ", " << i % C << ")";
  };
  {  // forward: an inf in row 5 of x, in its second 1x128 tile: all of row 5 of y
    Tensor x = varied({N, K}, 20), y = Tensor::empty({N, M}, DType::F32);
    test::set(x, 5 * K + 130, inf);
    ops::fp8_linear_forward(kCpu, x, quantized_weight(varied({M, K}, 21)), y);
    nan_pattern(y, [](int64_t n, int64_t) { return n == 5; });
  }
  {  // forward: a NaN in the weight's block (0, 1): the first 128 outputs of every row
    Tensor x = varied({N, K}, 22), w = varied({M, K}, 23), y = Tensor::empty({N, M}, DType::F32);
    test::set(w, 3 * K + 150, std::numeric_limits<float>::quiet_NaN());
    ops::fp8_linear_forward(kCpu, x, quantized_weight(w), y);
    nan_pattern(y, [](int64_t, int64_t m) { return m < 128; });
  }
  {  // data gradient: -inf in row 9 of dy: all of row 9 of dx
    Tensor dy = varied({N, M}, 24), dx = Tensor::empty({N, K}, DType::F32);
    test::set(dy, 9 * M + 2, -inf);
    ops::fp8_linear_backward_input(kCpu, dy, quantized_weight(varied({M, K}, 25)), dx);
    nan_pattern(dx, [](int64_t n, int64_t) { return n == 9; });
  }
  {  // weight gradient: an inf at token 129 of feature 4 of x (its second 128x1 tile): column 4 of dw
    Tensor dy = varied({N, M}, 26), x = varied({N, K}, 27), dw = Tensor::empty({M, K}, DType::F32);
    test::set(x, 129 * K + 4, inf);
    ops::fp8_linear_backward_weight(kCpu, dy, x, dw, /*accumulate=*/false);
    nan_pattern(dw, [](int64_t, int64_t k) { return k == 4; });
  }
}

TEST(Fp8Linear, RefusesAnUnquantizedOrMisshapenWeight) {
  Tensor x = varied({4, 8}, 13), y = Tensor::empty({4, 3}, DType::F32);
  Fp8Tensor rows = ops::fp8_empty(kCpu, {3, 8}, Fp8Tiling::kRows128);
  ops::fp8_quantize(kCpu, varied({3, 8}, 14), rows);
  test::expect_error([&] { ops::fp8_linear_forward(kCpu, x, rows, y); }, "128x128");
  test::expect_error([&] { ops::fp8_linear_forward(kCpu, x, quantized_weight(varied({3, 9}, 15)), y); }, "shape");
}

}  // namespace
}  // namespace quill
