// CPU reference of the depthwise causal short convolution with residual (InklingShortConvolution).
//   forward:  y[t, c] = x[t, c] + sum_{j<K} w[c, j] * x[t - (K-1) + j, c]       (x[negative] = 0, or the halo)
//   backward: dx[s, c] = dy[s, c] + sum_{j<K} w[c, j] * dy[s + (K-1) - j, c]   (dy[>= T] = 0; overwritten)
//             dhalo[i, c] = sum_{j<K} w[c, j] * dy[i - j, c]                   (0 <= i - j < T; with a halo)
//             dw[c, j] += sum_t dy[t, c] * x[t - (K-1) + j, c]                  (accumulated)
// Legend: T positions of one sequence, C channels, K taps, H = K - 1 halo rows (ops/short_conv.h). x_TC, w_CK,
// y_TC, dy_TC, dx_TC, dw_CK, halo_HC, dhalo_HC share one float dtype. Outputs must not alias inputs: they are
// written while inputs are still read. Taps are added in j order; a tap before position 0 reads the halo when
// there is one (added even when zero), else it is skipped.
#include "ops/short_conv.h"
#include "ops/op_table.h"

#include <vector>

#include "ops/dispatch.h"

namespace quill::ops {
namespace {

using ops_detail::dispatch_float;
using ops_detail::require_cpu;
using ops_detail::require_dtype;
using ops_detail::require_shape;

// x at position s of channel c: the chunk's row, the halo's (s < 0 with a halo), or nullptr (skipped).
template <typename T>
const T* input_at(const T* x, const T* halo, int64_t H, int64_t C, int64_t s, int64_t c) {
  if (s >= 0) return x + s * C + c;
  return halo != nullptr ? halo + (H + s) * C + c : nullptr;
}

template <typename T>
void forward_impl(const Tensor& x_TC, const Tensor& w_CK, const Tensor& y_TC, const Tensor& halo_HC) {
  const int64_t n_pos = x_TC.dim(0), C = x_TC.dim(1), K = w_CK.dim(1);
  const T* x = x_TC.data_as<T>();
  const T* halo = halo_HC.defined() ? halo_HC.data_as<T>() : nullptr;
  const T* w = w_CK.data_as<T>();
  T* y = y_TC.data_as<T>();
  for (int64_t t = 0; t < n_pos; ++t) {
    for (int64_t c = 0; c < C; ++c) {
      T acc = x[t * C + c];
      for (int64_t j = 0; j < K; ++j) {
        const T* in = input_at(x, halo, K - 1, C, t - (K - 1) + j, c);
        if (in != nullptr) acc += w[c * K + j] * *in;
      }
      y[t * C + c] = acc;
    }
  }
}

template <typename T>
void backward_impl(const Tensor& x_TC, const Tensor& w_CK, const Tensor& dy_TC, const Tensor& dx_TC,
                   const Tensor& dw_CK, const Tensor& halo_HC, const Tensor& dhalo_HC) {
  const int64_t n_pos = x_TC.dim(0), C = x_TC.dim(1), K = w_CK.dim(1), H = K - 1;
  const T* x = x_TC.data_as<T>();
  const T* halo = halo_HC.defined() ? halo_HC.data_as<T>() : nullptr;
  const T* w = w_CK.data_as<T>();
  const T* dy = dy_TC.data_as<T>();
  T* dx = dx_TC.data_as<T>();
  std::vector<double> dw_acc(static_cast<size_t>(C * K), 0.0);
  for (int64_t s = 0; s < n_pos; ++s) {
    for (int64_t c = 0; c < C; ++c) {
      T acc = dy[s * C + c];
      for (int64_t j = 0; j < K; ++j) {
        const int64_t t = s + (K - 1) - j;  // the output position that read x[s] through tap j
        if (t < n_pos) acc += w[c * K + j] * dy[t * C + c];
        const T* in = input_at(x, halo, H, C, s - (K - 1) + j, c);  // what output s read through tap j
        if (in != nullptr) dw_acc[static_cast<size_t>(c * K + j)] += static_cast<double>(dy[s * C + c]) * *in;
      }
      dx[s * C + c] = acc;
    }
  }
  if (halo != nullptr) {  // halo position i - H: read by outputs t = i - j through tap j
    T* dhalo = dhalo_HC.data_as<T>();
    for (int64_t i = 0; i < H; ++i) {
      for (int64_t c = 0; c < C; ++c) {
        T acc = 0;
        for (int64_t j = 0; j < K; ++j) {
          const int64_t t = i - j;
          if (t >= 0 && t < n_pos) acc += w[c * K + j] * dy[t * C + c];
        }
        dhalo[i * C + c] = acc;
      }
    }
  }
  T* dw = dw_CK.data_as<T>();
  for (int64_t i = 0; i < C * K; ++i) dw[i] += static_cast<T>(dw_acc[static_cast<size_t>(i)]);
}

void check_2d(const char* op, const char* name, const char* dims, const Tensor& t) {
  QUILL_CHECK(t.defined() && t.ndim() == 2, "{}: {} must be 2-D {}, got {}", op, name, dims, t.describe());
}

}  // namespace

void short_conv_forward(const DeviceContext& ctx, const Tensor& x_TC, const Tensor& w_CK, const Tensor& y_TC,
                        const Tensor& halo_HC) {
  if (ctx.device == Device::CUDA)
    return cuda_op(ctx, &OpTable::short_conv_forward, "short_conv_forward")(ctx, x_TC, w_CK, y_TC, halo_HC);
  const char* op = "short_conv_forward";
  check_2d(op, "x", "[T, C]", x_TC);
  check_2d(op, "w", "[C, K]", w_CK);
  const int64_t C = x_TC.dim(1), K = w_CK.dim(1);
  QUILL_CHECK(K >= 1, "{}: w has no taps (shape {})", op, shape_str(w_CK.shape()));
  require_shape(op, "w", w_CK, {C, K});
  require_shape(op, "y", y_TC, x_TC.shape());
  require_dtype(op, "w", w_CK, x_TC.dtype());
  require_dtype(op, "y", y_TC, x_TC.dtype());
  QUILL_CHECK(y_TC.data() != x_TC.data() || x_TC.numel() == 0, "{}: y must not alias x", op);
  ops_detail::require_conv_halo_input(op, x_TC, K, y_TC, halo_HC);
  require_cpu(op, ctx);
  dispatch_float(op, x_TC, [&]<typename T>() { forward_impl<T>(x_TC, w_CK, y_TC, halo_HC); });
}

void short_conv_backward(const DeviceContext& ctx, const Tensor& x_TC, const Tensor& w_CK, const Tensor& dy_TC,
                         const Tensor& dx_TC, const Tensor& dw_CK, const Tensor& halo_HC, const Tensor& dhalo_HC) {
  if (ctx.device == Device::CUDA)
    return cuda_op(ctx, &OpTable::short_conv_backward, "short_conv_backward")(ctx, x_TC, w_CK, dy_TC, dx_TC, dw_CK,
                                                                              halo_HC, dhalo_HC);
  const char* op = "short_conv_backward";
  check_2d(op, "x", "[T, C]", x_TC);
  check_2d(op, "w", "[C, K]", w_CK);
  const int64_t C = x_TC.dim(1), K = w_CK.dim(1);
  QUILL_CHECK(K >= 1, "{}: w has no taps (shape {})", op, shape_str(w_CK.shape()));
  require_shape(op, "w", w_CK, {C, K});
  require_shape(op, "dy", dy_TC, x_TC.shape());
  require_shape(op, "dx", dx_TC, x_TC.shape());
  require_shape(op, "dw", dw_CK, {C, K});
  require_dtype(op, "w", w_CK, x_TC.dtype());
  require_dtype(op, "dy", dy_TC, x_TC.dtype());
  require_dtype(op, "dx", dx_TC, x_TC.dtype());
  require_dtype(op, "dw", dw_CK, x_TC.dtype());
  QUILL_CHECK((dx_TC.data() != dy_TC.data() && dx_TC.data() != x_TC.data()) || x_TC.numel() == 0,
              "{}: dx must not alias dy or x", op);
  ops_detail::require_conv_halo_pair(op, x_TC, K, dy_TC, dx_TC, halo_HC, dhalo_HC);
  require_cpu(op, ctx);
  dispatch_float(op, x_TC, [&]<typename T>() { backward_impl<T>(x_TC, w_CK, dy_TC, dx_TC, dw_CK, halo_HC, dhalo_HC); });
}

}  // namespace quill::ops
