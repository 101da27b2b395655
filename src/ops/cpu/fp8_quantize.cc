// CPU reference of blockwise FP8 quantisation (ops/fp8.h): every tile's amax, its power-of-two scale
// (fp8::block_scale) and the saturating E4M3 cast of each element times the scale; and the way back.
// One routine serves the three tilings: a tile is br x bc elements of one [R, C] matrix (1 x 128,
// 128 x 1 or 128 x 128), partial at the matrix's far edges, and its scale_inv lands at
// [tile row, tile column] of a [ceil(R/br), ceil(C/bc)] array.
#include "ops/fp8.h"
#include "ops/convert.h"
#include "ops/op_table.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include "ops/dispatch.h"
#include "ops/fp8_e4m3.h"

namespace quill::ops {
namespace {

using ops_detail::require_cpu;
using ops_detail::require_dtype;
using ops_detail::require_shape;

constexpr int64_t kB = fp8::kBlock;

int64_t tiles(int64_t n, int64_t b) { return (n + b - 1) / b; }

struct TileShape {
  int64_t rows, cols;
};
TileShape tile_shape(Fp8Tiling t) {
  switch (t) {
    case Fp8Tiling::kRows128: return {1, kB};
    case Fp8Tiling::kColumns128: return {kB, 1};
    case Fp8Tiling::kBlocks128: return {kB, kB};
  }
  return {1, kB};
}

// Tiles of x [R, C] (row-major) into codes and scale_inv [ceil(R/br), ceil(C/bc)].
void quantize_matrix(const float* x, int64_t R, int64_t C, TileShape t, uint8_t* codes, float* scale_inv) {
  const int64_t tc = tiles(C, t.cols);
  for (int64_t i0 = 0; i0 < R; i0 += t.rows)
    for (int64_t j0 = 0; j0 < C; j0 += t.cols) {
      const int64_t i1 = std::min(R, i0 + t.rows), j1 = std::min(C, j0 + t.cols);
      // A max that skips NaN (as fmaxf does) would hide it: non-finite elements are counted apart.
      float amax = 0.0f;
      bool finite = true;
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t j = j0; j < j1; ++j) {
          const float v = x[i * C + j];
          finite = finite && std::isfinite(v);
          amax = std::max(amax, std::fabs(v));
        }
      const float scale = fp8::block_scale(finite ? amax : NAN);
      scale_inv[(i0 / t.rows) * tc + j0 / t.cols] = fp8::block_scale_inv(scale);
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t j = j0; j < j1; ++j) codes[i * C + j] = fp8::e4m3_from_float(x[i * C + j] * scale);
    }
}

void dequantize_matrix(const uint8_t* codes, const float* scale_inv, int64_t R, int64_t C, TileShape t, float* out) {
  static const std::array<float, 256> value = [] {
    std::array<float, 256> v{};
    for (int c = 0; c < 256; ++c) v[static_cast<size_t>(c)] = fp8::e4m3_to_float(static_cast<uint8_t>(c));
    return v;
  }();
  const int64_t tc = tiles(C, t.cols);
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < C; ++j)
      out[i * C + j] = value[codes[i * C + j]] * scale_inv[(i / t.rows) * tc + j / t.cols];
}

// The matrices of a tensor under its tiling: a 3-D kBlocks128 stack is E matrices; otherwise one.
struct Matrices {
  int64_t count, R, C;
};
Matrices matrices_of(const char* op, const Shape& s, Fp8Tiling tiling) {
  const bool stack = tiling == Fp8Tiling::kBlocks128 && s.size() == 3;
  QUILL_CHECK(s.size() == 2 || stack, "{}: a {} tensor must be 2-D{}, got shape {}", op, fp8_tiling_name(tiling),
              tiling == Fp8Tiling::kBlocks128 ? " or a 3-D stack" : "", shape_str(s));
  return stack ? Matrices{s[0], s[1], s[2]} : Matrices{1, s[0], s[1]};
}


void check_quantized(const char* op, const Fp8Tensor& q, const Shape& scale_shape) {
  require_dtype(op, "codes", q.codes, DType::U8);
  require_shape(op, "scale_inv", q.scale_inv, scale_shape);
  require_dtype(op, "scale_inv", q.scale_inv, DType::F32);
}

}  // namespace

const char* fp8_tiling_name(Fp8Tiling tiling) {
  switch (tiling) {
    case Fp8Tiling::kRows128: return "1x128";
    case Fp8Tiling::kColumns128: return "128x1";
    case Fp8Tiling::kBlocks128: return "128x128";
  }
  return "?";
}

