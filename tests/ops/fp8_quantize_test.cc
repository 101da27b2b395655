// Blockwise FP8 quantisation (ops/fp8.h) against a plain per-element reference: each element's tile
// found by its indices, the tile's amax by a scan of all elements sharing that tile. Tilings 1x128,
// 128x1 (the transpose's 1x128, the weight gradient's), 128x128 for a matrix and a stack, grouped 128x1
// restarting at each group, partial last tiles, an all-zero tile, non-finite values, and the round trip.
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

// A tensor whose tiles have very different magnitudes (each row and column scaled), so that a scale
// taken from the wrong tile shows.
Tensor varied(const Shape& shape, uint64_t seed) {
  Tensor x = test::random_tensor(shape, DType::F32, seed);
  const int64_t C = shape.back();
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t r = i / C, c = i % C;
    test::set(x, i, test::get(x, i) * std::ldexp(1.0, static_cast<int>((r * 7 + c * 3) % 23) - 11));
  }
  return x;
}

// The reference: tile_of(r, c) names the tile of element (r, c) of matrix [R, C]; returns each element's
// expected code and scale_inv.
struct Expected {
  std::vector<uint8_t> codes;
  std::vector<float> scale_inv;
};
Expected reference(const float* x, int64_t R, int64_t C, const std::function<int64_t(int64_t, int64_t)>& tile_of) {
  std::map<int64_t, float> amax;
  std::map<int64_t, bool> finite;
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) {
      const int64_t t = tile_of(r, c);
      if (!finite.count(t)) finite[t] = true;
      amax[t] = std::max(amax[t], std::fabs(x[r * C + c]));
      finite[t] = finite[t] && std::isfinite(x[r * C + c]);
    }
  Expected e;
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) {
      const int64_t t = tile_of(r, c);
      const float scale = finite[t] ? fp8::block_scale(amax[t]) : std::numeric_limits<float>::quiet_NaN();
      e.codes.push_back(fp8::e4m3_from_float(x[r * C + c] * scale));
      e.scale_inv.push_back(1.0f / scale);
    }
  return e;
}

// Checks q against the reference, element by element, with scale_index(r, c) the flat index of the
// element's scale_inv.
void expect_matches(const Fp8Tensor& q, const Expected& e, int64_t R, int64_t C, int64_t offset,
                    const std::function<int64_t(int64_t, int64_t)>& scale_index) {
  const uint8_t* codes = q.codes.data_as<uint8_t>() + offset;
  const float* s = q.scale_inv.data_as<float>();
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) {
      const size_t i = static_cast<size_t>(r * C + c);
      ASSERT_EQ(codes[i], e.codes[i]) << "element (" << r << ", " << c << ")";
      const float got = s[scale_index(r, c)];
      if (std::isnan(e.scale_inv[i])) ASSERT_TRUE(std::isnan(got)) << r << ", " << c;
      else ASSERT_EQ(got, e.scale_inv[i]) << "scale of element (" << r << ", " << c << ")";
    }
}

TEST(Fp8Quantize, RowTilesAlongTheLastDimensionWithAPartialLastTile) {
  const int64_t R = 5, C = 300;  // 300 = 2 x 128 + 44
  Tensor x = varied({R, C}, 1);
  Fp8Tensor q = ops::fp8_empty(kCpu, {R, C}, Fp8Tiling::kRows128);
  EXPECT_EQ(q.scale_inv.shape(), (Shape{R, 3}));
  ops::fp8_quantize(kCpu, x, q);
  const Expected e = reference(x.data_as<float>(), R, C, [](int64_t r, int64_t c) { return r * 100 + c / 128; });
  expect_matches(q, e, R, C, 0, [](int64_t r, int64_t c) { return r * 3 + c / 128; });
}

TEST(Fp8Quantize, ColumnTilesAlongTheRowsWithAPartialLastTile) {
  const int64_t R = 300, C = 6;
  Tensor x = varied({R, C}, 2);
  Fp8Tensor q = ops::fp8_empty(kCpu, {R, C}, Fp8Tiling::kColumns128);
  EXPECT_EQ(q.scale_inv.shape(), (Shape{3, C}));
  ops::fp8_quantize(kCpu, x, q);
  const Expected e = reference(x.data_as<float>(), R, C, [](int64_t r, int64_t c) { return (r / 128) * 100 + c; });
  expect_matches(q, e, R, C, 0, [C](int64_t r, int64_t c) { return (r / 128) * C + c; });
}

