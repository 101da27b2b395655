// CUDA element-wise, column, conversion and transfer ops (elementwise.cu, columns.cu, convert.cu)
// against the CPU reference.
// The maps round once from fp32 (or compute in fp64 for F64), exactly as the CPU reference does
// before its result is rounded to bf16, so their results are compared bit for bit with the CPU
// result (rounded to the output dtype): a stricter check than the 1e-2 bf16 tolerance. Reductions
// (ds, sum_squares) are compared by relative error: the CPU sums in order, the GPU in a tree.
// Every case runs on 16-byte-aligned tensors (vector path, sizes with a tail) and on views that
// start one element/row into their buffer (element path); outputs are poisoned and guarded.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "base/error.h"
#include "cuda/harness.h"
#include "ops/columns.h"
#include "ops/convert.h"
#include "ops/elementwise.h"
#include "util/test_util.h"

namespace quill {
namespace {

using test::inputs_ready;
using test::GuardedDevice;
using test::gpu_ctx;
using test::to_device;
using test::to_host;

const DeviceContext kCpu = DeviceContext::cpu();

// The CPU reference runs in F32 for BF16 and F32 GPU tensors, in F64 for F64.
DType cpu_dtype(DType d) { return d == DType::F64 ? DType::F64 : DType::F32; }

// A random host input in the CPU dtype holding exactly the values the GPU sees in `d`.
Tensor input(const Shape& shape, DType d, uint64_t seed, double scale = 1.0) {
  if (d == DType::F64) return test::random_tensor(shape, DType::F64, seed, scale);
  Tensor t = test::random_tensor(shape, DType::F32, seed, scale);
  return d == DType::BF16 ? test::round_bf16(t) : t;
}

// The CPU result as the GPU must store it.
Tensor expected(const Tensor& ref, DType d) { return ref.dtype() == d ? ref : convert_dtype(ref, d); }

// A device tensor of the host tensor's shape and values (in dtype d), starting `offset` rows into a
// guarded buffer of `offset` extra leading rows (offset 1 with an odd row misaligns it).
struct Placed {
  std::unique_ptr<GuardedDevice> buffer;
  Tensor view;
};
Placed place(const Tensor& host, DType d, int64_t offset) {
  Shape big = host.shape();
  big[0] += offset;
  Tensor hb = Tensor::zeros(big, host.dtype());
  std::memcpy(static_cast<char*>(hb.data()) + (hb.nbytes() - host.nbytes()), host.data(), host.nbytes());
  Placed p;
  p.buffer = test::to_guarded_device(hb, d);
  p.view = p.buffer->tensor().rows(offset, big[0]);
  return p;
}
Placed place_poisoned(const Shape& shape, DType d, int64_t offset) {
  Shape big = shape;
  big[0] += offset;
  Placed p;
  p.buffer = test::poisoned_output(big, d);
  p.view = p.buffer->tensor().rows(offset, big[0]);
  return p;
}

std::string label(const char* op, DType d, const Shape& shape, int64_t offset) {
  return std::string(op) + " " + dtype_name(d) + shape_str(shape) + (offset ? " (offset view)" : " (aligned)");
}

// Bit-for-bit comparison of a device result with the host expectation of the same dtype; reports
// how many elements differ and the first few.
void expect_bits(const std::string& what, const Tensor& device, const Tensor& want) {
  const Tensor got = to_host(device);
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.numel(), want.numel()) << what;
  const size_t es = dtype_size(got.dtype());
  int64_t differ = 0;
  std::string first;
  for (int64_t i = 0; i < got.numel(); ++i) {
    if (std::memcmp(static_cast<const char*>(got.data()) + i * es, static_cast<const char*>(want.data()) + i * es,
                    es) == 0)
      continue;
    if (differ++ < 5)
      first += " [" + std::to_string(i) + "] got " + std::to_string(test::get(got, i)) + " want " +
               std::to_string(test::get(want, i)) + ";";
  }
  EXPECT_EQ(differ, 0) << what << ": " << differ << " of " << got.numel() << " elements differ:" << first;
  std::printf("  %-64s %s\n", what.c_str(), differ ? "DIFFERS" : "bit-exact");
}

void expect_guards(const std::string& what, const Placed& p) {
  EXPECT_TRUE(p.buffer->guards_intact()) << what << ": wrote outside its buffer";
}

template <typename F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected a quill::Error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what();
  }
}

