// CPU reference of RMSNorm over the last dimension (transformers' InklingRMSNorm: the weight
// multiplies directly, no 1 + w).
//   forward:  rstd[n] = 1 / sqrt(mean_d(x[n, d]^2) + eps);  y[n, d] = w[d] * x[n, d] * rstd[n]
//   backward: g[d] = w[d] * dy[n, d];  c[n] = rstd[n]^3 / D * sum_d g[d] * x[n, d]
//             dx[n, d] = rstd[n] * g[d] - c[n] * x[n, d]          (overwritten)
//             dw[d]   += sum_n dy[n, d] * x[n, d] * rstd[n]        (accumulated)
// Legend: N rows, D features. x_ND, w_D, y_ND, rstd_N, dy_ND, dx_ND, dw_D share one float dtype.
// Row sums are accumulated in double. y may alias x (each row is read fully before it is written).
#include "ops/rmsnorm.h"
#include "ops/op_table.h"

#include <cmath>
#include <vector>

#include "ops/dispatch.h"

namespace quill::ops {
namespace {

using ops_detail::dispatch_float;
using ops_detail::require_cpu;
using ops_detail::require_dtype;
using ops_detail::require_shape;

template <typename T>
void forward_impl(const Tensor& x_ND, const Tensor& w_D, double eps, const Tensor& y_ND, const Tensor& rstd_N) {
  const int64_t N = x_ND.dim(0), D = x_ND.dim(1);
  const T* x = x_ND.data_as<T>();
  const T* w = w_D.data_as<T>();
  T* y = y_ND.data_as<T>();
  T* rstd = rstd_N.data_as<T>();
  for (int64_t n = 0; n < N; ++n) {
    const T* xr = x + n * D;
    double ss = 0;
    for (int64_t d = 0; d < D; ++d) ss += static_cast<double>(xr[d]) * xr[d];
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(D) + eps);
    rstd[n] = static_cast<T>(r);
    T* yr = y + n * D;
    for (int64_t d = 0; d < D; ++d) yr[d] = static_cast<T>(w[d] * (xr[d] * r));
  }
}

template <typename T>
void backward_impl(const Tensor& x_ND, const Tensor& w_D, const Tensor& rstd_N, const Tensor& dy_ND,
                   const Tensor& dx_ND, const Tensor& dw_D) {
  const int64_t N = x_ND.dim(0), D = x_ND.dim(1);
  const T* x = x_ND.data_as<T>();
  const T* w = w_D.data_as<T>();
  const T* rstd = rstd_N.data_as<T>();
  const T* dy = dy_ND.data_as<T>();
  T* dx = dx_ND.data_as<T>();
  std::vector<double> dw_acc(static_cast<size_t>(D), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    const T* xr = x + n * D;
    const T* dyr = dy + n * D;
    const double r = rstd[n];
    double gx = 0;
    for (int64_t d = 0; d < D; ++d) {
      gx += static_cast<double>(w[d]) * dyr[d] * xr[d];
      dw_acc[static_cast<size_t>(d)] += static_cast<double>(dyr[d]) * xr[d] * r;
    }
    const double c = r * r * r * gx / static_cast<double>(D);
    T* dxr = dx + n * D;
    for (int64_t d = 0; d < D; ++d) dxr[d] = static_cast<T>(r * w[d] * dyr[d] - c * xr[d]);
  }
  T* dw = dw_D.data_as<T>();
  for (int64_t d = 0; d < D; ++d) dw[d] += static_cast<T>(dw_acc[static_cast<size_t>(d)]);
}

void check_x(const char* op, const Tensor& x_ND) {
  QUILL_CHECK(x_ND.defined() && x_ND.ndim() == 2, "{}: x must be 2-D [N, D], got {}", op, x_ND.describe());
}

}  // namespace

void rmsnorm_forward(const DeviceContext& ctx, const Tensor& x_ND, const Tensor& w_D, double eps, const Tensor& y_ND,
                     const Tensor& rstd_N) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::rmsnorm_forward, "rmsnorm_forward")(ctx, x_ND, w_D, eps, y_ND, rstd_N);
  const char* op = "rmsnorm_forward";
  check_x(op, x_ND);
  const int64_t N = x_ND.dim(0), D = x_ND.dim(1);
  require_shape(op, "w", w_D, {D});
  require_shape(op, "y", y_ND, {N, D});
  require_shape(op, "rstd", rstd_N, {N});
  require_dtype(op, "w", w_D, x_ND.dtype());
  require_dtype(op, "y", y_ND, x_ND.dtype());
  require_dtype(op, "rstd", rstd_N, x_ND.dtype());
  QUILL_CHECK(eps >= 0 && std::isfinite(eps), "{}: eps must be finite and >= 0, got {}", op, eps);
  require_cpu(op, ctx);
  dispatch_float(op, x_ND, [&]<typename T>() { forward_impl<T>(x_ND, w_D, eps, y_ND, rstd_N); });
}

void rmsnorm_backward(const DeviceContext& ctx, const Tensor& x_ND, const Tensor& w_D, const Tensor& rstd_N,
                      const Tensor& dy_ND, const Tensor& dx_ND, const Tensor& dw_D) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::rmsnorm_backward, "rmsnorm_backward")(ctx, x_ND, w_D, rstd_N, dy_ND, dx_ND, dw_D);
  const char* op = "rmsnorm_backward";
  check_x(op, x_ND);
  const int64_t N = x_ND.dim(0), D = x_ND.dim(1);
  require_shape(op, "w", w_D, {D});
  require_shape(op, "rstd", rstd_N, {N});
  require_shape(op, "dy", dy_ND, {N, D});
  require_shape(op, "dx", dx_ND, {N, D});
  require_shape(op, "dw", dw_D, {D});
  require_dtype(op, "w", w_D, x_ND.dtype());
  require_dtype(op, "rstd", rstd_N, x_ND.dtype());
  require_dtype(op, "dy", dy_ND, x_ND.dtype());
  require_dtype(op, "dx", dx_ND, x_ND.dtype());
  require_dtype(op, "dw", dw_D, x_ND.dtype());
  require_cpu(op, ctx);
  dispatch_float(op, x_ND, [&]<typename T>() { backward_impl<T>(x_ND, w_D, rstd_N, dy_ND, dx_ND, dw_D); });
}

}  // namespace quill::ops
