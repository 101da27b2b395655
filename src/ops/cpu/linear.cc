// CPU reference of the bias-free linear layer (torch nn.Linear): y = x * w^T.
//   forward:         y[n, m]  = sum_k x[n, k] * w[m, k]
//   backward input:  dx[n, k] = sum_m dy[n, m] * w[m, k]     (overwritten, or added when accumulate)
//   backward weight: dw[m, k] += sum_n dy[n, m] * x[n, k]    (always accumulated)
// Legend: N rows (tokens), K input features, M output features. All tensors share one float dtype.
// Every loop nest keeps a contiguous row update (y_row += a * row) innermost so the compiler can
// vectorise it without reassociating a reduction; the forward transposes w once to get that shape.
// Outputs must not alias inputs.
#include "ops/linear.h"
#include "ops/op_table.h"

#include <algorithm>
#include <vector>

#include "ops/dispatch.h"

namespace quill::ops {
namespace {

using ops_detail::dispatch_float;
using ops_detail::require_cpu;
using ops_detail::require_dtype;
using ops_detail::require_shape;

// Rows of x processed together in the weight gradient, so that block stays in cache across all m.
constexpr int64_t kRowBlock = 64;

template <typename T>
inline void axpy(int64_t n, T a, const T* __restrict x, T* __restrict y) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

template <typename T>
void forward_impl(const Tensor& x_NK, const Tensor& w_MK, const Tensor& y_NM) {
  const int64_t N = x_NK.dim(0), K = x_NK.dim(1), M = w_MK.dim(0);
  const T* x = x_NK.data_as<T>();
  const T* w = w_MK.data_as<T>();
  T* y = y_NM.data_as<T>();
  std::vector<T> wt(static_cast<size_t>(K * M));  // w^T [K, M]
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) wt[static_cast<size_t>(k * M + m)] = w[m * K + k];
  for (int64_t n = 0; n < N; ++n) {
    T* yr = y + n * M;
    std::fill(yr, yr + M, T(0));
    for (int64_t k = 0; k < K; ++k) axpy<T>(M, x[n * K + k], wt.data() + k * M, yr);
  }
}

template <typename T>
void backward_input_impl(const Tensor& dy_NM, const Tensor& w_MK, const Tensor& dx_NK, bool accumulate) {
  const int64_t N = dy_NM.dim(0), M = dy_NM.dim(1), K = w_MK.dim(1);
  const T* dy = dy_NM.data_as<T>();
  const T* w = w_MK.data_as<T>();
  T* dx = dx_NK.data_as<T>();
  for (int64_t n = 0; n < N; ++n) {
    T* dxr = dx + n * K;
    if (!accumulate) std::fill(dxr, dxr + K, T(0));
    for (int64_t m = 0; m < M; ++m) axpy<T>(K, dy[n * M + m], w + m * K, dxr);
  }
}

template <typename T>
void backward_weight_impl(const Tensor& dy_NM, const Tensor& x_NK, const Tensor& dw_MK, bool accumulate) {
  const int64_t N = dy_NM.dim(0), M = dy_NM.dim(1), K = x_NK.dim(1);
  const T* dy = dy_NM.data_as<T>();
  const T* x = x_NK.data_as<T>();
  T* dw = dw_MK.data_as<T>();
  if (!accumulate) std::fill(dw, dw + M * K, T(0));  // then the same sums as accumulating into zeros
  for (int64_t n0 = 0; n0 < N; n0 += kRowBlock) {
    const int64_t n1 = std::min(N, n0 + kRowBlock);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = n0; n < n1; ++n) axpy<T>(K, dy[n * M + m], x + n * K, dw + m * K);
  }
}

void check_2d(const char* op, const char* name, const char* dims, const Tensor& t) {
  QUILL_CHECK(t.defined() && t.ndim() == 2, "{}: {} must be 2-D {}, got {}", op, name, dims, t.describe());
}

}  // namespace

void linear_forward(const DeviceContext& ctx, const Tensor& x_NK, const Tensor& w_MK, const Tensor& y_NM) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::linear_forward, "linear_forward")(ctx, x_NK, w_MK, y_NM);
  const char* op = "linear_forward";
  check_2d(op, "x", "[N, K]", x_NK);
  check_2d(op, "w", "[M, K]", w_MK);
  const int64_t N = x_NK.dim(0), K = x_NK.dim(1), M = w_MK.dim(0);
  require_shape(op, "w", w_MK, {M, K});
  require_shape(op, "y", y_NM, {N, M});
  require_dtype(op, "w", w_MK, x_NK.dtype());
  require_dtype(op, "y", y_NM, x_NK.dtype());
  require_cpu(op, ctx);
  dispatch_float(op, x_NK, [&]<typename T>() { forward_impl<T>(x_NK, w_MK, y_NM); });
}

void linear_backward_input(const DeviceContext& ctx, const Tensor& dy_NM, const Tensor& w_MK, const Tensor& dx_NK,
                           bool accumulate) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::linear_backward_input, "linear_backward_input")(ctx, dy_NM, w_MK, dx_NK, accumulate);
  const char* op = "linear_backward_input";
  check_2d(op, "dy", "[N, M]", dy_NM);
  check_2d(op, "w", "[M, K]", w_MK);
  const int64_t N = dy_NM.dim(0), M = dy_NM.dim(1), K = w_MK.dim(1);
  require_shape(op, "w", w_MK, {M, K});
  require_shape(op, "dx", dx_NK, {N, K});
  require_dtype(op, "w", w_MK, dy_NM.dtype());
  require_dtype(op, "dx", dx_NK, dy_NM.dtype());
  require_cpu(op, ctx);
  dispatch_float(op, dy_NM, [&]<typename T>() { backward_input_impl<T>(dy_NM, w_MK, dx_NK, accumulate); });
}

void linear_backward_weight(const DeviceContext& ctx, const Tensor& dy_NM, const Tensor& x_NK, const Tensor& dw_MK,
                            bool accumulate) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::linear_backward_weight, "linear_backward_weight")(ctx, dy_NM, x_NK, dw_MK, accumulate);
  const char* op = "linear_backward_weight";
  check_2d(op, "dy", "[N, M]", dy_NM);
  check_2d(op, "x", "[N, K]", x_NK);
  const int64_t N = dy_NM.dim(0), M = dy_NM.dim(1), K = x_NK.dim(1);
  require_shape(op, "x", x_NK, {N, K});
  require_shape(op, "dw", dw_MK, {M, K});
  require_dtype(op, "x", x_NK, dy_NM.dtype());
  require_dtype(op, "dw", dw_MK, dy_NM.dtype());
  require_cpu(op, ctx);
  dispatch_float(op, dy_NM, [&]<typename T>() { backward_weight_impl<T>(dy_NM, x_NK, dw_MK, accumulate); });
}

}  // namespace quill::ops