// ------------------------------------------------------------------------------------------------

TEST(ElementwiseCuda, CopyAnyDtype) {
  QUILL_REQUIRE_GPU();
  const DeviceContext ctx = gpu_ctx();
  for (int64_t offset : {0, 1}) {
    const Tensor x = input({37, 131}, DType::BF16, 1);
    Placed src = place(x, DType::BF16, offset), dst = place_poisoned({37, 131}, DType::BF16, offset);
    Tensor ids = Tensor::empty({1001}, DType::I32);
    for (int64_t i = 0; i < 1001; ++i) ids.data_as<int32_t>()[i] = static_cast<int32_t>(i * 7919 % 1009 - 500);
    Placed isrc = place(ids, DType::I32, offset), idst = place_poisoned({1001}, DType::I32, offset);
    inputs_ready();
    ops::copy(ctx, src.view, dst.view);
    ops::copy(ctx, isrc.view, idst.view);
    expect_bits(label("copy", DType::BF16, {37, 131}, offset), dst.view, expected(x, DType::BF16));
    expect_bits(label("copy", DType::I32, {1001}, offset), idst.view, ids);
    expect_guards("copy", dst);
    expect_guards("copy I32", idst);
  }
}

void check_add(DType d, const Shape& shape, int64_t offset, uint64_t seed) {
  const std::string what = label("add_inplace", d, shape, offset);
  SCOPED_TRACE(what);
  const Tensor y0 = input(shape, d, seed), x = input(shape, d, seed + 1);
  Tensor ref = y0.clone();
  ops::add_inplace(kCpu, ref, x);
  Placed y = place(y0, d, offset), xd = place(x, d, offset);
  inputs_ready();
  ops::add_inplace(gpu_ctx(), y.view, xd.view);
  expect_bits(what, y.view, expected(ref, d));
  expect_guards(what, y);
}

TEST(ElementwiseCuda, AddInplace) {
  QUILL_REQUIRE_GPU();
  for (DType d : {DType::BF16, DType::F32, DType::F64})
    for (int64_t offset : {0, 1}) {
      check_add(d, {37, 131}, offset, 10);
      check_add(d, {4847}, offset, 11);
    }
  check_add(DType::BF16, {2053, 1100}, 0, 12);  // more elements than one pass of the grid
  // y += y (the output is its own input).
  const Tensor y0 = input({37, 131}, DType::F32, 13);
  Tensor ref = y0.clone();
  ops::add_inplace(kCpu, ref, y0.clone());
  Placed y = place(y0, DType::F32, 0);
  inputs_ready();
  ops::add_inplace(gpu_ctx(), y.view, y.view);
  expect_bits("add_inplace y += y", y.view, ref);
}

void check_scale_inplace(DType d, const Shape& shape, int64_t offset, uint64_t seed) {
  const std::string what = label("scale_inplace", d, shape, offset);
  SCOPED_TRACE(what);
  const double s = -0.3712345678;
  const Tensor y0 = input(shape, d, seed);
  Tensor ref = y0.clone();
  ops::scale_inplace(kCpu, ref, s);
  Placed y = place(y0, d, offset);
  inputs_ready();
  ops::scale_inplace(gpu_ctx(), y.view, s);
  expect_bits(what, y.view, expected(ref, d));
  expect_guards(what, y);
}

TEST(ElementwiseCuda, ScaleInplace) {
  QUILL_REQUIRE_GPU();
  for (DType d : {DType::BF16, DType::F32, DType::F64})
    for (int64_t offset : {0, 1}) {
      check_scale_inplace(d, {37, 131}, offset, 20);
      check_scale_inplace(d, {4847}, offset, 21);
    }
}

