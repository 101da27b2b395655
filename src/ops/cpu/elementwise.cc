// CPU reference of the small element-wise ops.
//   copy:             dst = src                         (same shape and dtype; any dtype, bytes copied)
//   add_inplace:      y += x                            (same shape)
//   scale_inplace:    y *= s
//   scale_by_scalar:  y = x * s[0];  backward dx = dy * s[0] (overwritten), ds[0] += sum(dy * x)
//   scale_rows:       y[n, :] = x[n, :] * s[n];  backward dx = dy * s[n] (overwritten),
//                     ds[n] = dy[n, :] . x[n, :] (overwritten)
//   sum_squares:      sum x^2 in double
// Legend: N rows, D features; s_1 has shape [1], s_N shape [N]. Float tensors of one op share one dtype.
// Outputs may alias inputs of the same shape (every element is read before it is written).
#include "ops/elementwise.h"
#include "ops/op_table.h"

#include <cstring>

#include "ops/dispatch.h"

namespace quill::ops {
namespace {

using ops_detail::dispatch_float;
using ops_detail::require_cpu;
using ops_detail::require_dtype;
using ops_detail::require_shape;

void check_defined(const char* op, const char* name, const Tensor& t) {
  QUILL_CHECK(t.defined(), "{}: {} is undefined", op, name);
}

template <typename T>
void scale_by_scalar_backward_impl(const Tensor& x, const Tensor& s_1, const Tensor& dy, const Tensor& dx,
                                   const Tensor& ds_1) {
  const T* xp = x.data_as<T>();
  const T* dyp = dy.data_as<T>();
  T* dxp = dx.data_as<T>();
  const T s = s_1.data_as<T>()[0];
  double acc = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    acc += static_cast<double>(dyp[i]) * xp[i];
    dxp[i] = dyp[i] * s;
  }
  ds_1.data_as<T>()[0] += static_cast<T>(acc);
}

template <typename T>
void scale_rows_backward_impl(const Tensor& x_ND, const Tensor& s_N, const Tensor& dy_ND, const Tensor& dx_ND,
                              const Tensor& ds_N) {
  const int64_t N = x_ND.dim(0), D = x_ND.dim(1);
  const T* x = x_ND.data_as<T>();
  const T* s = s_N.data_as<T>();
  const T* dy = dy_ND.data_as<T>();
  T* dx = dx_ND.data_as<T>();
  T* ds = ds_N.data_as<T>();
  for (int64_t n = 0; n < N; ++n) {
    const T sn = s[n];
    double acc = 0;
    for (int64_t d = 0; d < D; ++d) {
      acc += static_cast<double>(dy[n * D + d]) * x[n * D + d];
      dx[n * D + d] = dy[n * D + d] * sn;
    }
    ds[n] = static_cast<T>(acc);  // written after the row, so ds may alias s
  }
}

void check_rows(const char* op, const Tensor& x_ND) {
  QUILL_CHECK(x_ND.defined() && x_ND.ndim() == 2, "{}: x must be 2-D [N, D], got {}", op, x_ND.describe());
}

}  // namespace

void copy(const DeviceContext& ctx, const Tensor& src, const Tensor& dst) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::copy, "copy")(ctx, src, dst);
  const char* op = "copy";
  check_defined(op, "src", src);
  require_shape(op, "dst", dst, src.shape());
  require_dtype(op, "dst", dst, src.dtype());
  require_cpu(op, ctx);
  if (src.nbytes() && dst.data() != src.data()) std::memmove(dst.data(), src.data(), src.nbytes());
}

void add_inplace(const DeviceContext& ctx, const Tensor& y, const Tensor& x) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::add_inplace, "add_inplace")(ctx, y, x);
  const char* op = "add_inplace";
  check_defined(op, "y", y);
  require_shape(op, "x", x, y.shape());
  require_dtype(op, "x", x, y.dtype());
  require_cpu(op, ctx);
  dispatch_float(op, y, [&]<typename T>() {
    T* yp = y.data_as<T>();
    const T* xp = x.data_as<T>();
    for (int64_t i = 0; i < y.numel(); ++i) yp[i] += xp[i];
  });
}

void scale_inplace(const DeviceContext& ctx, const Tensor& y, double s) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::scale_inplace, "scale_inplace")(ctx, y, s);
  const char* op = "scale_inplace";
  check_defined(op, "y", y);
  require_cpu(op, ctx);
  dispatch_float(op, y, [&]<typename T>() {
    T* yp = y.data_as<T>();
    const T st = static_cast<T>(s);
    for (int64_t i = 0; i < y.numel(); ++i) yp[i] *= st;
  });
}