Shape fp8_scale_shape(const Shape& shape, Fp8Tiling tiling, Device device, bool transposed) {
  const Matrices m = matrices_of("fp8_scale_shape", shape, tiling);
  const TileShape t = tile_shape(tiling);
  Shape grid = {tiles(m.R, t.rows), tiles(m.C, t.cols)};
  if (device == Device::CUDA) {
    QUILL_CHECK(tiling == Fp8Tiling::kBlocks128, "fp8_scale_shape: on CUDA only weights (128x128 blocks) are "
                "quantised outside the GEMMs, not {} tiles", fp8_tiling_name(tiling));
    if (transposed) std::swap(grid[0], grid[1]);
    grid[1] = (grid[1] + 3) / 4 * 4;  // cuBLASLt's BLK128x128 rows, padded to 4 floats (ops/fp8.h)
  } else {
    QUILL_CHECK(!transposed, "fp8_scale_shape: the transposed factors exist on CUDA only");
  }
  if (shape.size() == 3) return {m.count, grid[0], grid[1]};
  return grid;
}

int64_t fp8_weight_copy_bytes(const Shape& shape, Device device) {
  const int64_t codes = shape_numel(shape);
  const int64_t scales = shape_numel(fp8_scale_shape(shape, Fp8Tiling::kBlocks128, device));
  if (device == Device::CPU) return codes + scales * 4;
  return 2 * codes + (scales + shape_numel(fp8_scale_shape(shape, Fp8Tiling::kBlocks128, device, true))) * 4;
}

Shape fp8_grouped_scale_shape(const Shape& shape, const Tensor& counts_E) {
  QUILL_CHECK(shape.size() == 2, "fp8_grouped_scale_shape: a 2-D tensor, got {}", shape_str(shape));
  const int64_t* c = ops_detail::require_group_counts("fp8_grouped_scale_shape", counts_E, shape[0]);
  int64_t rows = 0;
  for (int64_t e = 0; e < counts_E.numel(); ++e) rows += tiles(c[e], kB);
  return {rows, shape[1]};
}

Fp8Tensor fp8_empty(const DeviceContext& ctx, const Shape& shape, Fp8Tiling tiling) {
  Fp8Tensor q;
  q.tiling = tiling;
  q.codes = Tensor::empty(shape, DType::U8, *ctx.allocator);
  q.scale_inv = Tensor::empty(fp8_scale_shape(shape, tiling, ctx.device), DType::F32, *ctx.allocator);
  if (ctx.device == Device::CUDA) {
    Shape t = shape;
    std::swap(t[t.size() - 1], t[t.size() - 2]);
    q.codes_t = Tensor::empty(t, DType::U8, *ctx.allocator);
    q.scale_inv_t = Tensor::empty(fp8_scale_shape(shape, tiling, ctx.device, true), DType::F32, *ctx.allocator);
    // The factor rows are padded to 4 floats for cuBLASLt, and the quantisation writes only the blocks' own: the
    // padding zeroed once, so that a copy's bytes depend on the weight alone (two copies of one weight compare
    // equal; a poisoned allocation changes nothing), first measured unequal on an H100 (2026-12-06).
    ops::zero(ctx, q.scale_inv);
    ops::zero(ctx, q.scale_inv_t);
  }
  return q;
}

Fp8Tensor fp8_matrix(const Fp8Tensor& stack, int64_t e) {
  QUILL_CHECK(stack.tiling == Fp8Tiling::kBlocks128 && stack.codes.ndim() == 3 && 0 <= e && e < stack.codes.dim(0),
              "fp8_matrix: matrix {} of a quantised stack of shape {}", e,
              stack.codes.defined() ? shape_str(stack.codes.shape()) : std::string("(undefined)"));
  auto matrix = [e](const Tensor& t) { return t.rows(e, e + 1).reshape({t.dim(1), t.dim(2)}); };
  Fp8Tensor m;
  m.tiling = stack.tiling;
  m.codes = matrix(stack.codes);
  m.scale_inv = matrix(stack.scale_inv);
  if (stack.codes_t.defined()) m.codes_t = matrix(stack.codes_t);
  if (stack.scale_inv_t.defined()) m.scale_inv_t = matrix(stack.scale_inv_t);
  return m;
}