// y = x * s, then dx = dy * s and ds += sum(dy * x) onto a nonzero ds.
void check_scale_by_scalar(DType d, const Shape& shape, int64_t offset, uint64_t seed) {
  const std::string what = label("scale_by_scalar", d, shape, offset);
  SCOPED_TRACE(what);
  const Tensor x = input(shape, d, seed), dy = input(shape, d, seed + 1);
  Tensor s = Tensor::empty({1}, DType::F32), ds0 = Tensor::empty({1}, DType::F32);
  s.data_as<float>()[0] = 0.7318f;
  ds0.data_as<float>()[0] = 0.25f;
  Tensor y_ref = Tensor::empty(shape, DType::F32), dx_ref = Tensor::empty(shape, DType::F32), ds_ref = ds0.clone();
  ops::scale_by_scalar(kCpu, x, s, y_ref);
  ops::scale_by_scalar_backward(kCpu, x, s, dy, dx_ref, ds_ref);

  const DeviceContext ctx = gpu_ctx();
  Placed xd = place(x, d, offset), dyd = place(dy, d, offset), sd = place(s, DType::F32, 0);
  Placed y = place_poisoned(shape, d, offset), dx = place_poisoned(shape, d, offset);
  Placed ds = place(ds0, DType::F32, 0);
  inputs_ready();
  ops::scale_by_scalar(ctx, xd.view, sd.view, y.view);
  ops::scale_by_scalar_backward(ctx, xd.view, sd.view, dyd.view, dx.view, ds.view);
  expect_bits(what + " y", y.view, expected(y_ref, d));
  expect_bits(what + " dx", dx.view, expected(dx_ref, d));
  test::expect_device_close(what + " ds (+= onto 0.25)", ds.view, ds_ref, 1e-6);
  expect_guards(what + " y", y);
  expect_guards(what + " dx", dx);
  expect_guards(what + " ds", ds);
}

TEST(ElementwiseCuda, ScaleByScalarAndBackward) {
  QUILL_REQUIRE_GPU();
  for (DType d : {DType::BF16, DType::F32})
    for (int64_t offset : {0, 1}) {
      check_scale_by_scalar(d, {37, 130}, offset, 30);
      check_scale_by_scalar(d, {4847}, offset, 31);
    }
  // Many blocks, each thread looping over the grid: the two-pass reduction at scale.
  check_scale_by_scalar(DType::BF16, {2053, 1100}, 0, 32);
  check_scale_by_scalar(DType::F32, {2053, 1100}, 1, 33);
}

// y = x * s[n] per row, then dx = dy * s[n] and ds[n] = dy[n] . x[n] (overwritten).
void check_scale_rows(DType d, int64_t N, int64_t D, int64_t offset, uint64_t seed) {
  const std::string what = label("scale_rows", d, {N, D}, offset);
  SCOPED_TRACE(what);
  const Tensor x = input({N, D}, d, seed), dy = input({N, D}, d, seed + 1);
  const Tensor s = input({N}, DType::F32, seed + 2);
  Tensor y_ref = Tensor::empty({N, D}, DType::F32), dx_ref = Tensor::empty({N, D}, DType::F32);
  Tensor ds_ref = Tensor::empty({N}, DType::F32);
  ops::scale_rows(kCpu, x, s, y_ref);
  ops::scale_rows_backward(kCpu, x, s, dy, dx_ref, ds_ref);

  const DeviceContext ctx = gpu_ctx();
  Placed xd = place(x, d, offset), dyd = place(dy, d, offset), sd = place(s, DType::F32, offset);
  Placed y = place_poisoned({N, D}, d, offset), dx = place_poisoned({N, D}, d, offset);
  Placed ds = place_poisoned({N}, DType::F32, offset);
  inputs_ready();
  ops::scale_rows(ctx, xd.view, sd.view, y.view);
  ops::scale_rows_backward(ctx, xd.view, sd.view, dyd.view, dx.view, ds.view);
  expect_bits(what + " y", y.view, expected(y_ref, d));
  expect_bits(what + " dx", dx.view, expected(dx_ref, d));
  test::expect_device_close(what + " ds", ds.view, ds_ref, 1e-6);
  expect_guards(what + " y", y);
  expect_guards(what + " dx", dx);
  expect_guards(what + " ds", ds);
}