TEST(Fp8Quantize, BlocksOfAMatrixAndOfEachMatrixOfAStack) {
  const int64_t E = 2, M = 130, K = 257;
  Tensor w = varied({E, M, K}, 3);
  Fp8Tensor q = ops::fp8_empty(kCpu, {E, M, K}, Fp8Tiling::kBlocks128);
  EXPECT_EQ(q.scale_inv.shape(), (Shape{E, 2, 3}));
  ops::fp8_quantize(kCpu, w, q);
  for (int64_t m = 0; m < E; ++m) {
    const Expected e = reference(w.data_as<float>() + m * M * K, M, K,
                                 [](int64_t r, int64_t c) { return (r / 128) * 100 + c / 128; });
    expect_matches(q, e, M, K, m * M * K, [m](int64_t r, int64_t c) { return m * 6 + (r / 128) * 3 + c / 128; });
    // The stack's matrix m, quantised alone, is the same.
    Fp8Tensor alone = ops::fp8_empty(kCpu, {M, K}, Fp8Tiling::kBlocks128);
    ops::fp8_quantize(kCpu, w.rows(m, m + 1).reshape({M, K}), alone);
    const Fp8Tensor view = ops::fp8_matrix(q, m);
    EXPECT_EQ(test::max_abs_diff(alone.scale_inv, view.scale_inv), 0.0);
    for (int64_t i = 0; i < M * K; ++i) ASSERT_EQ(alone.codes.data_as<uint8_t>()[i], view.codes.data_as<uint8_t>()[i]);
  }
}

TEST(Fp8Quantize, GroupedColumnTilesRestartAtEachGroup) {
  const int64_t K = 5;
  const std::vector<int64_t> counts = {0, 130, 3, 128, 1};
  int64_t P = 0;
  for (int64_t c : counts) P += c;
  Tensor x = varied({P, K}, 4);
  Tensor counts_E = Tensor::empty({static_cast<int64_t>(counts.size())}, DType::I64);
  for (size_t e = 0; e < counts.size(); ++e) counts_E.data_as<int64_t>()[e] = counts[e];
  Fp8Tensor q;
  q.tiling = Fp8Tiling::kColumns128;
  q.codes = Tensor::empty({P, K}, DType::U8);
  q.scale_inv = Tensor::empty(ops::fp8_grouped_scale_shape({P, K}, counts_E), DType::F32);
  EXPECT_EQ(q.scale_inv.shape(), (Shape{2 + 1 + 1 + 1, K}));
  ops::fp8_quantize_grouped(kCpu, x, counts_E, q);
  // Each group alone, as its own 128x1 quantisation.
  int64_t row = 0, tile_row = 0;
  for (int64_t c : counts) {
    if (c > 0) {
      Fp8Tensor alone = ops::fp8_empty(kCpu, {c, K}, Fp8Tiling::kColumns128);
      ops::fp8_quantize(kCpu, x.rows(row, row + c), alone);
      for (int64_t i = 0; i < c * K; ++i)
        ASSERT_EQ(q.codes.data_as<uint8_t>()[row * K + i], alone.codes.data_as<uint8_t>()[i]) << "group at row " << row;
      for (int64_t i = 0; i < alone.scale_inv.numel(); ++i)
        ASSERT_EQ(q.scale_inv.data_as<float>()[tile_row * K + i], alone.scale_inv.data_as<float>()[i]);
    }
    row += c;
    tile_row += (c + 127) / 128;
  }
  Tensor back = Tensor::empty({P, K}, DType::F32);
  ops::fp8_dequantize(kCpu, q, counts_E, back);
  EXPECT_LE(test::rel_l2(back, x), 0.05);
}

TEST(Fp8Quantize, AllZeroTileHasScaleOneAndZeroCodes) {
  Tensor x = Tensor::zeros({2, 200}, DType::F32);
  test::set(x, 150, 3.0);  // row 0, second tile; the first tiles of both rows stay zero
  Fp8Tensor q = ops::fp8_empty(kCpu, {2, 200}, Fp8Tiling::kRows128);
  ops::fp8_quantize(kCpu, x, q);
  EXPECT_EQ(q.scale_inv.data_as<float>()[0], 1.0f);
  EXPECT_EQ(q.scale_inv.data_as<float>()[2], 1.0f);
  EXPECT_EQ(q.scale_inv.data_as<float>()[1], 1.0f / 128);  // 448 / 3 -> 128
  for (int64_t i = 0; i < 400; ++i) EXPECT_EQ(q.codes.data_as<uint8_t>()[i], i == 150 ? 0x7C : 0) << i;  // 384 = 1.5 * 2^8: field 15, mantissa 4
}