void fp8_quantize(const DeviceContext& ctx, const Tensor& x, const Fp8Tensor& out) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::fp8_quantize, "fp8_quantize")(ctx, x, out);
  const char* op = "fp8_quantize";
  require_cpu(op, ctx);
  QUILL_CHECK(x.defined(), "{}: x is undefined", op);
  const Matrices m = matrices_of(op, x.shape(), out.tiling);
  require_dtype(op, "x", x, DType::F32);
  require_shape(op, "codes", out.codes, x.shape());
  check_quantized(op, out, fp8_scale_shape(x.shape(), out.tiling));
  const TileShape t = tile_shape(out.tiling);
  const int64_t per_scale = out.scale_inv.numel() / m.count;
  for (int64_t e = 0; e < m.count; ++e)
    quantize_matrix(x.data_as<float>() + e * m.R * m.C, m.R, m.C, t, out.codes.data_as<uint8_t>() + e * m.R * m.C,
                    out.scale_inv.data_as<float>() + e * per_scale);
}

void fp8_quantize_grouped(const DeviceContext& ctx, const Tensor& x_PK, const Tensor& counts_E, const Fp8Tensor& out) {
  if (ctx.device == Device::CUDA)
    return cuda_op(ctx, &OpTable::fp8_quantize_grouped, "fp8_quantize_grouped")(ctx, x_PK, counts_E, out);
  const char* op = "fp8_quantize_grouped";
  require_cpu(op, ctx);
  QUILL_CHECK(x_PK.defined() && x_PK.ndim() == 2, "{}: x_PK must be 2-D [P, K]", op);
  QUILL_CHECK(out.tiling == Fp8Tiling::kColumns128, "{}: grouped tiles are 128x1, not {}", op, fp8_tiling_name(out.tiling));
  require_dtype(op, "x_PK", x_PK, DType::F32);
  require_shape(op, "codes", out.codes, x_PK.shape());
  check_quantized(op, out, fp8_grouped_scale_shape(x_PK.shape(), counts_E));
  const int64_t* c = counts_E.data_as<int64_t>();
  const int64_t K = x_PK.dim(1);
  int64_t row = 0, tile_row = 0;
  for (int64_t e = 0; e < counts_E.numel(); ++e) {
    quantize_matrix(x_PK.data_as<float>() + row * K, c[e], K, {kB, 1}, out.codes.data_as<uint8_t>() + row * K,
                    out.scale_inv.data_as<float>() + tile_row * K);
    row += c[e];
    tile_row += tiles(c[e], kB);
  }
}

void fp8_dequantize(const DeviceContext& ctx, const Fp8Tensor& q, const Tensor& counts_E, const Tensor& out,
                    bool from_transpose) {
  if (ctx.device == Device::CUDA)
    return cuda_op(ctx, &OpTable::fp8_dequantize, "fp8_dequantize")(ctx, q, counts_E, out, from_transpose);
  const char* op = "fp8_dequantize";
  require_cpu(op, ctx);
  QUILL_CHECK(!from_transpose, "{}: the transposed codes exist on CUDA only", op);
  QUILL_CHECK(q.codes.defined(), "{}: the quantised tensor is undefined", op);
  const Matrices m = matrices_of(op, q.codes.shape(), q.tiling);
  require_dtype(op, "out", out, DType::F32);
  require_shape(op, "out", out, q.codes.shape());
  const bool grouped = counts_E.defined();
  QUILL_CHECK(!grouped || q.tiling == Fp8Tiling::kColumns128, "{}: group counts with {} tiles", op,
              fp8_tiling_name(q.tiling));
  check_quantized(op, q, grouped ? fp8_grouped_scale_shape(q.codes.shape(), counts_E)
                                 : fp8_scale_shape(q.codes.shape(), q.tiling));
  const TileShape t = tile_shape(q.tiling);
  if (!grouped) {
    const int64_t per_scale = q.scale_inv.numel() / m.count;
    for (int64_t e = 0; e < m.count; ++e)
      dequantize_matrix(q.codes.data_as<uint8_t>() + e * m.R * m.C, q.scale_inv.data_as<float>() + e * per_scale, m.R,
                        m.C, t, out.data_as<float>() + e * m.R * m.C);
    return;
  }
  const int64_t* c = counts_E.data_as<int64_t>();
  int64_t row = 0, tile_row = 0;
  for (int64_t e = 0; e < counts_E.numel(); ++e) {
    dequantize_matrix(q.codes.data_as<uint8_t>() + row * m.C, q.scale_inv.data_as<float>() + tile_row * m.C, c[e], m.C,
                      t, out.data_as<float>() + row * m.C);
    row += c[e];
    tile_row += tiles(c[e], kB);
  }
}

}  // namespace quill::ops