TEST(ElementwiseCuda, ScaleRowsAndBackward) {
  QUILL_REQUIRE_GPU();
  for (DType d : {DType::BF16, DType::F32})
    for (int64_t offset : {0, 1}) {
      check_scale_rows(d, 37, 130, offset, 40);
      check_scale_rows(d, 37, 13, offset, 41);
      check_scale_rows(d, 37, 136, offset, 47);  // D % 8 == 0: 16-byte units (an offset row stays aligned)
    }
  check_scale_rows(DType::BF16, 40099, 257, 0, 42);  // more rows than warps in the grid
  check_scale_rows(DType::BF16, 3, 5000, 0, 43);      // long rows: several trips per lane with a tail
  check_scale_rows(DType::BF16, 8192, 2048, 0, 48);   // the shared experts' rows: 8 units a lane
  check_scale_rows(DType::BF16, 1001, 8, 0, 49);      // one unit a row: a lane per row
  check_scale_rows(DType::BF16, 1001, 64, 0, 50);     // 8 lanes per row, 4 rows per warp
  check_scale_rows(DType::F32, 501, 2048, 1, 51);     // fp32 units of 4

  // ds may be s itself (the reference allows it: each row's s is read before its ds is written),
  // on the element path (D = 130) and on the 16-byte path (D = 2048).
  for (int64_t D : {130, 2048}) {
    const int64_t N = 37;
    const Tensor x = input({N, D}, DType::BF16, 44), dy = input({N, D}, DType::BF16, 45);
    const Tensor s = input({N}, DType::F32, 46);
    Tensor dx_ref = Tensor::empty({N, D}, DType::F32), s_ref = s.clone();
    ops::scale_rows_backward(kCpu, x, s_ref, dy, dx_ref, s_ref);
    Placed xd = place(x, DType::BF16, 0), dyd = place(dy, DType::BF16, 0), sd = place(s, DType::F32, 0);
    Placed dx = place_poisoned({N, D}, DType::BF16, 0);
    inputs_ready();
    ops::scale_rows_backward(gpu_ctx(), xd.view, sd.view, dyd.view, dx.view, sd.view);
    const std::string what = "scale_rows_backward ds aliasing s, D = " + std::to_string(D);
    expect_bits(what + ": dx", dx.view, expected(dx_ref, DType::BF16));
    test::expect_device_close(what + ": ds", sd.view, s_ref, 1e-6);
  }
}