void scale_by_scalar(const DeviceContext& ctx, const Tensor& x, const Tensor& s_1, const Tensor& y) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::scale_by_scalar, "scale_by_scalar")(ctx, x, s_1, y);
  const char* op = "scale_by_scalar";
  check_defined(op, "x", x);
  require_shape(op, "s", s_1, {1});
  require_shape(op, "y", y, x.shape());
  require_dtype(op, "s", s_1, x.dtype());
  require_dtype(op, "y", y, x.dtype());
  require_cpu(op, ctx);
  dispatch_float(op, x, [&]<typename T>() {
    const T* xp = x.data_as<T>();
    const T s = s_1.data_as<T>()[0];
    T* yp = y.data_as<T>();
    for (int64_t i = 0; i < x.numel(); ++i) yp[i] = xp[i] * s;
  });
}

void scale_by_scalar_backward(const DeviceContext& ctx, const Tensor& x, const Tensor& s_1, const Tensor& dy,
                              const Tensor& dx, const Tensor& ds_1) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::scale_by_scalar_backward, "scale_by_scalar_backward")(ctx, x, s_1, dy, dx, ds_1);
  const char* op = "scale_by_scalar_backward";
  check_defined(op, "x", x);
  require_shape(op, "s", s_1, {1});
  require_shape(op, "dy", dy, x.shape());
  require_shape(op, "dx", dx, x.shape());
  require_shape(op, "ds", ds_1, {1});
  require_dtype(op, "s", s_1, x.dtype());
  require_dtype(op, "dy", dy, x.dtype());
  require_dtype(op, "dx", dx, x.dtype());
  require_dtype(op, "ds", ds_1, x.dtype());
  require_cpu(op, ctx);
  dispatch_float(op, x, [&]<typename T>() { scale_by_scalar_backward_impl<T>(x, s_1, dy, dx, ds_1); });
}

void scale_rows(const DeviceContext& ctx, const Tensor& x_ND, const Tensor& s_N, const Tensor& y_ND) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::scale_rows, "scale_rows")(ctx, x_ND, s_N, y_ND);
  const char* op = "scale_rows";
  check_rows(op, x_ND);
  const int64_t N = x_ND.dim(0), D = x_ND.dim(1);
  require_shape(op, "s", s_N, {N});
  require_shape(op, "y", y_ND, {N, D});
  require_dtype(op, "s", s_N, x_ND.dtype());
  require_dtype(op, "y", y_ND, x_ND.dtype());
  require_cpu(op, ctx);
  dispatch_float(op, x_ND, [&]<typename T>() {
    const T* x = x_ND.data_as<T>();
    const T* s = s_N.data_as<T>();
    T* y = y_ND.data_as<T>();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t d = 0; d < D; ++d) y[n * D + d] = x[n * D + d] * s[n];
  });
}

void scale_rows_backward(const DeviceContext& ctx, const Tensor& x_ND, const Tensor& s_N, const Tensor& dy_ND,
                         const Tensor& dx_ND, const Tensor& ds_N) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::scale_rows_backward, "scale_rows_backward")(ctx, x_ND, s_N, dy_ND, dx_ND, ds_N);
  const char* op = "scale_rows_backward";
  check_rows(op, x_ND);
  const int64_t N = x_ND.dim(0), D = x_ND.dim(1);
  require_shape(op, "s", s_N, {N});
  require_shape(op, "dy", dy_ND, {N, D});
  require_shape(op, "dx", dx_ND, {N, D});
  require_shape(op, "ds", ds_N, {N});
  require_dtype(op, "s", s_N, x_ND.dtype());
  require_dtype(op, "dy", dy_ND, x_ND.dtype());
  require_dtype(op, "dx", dx_ND, x_ND.dtype());
  require_dtype(op, "ds", ds_N, x_ND.dtype());
  require_cpu(op, ctx);
  dispatch_float(op, x_ND, [&]<typename T>() { scale_rows_backward_impl<T>(x_ND, s_N, dy_ND, dx_ND, ds_N); });
}

double sum_squares(const DeviceContext& ctx, const Tensor& x) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::sum_squares, "sum_squares")(ctx, x);
  const char* op = "sum_squares";
  check_defined(op, "x", x);
  require_cpu(op, ctx);
  double acc = 0;
  dispatch_float(op, x, [&]<typename T>() {
    const T* xp = x.data_as<T>();
    for (int64_t i = 0; i < x.numel(); ++i) acc += static_cast<double>(xp[i]) * xp[i];
  });
  return acc;
}

}  // namespace quill::ops