// A non-finite element makes its whole tile NaN (codes 0x7F, scale_inv NaN), never a saturated 448:
// the value then reaches the loss, where the trainer's non-finite check stops the run. Other tiles keep
// their values.
TEST(Fp8Quantize, NonFiniteValuesTurnTheirTileIntoNaN) {
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    Tensor x = test::random_tensor({2, 256}, DType::F32, 5);
    x.data_as<float>()[130] = bad;  // row 0, tile 1
    Fp8Tensor q = ops::fp8_empty(kCpu, {2, 256}, Fp8Tiling::kRows128);
    ops::fp8_quantize(kCpu, x, q);
    EXPECT_TRUE(std::isnan(q.scale_inv.data_as<float>()[1]));
    for (int64_t i = 128; i < 256; ++i) ASSERT_EQ(q.codes.data_as<uint8_t>()[i], 0x7F) << i;
    for (int64_t t : {0, 2, 3}) EXPECT_TRUE(std::isfinite(q.scale_inv.data_as<float>()[t])) << t;
    Tensor back = Tensor::empty({2, 256}, DType::F32);
    ops::fp8_dequantize(kCpu, q, Tensor(), back);
    EXPECT_TRUE(std::isnan(back.data_as<float>()[200]));
    EXPECT_TRUE(std::isfinite(back.data_as<float>()[100]));
  }
}

// Dequantised values are code value x scale_inv, within half an E4M3 step of the input (relative 2^-4
// for normal values).
TEST(Fp8Quantize, DequantizedValuesAreCodesTimesScale) {
  Tensor x = varied({7, 200}, 6);
  Fp8Tensor q = ops::fp8_empty(kCpu, {7, 200}, Fp8Tiling::kRows128);
  ops::fp8_quantize(kCpu, x, q);
  Tensor back = Tensor::empty({7, 200}, DType::F32);
  ops::fp8_dequantize(kCpu, q, Tensor(), back);
  for (int64_t r = 0; r < 7; ++r)
    for (int64_t c = 0; c < 200; ++c) {
      const int64_t i = r * 200 + c;
      const float s = q.scale_inv.data_as<float>()[r * 2 + c / 128];
      ASSERT_EQ(back.data_as<float>()[i], fp8::e4m3_to_float(q.codes.data_as<uint8_t>()[i]) * s);
      const double v = test::get(x, i), err = std::fabs(test::get(back, i) - v);
      ASSERT_LE(err, std::max(std::fabs(v) / 16, 0x1p-10 * s)) << i;
    }
}

// Why layouts agree (docs/decisions/fp8-blockwise.md): with power-of-two scales an element's quantised
// value does not depend on which tile holds it, unless the tile's scale pushes it below E4M3's normal
// range. Here one row is quantised beside neighbours of other magnitudes, then alone.
TEST(Fp8Quantize, PowerOfTwoScalesMakeAValueIndependentOfItsTileMates) {
  Tensor row = test::random_tensor({1, 128}, DType::F32, 7);
  Tensor both = Tensor::empty({2, 128}, DType::F32);
  for (int64_t c = 0; c < 128; ++c) {
    test::set(both, c, test::get(row, c));
    test::set(both, 128 + c, 37.0 * test::get(row, c));
  }
  Fp8Tensor alone = ops::fp8_empty(kCpu, {1, 128}, Fp8Tiling::kRows128);
  Fp8Tensor column = ops::fp8_empty(kCpu, {2, 128}, Fp8Tiling::kColumns128);  // each tile: row 0 and row 1
  ops::fp8_quantize(kCpu, row, alone);
  ops::fp8_quantize(kCpu, both, column);
  Tensor a = Tensor::empty({1, 128}, DType::F32), b = Tensor::empty({2, 128}, DType::F32);
  ops::fp8_dequantize(kCpu, alone, Tensor(), a);
  ops::fp8_dequantize(kCpu, column, Tensor(), b);
  int64_t equal = 0;
  for (int64_t c = 0; c < 128; ++c) equal += test::get(a, c) == test::get(b, c);
  EXPECT_GE(equal, 120);  // all but the few tiny elements that fall into the subnormal range
}

TEST(Fp8Quantize, RefusesWrongShapesAndDtypes) {
  Fp8Tensor q = ops::fp8_empty(kCpu, {4, 8}, Fp8Tiling::kRows128);
  test::expect_error([&] { ops::fp8_quantize(kCpu, Tensor::zeros({4, 9}, DType::F32), q); }, "codes");
  test::expect_error([&] { ops::fp8_quantize(kCpu, Tensor::zeros({4, 8}, DType::F64), q); }, "dtype");
  test::expect_error([&] { ops::fp8_quantize(kCpu, Tensor::zeros({2, 4, 8}, DType::F32), q); }, "2-D");
}

}  // namespace
}  // namespace quill