// Outputs over their inputs: y = x * s in place, then dx over dy and dx over x (each element is
// read by the lane that writes it, before it writes it); and 16-byte-shaped rows on views that start
// 2 bytes past a 16-byte boundary (the element path).
TEST(ElementwiseCuda, ScaleRowsInPlaceAndMisaligned) {
  QUILL_REQUIRE_GPU();
  const DeviceContext ctx = gpu_ctx();
  for (int64_t D : {136, 2048}) {
    const int64_t N = 300;
    const std::string shape = " [" + std::to_string(N) + ", " + std::to_string(D) + "]";
    const Tensor x = input({N, D}, DType::BF16, 60), dy = input({N, D}, DType::BF16, 61);
    const Tensor s = input({N}, DType::F32, 62);
    Tensor y_ref = Tensor::empty({N, D}, DType::F32), dx_ref = Tensor::empty({N, D}, DType::F32);
    Tensor ds_ref = Tensor::empty({N}, DType::F32);
    ops::scale_rows(kCpu, x, s, y_ref);
    ops::scale_rows_backward(kCpu, x, s, dy, dx_ref, ds_ref);
    {
      Placed xd = place(x, DType::BF16, 0), sd = place(s, DType::F32, 0);
      inputs_ready();
      ops::scale_rows(ctx, xd.view, sd.view, xd.view);
      expect_bits("scale_rows y over x" + shape, xd.view, expected(y_ref, DType::BF16));
      expect_guards("scale_rows y over x", xd);
    }
    {
      Placed xd = place(x, DType::BF16, 0), dyd = place(dy, DType::BF16, 0), sd = place(s, DType::F32, 0);
      Placed ds = place_poisoned({N}, DType::F32, 0);
      inputs_ready();
      ops::scale_rows_backward(ctx, xd.view, sd.view, dyd.view, dyd.view, ds.view);
      expect_bits("scale_rows_backward dx over dy" + shape, dyd.view, expected(dx_ref, DType::BF16));
      test::expect_device_close("scale_rows_backward dx over dy" + shape + ": ds", ds.view, ds_ref, 1e-6);
    }
    {
      Placed xd = place(x, DType::BF16, 0), dyd = place(dy, DType::BF16, 0), sd = place(s, DType::F32, 0);
      Placed ds = place_poisoned({N}, DType::F32, 0);
      inputs_ready();
      ops::scale_rows_backward(ctx, xd.view, sd.view, dyd.view, xd.view, ds.view);
      expect_bits("scale_rows_backward dx over x" + shape, xd.view, expected(dx_ref, DType::BF16));
      test::expect_device_close("scale_rows_backward dx over x" + shape + ": ds", ds.view, ds_ref, 1e-6);
    }
    for (const char* which : {"x", "y", "dy", "dx"}) {
      const std::string w = which;
      auto off = [&](const char* name) { return w == name ? size_t{2} : size_t{0}; };
      auto xd = test::to_guarded_device(x, DType::BF16, off("x"));
      auto dyd = test::to_guarded_device(dy, DType::BF16, off("dy"));
      auto y = test::poisoned_output({N, D}, DType::BF16, off("y"));
      auto dx = test::poisoned_output({N, D}, DType::BF16, off("dx"));
      Placed sd = place(s, DType::F32, 0), ds = place_poisoned({N}, DType::F32, 0);
      inputs_ready();
      ops::scale_rows(ctx, xd->tensor(), sd.view, y->tensor());
      ops::scale_rows_backward(ctx, xd->tensor(), sd.view, dyd->tensor(), dx->tensor(), ds.view);
      const std::string what = "scale_rows " + w + " misaligned" + shape;
      expect_bits(what + ": y", y->tensor(), expected(y_ref, DType::BF16));
      expect_bits(what + ": dx", dx->tensor(), expected(dx_ref, DType::BF16));
      test::expect_device_close(what + ": ds", ds.view, ds_ref, 1e-6);
      EXPECT_TRUE(y->guards_intact()) << what << ": y written outside its bounds";
      EXPECT_TRUE(dx->guards_intact()) << what << ": dx written outside its bounds";
    }
  }
}

void check_sum_squares(DType d, const Shape& shape, int64_t offset, uint64_t seed) {
  const std::string what = label("sum_squares", d, shape, offset);
  SCOPED_TRACE(what);
  const Tensor x = input(shape, d, seed, 0.5);
  const double ref = ops::sum_squares(kCpu, x);
  Placed xd = place(x, d, offset);
  inputs_ready();
  const double got = ops::sum_squares(gpu_ctx(), xd.view);
  const double rel = std::fabs(got - ref) / ref;
  EXPECT_LE(rel, 1e-9) << what << ": got " << got << ", CPU " << ref;
  std::printf("  %-64s got %.17g CPU %.17g rel %.3g\n", what.c_str(), got, ref, rel);
}

TEST(ElementwiseCuda, SumSquares) {
  QUILL_REQUIRE_GPU();
  for (DType d : {DType::BF16, DType::F32, DType::F64})
    for (int64_t offset : {0, 1}) {
      check_sum_squares(d, {37, 131}, offset, 50);
      check_sum_squares(d, {1}, offset, 51);
    }
  check_sum_squares(DType::BF16, {2053, 1100}, 0, 52);
  check_sum_squares(DType::F32, {2053, 1100}, 1, 53);
  const Tensor empty = to_device(Tensor::empty({0}, DType::F32), DType::F32);
  EXPECT_EQ(ops::sum_squares(gpu_ctx(), empty), 0.0);
}

// ------------------------------------------------------------------------------------------------

TEST(ColumnsCuda, GetAndSetColumns) {
  QUILL_REQUIRE_GPU();
  const DeviceContext ctx = gpu_ctx();
  const int64_t N = 37, W = 13, col = 3, w = 5;
  for (DType d : {DType::BF16, DType::F32})
    for (int64_t offset : {0, 1}) {
      const Tensor x = input({N, W}, d, 60), v = input({N, w}, d, 61);
      Tensor out_ref = Tensor::empty({N, w}, cpu_dtype(d)), x_ref = x.clone();
      ops::get_columns(kCpu, x, col, out_ref);
      ops::set_columns(kCpu, x_ref, col, v);
      Placed xd = place(x, d, offset), vd = place(v, d, offset), out = place_poisoned({N, w}, d, offset);
      inputs_ready();
      ops::get_columns(ctx, xd.view, col, out.view);
      ops::set_columns(ctx, xd.view, col, vd.view);
      expect_bits(label("get_columns [3, 8)", d, {N, W}, offset), out.view, expected(out_ref, d));
      expect_bits(label("set_columns [3, 8) (other columns kept)", d, {N, W}, offset), xd.view, expected(x_ref, d));
      expect_guards("get_columns out", out);
      expect_guards("set_columns x", xd);
    }
  // The last columns, and all of them.
  const Tensor x = input({N, W}, DType::F32, 62);
  Tensor tail_ref = Tensor::empty({N, 2}, DType::F32);
  ops::get_columns(kCpu, x, W - 2, tail_ref);
  Placed xd = place(x, DType::F32, 0), tail = place_poisoned({N, 2}, DType::F32, 0);
  Placed all = place_poisoned({N, W}, DType::F32, 0);
  inputs_ready();
  ops::get_columns(ctx, xd.view, W - 2, tail.view);
  ops::get_columns(ctx, xd.view, 0, all.view);
  expect_bits("get_columns last two", tail.view, tail_ref);
  expect_bits("get_columns all", all.view, x);
  expect_error([&] { ops::get_columns(ctx, xd.view, W - 1, tail.view); }, "get_columns: columns [12, 14)");
  // Rows, pitches and column offset 16-byte aligned (the 16-byte copy kernel, as for the stacked projections'
  // blocks), and a column offset that is not (8-byte units), both against the CPU.
  for (const int64_t c0 : {int64_t{128}, int64_t{132}}) {  // bf16: 256 bytes in, or 264
    const int64_t N2 = 67, W2 = 208, w2 = 64;
    const Tensor x2 = input({N2, W2}, DType::BF16, 63), v2 = input({N2, w2}, DType::BF16, 64);
    Tensor got_ref = Tensor::empty({N2, w2}, DType::F32), x2_ref = x2.clone();
    ops::get_columns(kCpu, x2, c0, got_ref);
    ops::set_columns(kCpu, x2_ref, c0, v2);
    Placed x2d = place(x2, DType::BF16, 0), v2d = place(v2, DType::BF16, 0);
    Placed got = place_poisoned({N2, w2}, DType::BF16, 0);
    inputs_ready();
    ops::get_columns(ctx, x2d.view, c0, got.view);
    ops::set_columns(ctx, x2d.view, c0, v2d.view);
    const std::string at = " at column " + std::to_string(c0);
    expect_bits("get_columns bf16[67, 208]" + at, got.view, expected(got_ref, DType::BF16));
    expect_bits("set_columns bf16[67, 208]" + at, x2d.view, expected(x2_ref, DType::BF16));
    expect_guards("get_columns out", got);
    expect_guards("set_columns x", x2d);
  }
  // Bytes at an odd column (the copy kernel's 1-byte unit; the FP8 codes are U8), against the CPU.
  {
    const int64_t N3 = 19, W3 = 45, c3 = 7, w3 = 11;
    Tensor x3 = Tensor::empty({N3, W3}, DType::U8), v3 = Tensor::empty({N3, w3}, DType::U8);
    for (int64_t i = 0; i < x3.numel(); ++i) x3.data_as<uint8_t>()[i] = static_cast<uint8_t>(i * 37 + 5);
    for (int64_t i = 0; i < v3.numel(); ++i) v3.data_as<uint8_t>()[i] = static_cast<uint8_t>(i * 11 + 200);
    Tensor got_ref = Tensor::empty({N3, w3}, DType::U8), x3_ref = x3.clone();
    ops::get_columns(kCpu, x3, c3, got_ref);
    ops::set_columns(kCpu, x3_ref, c3, v3);
    const Tensor x3d = Tensor::empty({N3, W3}, DType::U8, *ctx.allocator);
    const Tensor v3d = Tensor::empty({N3, w3}, DType::U8, *ctx.allocator);
    const Tensor got = Tensor::empty({N3, w3}, DType::U8, *ctx.allocator);
    ASSERT_EQ(cudaMemcpy(x3d.data(), x3.data(), x3.nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(v3d.data(), v3.data(), v3.nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
    inputs_ready();
    ops::get_columns(ctx, x3d, c3, got);
    ops::set_columns(ctx, x3d, c3, v3d);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_TRUE(test::same_bits(test::to_host(got), got_ref)) << "get_columns u8[19, 45] at column 7";
    EXPECT_TRUE(test::same_bits(test::to_host(x3d), x3_ref)) << "set_columns u8[19, 45] at column 7";
  }
}

// ------------------------------------------------------------------------------------------------

// Values where rounding to bf16 is delicate: exact ties (to even, both directions), infinities,
// signed zero, an fp32 subnormal, the largest finite fp32.
void add_specials(const Tensor& t) {
  const uint32_t bits[] = {0x3F808000u, 0x3F818000u, 0xBF808000u, 0x3F80FFFFu, 0x7F800000u,
                           0xFF800000u, 0x80000000u, 0x00000123u, 0x7F7FFFFFu, 0x3F7FFFFFu};
  for (size_t i = 0; i < sizeof(bits) / sizeof(bits[0]) && static_cast<int64_t>(i) < t.numel(); ++i) {
    float f;
    std::memcpy(&f, &bits[i], 4);
    t.data_as<float>()[i] = f;
  }
}

TEST(ConvertCuda, EveryFloatPairBitExact) {
  QUILL_REQUIRE_GPU();
  const DeviceContext ctx = gpu_ctx();
  const DType all[] = {DType::F32, DType::BF16, DType::F64};
  for (DType from : all)
    for (DType to : all)
      for (int64_t offset : {0, 1}) {
        const std::string what = std::string("convert ") + dtype_name(from) + " -> " + dtype_name(to) +
                                 (offset ? " (offset view)" : " (aligned)");
        SCOPED_TRACE(what);
        // The source in its own dtype on the host (F64 with full double precision).
        Tensor src;
        if (from == DType::F64) {
          src = test::random_tensor({1001}, DType::F64, 70, 3.0);
        } else {
          Tensor f = test::random_tensor({1001}, DType::F32, 71, 3.0);
          add_specials(f);
          src = from == DType::BF16 ? convert_dtype(f, DType::BF16) : f;
        }
        Tensor want = Tensor::empty({1001}, to);
        ops::convert(kCpu, src, want);
        Placed sd = place(src, from, offset), dd = place_poisoned({1001}, to, offset);
        inputs_ready();
        ops::convert(ctx, sd.view, dd.view);
        expect_bits(what, dd.view, want);
        expect_guards(what, dd);
      }
}

TEST(ConvertCuda, ZeroAndTransfer) {
  QUILL_REQUIRE_GPU();
  const DeviceContext ctx = gpu_ctx();
  for (int64_t offset : {0, 1}) {
    const Tensor x = input({37, 13}, DType::BF16, 80);
    Placed z = place(x, DType::BF16, offset);
    inputs_ready();
    ops::zero(ctx, z.view);
    expect_bits(label("zero", DType::BF16, {37, 13}, offset), z.view, Tensor::zeros({37, 13}, DType::BF16));
    expect_guards("zero", z);
  }
  // Host (pageable) -> device -> device -> host, for a float and an integer dtype.
  const Tensor xb = convert_dtype(input({37, 13}, DType::BF16, 81), DType::BF16);
  const Tensor ids = Tensor::empty({257}, DType::I64);
  for (int64_t i = 0; i < 257; ++i) ids.data_as<int64_t>()[i] = i * 1000003 - 7;
  for (const Tensor* h : {&xb, &ids}) {
    const std::string what = std::string("transfer ") + dtype_name(h->dtype());
    Placed d1 = place_poisoned(h->shape(), h->dtype(), 1), d2 = place_poisoned(h->shape(), h->dtype(), 0);
    inputs_ready();
    ops::transfer(ctx, *h, d1.view);
    ops::transfer(ctx, d1.view, d2.view);
    Tensor back = Tensor::empty(h->shape(), h->dtype()), host_copy = Tensor::empty(h->shape(), h->dtype());
    ops::transfer(ctx, d2.view, back);
    ops::transfer(ctx, back, host_copy);
    EXPECT_EQ(std::memcmp(back.data(), h->data(), h->nbytes()), 0) << what << ": host -> device -> device -> host";
    EXPECT_EQ(std::memcmp(host_copy.data(), h->data(), h->nbytes()), 0) << what << ": host -> host";
    expect_bits(what + " host -> device", d1.view, *h);
    expect_guards(what, d1);
    expect_guards(what, d2);
  }
  Placed f32 = place_poisoned({37, 13}, DType::F32, 0);
  expect_error([&] { ops::transfer(ctx, xb, f32.view); }, "transfer: dst has dtype F32, expected BF16");
}

// ------------------------------------------------------------------------------------------------

TEST(ElementwiseCuda, WrongDtypesThrow) {
  QUILL_REQUIRE_GPU();
  const DeviceContext ctx = gpu_ctx();
  const Tensor xb = to_device(input({5, 4}, DType::BF16, 90), DType::BF16);
  const Tensor xf = to_device(input({5, 4}, DType::F32, 91), DType::F32);
  const Tensor sb = to_device(input({1}, DType::BF16, 92), DType::BF16);
  const Tensor sf = to_device(input({1}, DType::F32, 92), DType::F32);
  const Tensor rows_b = to_device(input({5}, DType::BF16, 93), DType::BF16);
  const Tensor rows_f = to_device(input({5}, DType::F32, 93), DType::F32);
  Tensor ids = Tensor::zeros({5, 4}, DType::I32);
  const Tensor xi = to_device(ids, DType::I32);
  const Tensor host = input({5, 4}, DType::F32, 94);
  inputs_ready();
  expect_error([&] { ops::add_inplace(ctx, xb, xf); }, "add_inplace: x has dtype F32, expected BF16");
  expect_error([&] { ops::add_inplace(ctx, xi, xi); }, "add_inplace: y has dtype I32");
  expect_error([&] { ops::add_inplace(ctx, xf, host); }, "add_inplace: x must be a CUDA tensor");
  expect_error([&] { ops::scale_inplace(ctx, xi, 2.0); }, "scale_inplace: y has dtype I32");
  expect_error([&] { ops::scale_by_scalar(ctx, xb, sb, xb); }, "scale_by_scalar: s has dtype BF16, expected F32");
  expect_error([&] { ops::scale_by_scalar(ctx, xb, sf, xf); }, "scale_by_scalar: y has dtype F32, expected BF16");
  expect_error([&] { ops::scale_by_scalar_backward(ctx, xb, sf, xb, xb, sb); },
               "scale_by_scalar_backward: ds has dtype BF16, expected F32");
  expect_error([&] { ops::scale_rows(ctx, xb, rows_b, xb); }, "scale_rows: s has dtype BF16, expected F32");
  expect_error([&] { ops::scale_rows_backward(ctx, xb, rows_f, xb, xb, rows_b); },
               "scale_rows_backward: ds has dtype BF16, expected F32");
  expect_error([&] { ops::scale_rows(ctx, xb, sf, xb); }, "scale_rows: s has shape [1], expected [5]");
  expect_error([&] { ops::sum_squares(ctx, xi); }, "sum_squares: x has dtype I32");
  expect_error([&] { ops::convert(ctx, xi, xf); }, "convert: src has dtype I32");
  expect_error([&] { ops::copy(ctx, xb, xf); }, "copy: dst has dtype F32, expected BF16");
}

}  // namespace
}  // namespace quill
