// CPU reference of SwiGLU on the split layout h = [gate | up]:
//   forward:  a[n, f] = silu(g) * u,   g = h[n, f], u = h[n, F + f],  silu(g) = g * sigmoid(g)
//   backward: dh[n, f]     = da[n, f] * u * sigmoid(g) * (1 + g * (1 - sigmoid(g)))   (overwritten)
//             dh[n, F + f] = da[n, f] * silu(g)
// Legend: N rows, F intermediate width. h_N2F [N, 2F], a_NF / da_NF [N, F], dh_N2F [N, 2F], one float dtype.
// Computed in double per element; dh may alias h (each element pair is read before it is written).
#include "ops/swiglu.h"
#include "ops/op_table.h"

#include <cmath>

#include "ops/dispatch.h"

namespace quill::ops {
namespace {

using ops_detail::dispatch_float;
using ops_detail::require_cpu;
using ops_detail::require_dtype;
using ops_detail::require_shape;

inline double sigmoid(double g) { return 1.0 / (1.0 + std::exp(-g)); }

template <typename T>
void forward_impl(const Tensor& h_N2F, const Tensor& a_NF) {
  const int64_t N = a_NF.dim(0), F = a_NF.dim(1);
  const T* h = h_N2F.data_as<T>();
  T* a = a_NF.data_as<T>();
  for (int64_t n = 0; n < N; ++n) {
    const T* gate = h + n * 2 * F;
    const T* up = gate + F;
    for (int64_t f = 0; f < F; ++f) {
      const double g = gate[f];
      a[n * F + f] = static_cast<T>(g * sigmoid(g) * up[f]);
    }
  }
}

template <typename T>
void backward_impl(const Tensor& h_N2F, const Tensor& da_NF, const Tensor& dh_N2F) {
  const int64_t N = da_NF.dim(0), F = da_NF.dim(1);
  const T* h = h_N2F.data_as<T>();
  const T* da = da_NF.data_as<T>();
  T* dh = dh_N2F.data_as<T>();
  for (int64_t n = 0; n < N; ++n) {
    const T* gate = h + n * 2 * F;
    const T* up = gate + F;
    T* dgate = dh + n * 2 * F;
    T* dup = dgate + F;
    for (int64_t f = 0; f < F; ++f) {
      const double g = gate[f], u = up[f], d = da[n * F + f];
      const double s = sigmoid(g);
      dgate[f] = static_cast<T>(d * u * s * (1.0 + g * (1.0 - s)));
      dup[f] = static_cast<T>(d * g * s);
    }
  }
}

void check_h(const char* op, const char* name, const Tensor& t) {
  QUILL_CHECK(t.defined() && t.ndim() == 2 && t.dim(1) % 2 == 0, "{}: {} must be 2-D [N, 2F], got {}", op, name,
              t.describe());
}

}  // namespace

void swiglu_forward(const DeviceContext& ctx, const Tensor& h_N2F, const Tensor& a_NF) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::swiglu_forward, "swiglu_forward")(ctx, h_N2F, a_NF);
  const char* op = "swiglu_forward";
  check_h(op, "h", h_N2F);
  const int64_t N = h_N2F.dim(0), F = h_N2F.dim(1) / 2;
  require_shape(op, "a", a_NF, {N, F});
  require_dtype(op, "a", a_NF, h_N2F.dtype());
  require_cpu(op, ctx);
  dispatch_float(op, h_N2F, [&]<typename T>() { forward_impl<T>(h_N2F, a_NF); });
}

void swiglu_backward(const DeviceContext& ctx, const Tensor& h_N2F, const Tensor& da_NF, const Tensor& dh_N2F) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::swiglu_backward, "swiglu_backward")(ctx, h_N2F, da_NF, dh_N2F);
  const char* op = "swiglu_backward";
  check_h(op, "h", h_N2F);
  const int64_t N = h_N2F.dim(0), F = h_N2F.dim(1) / 2;
  require_shape(op, "da", da_NF, {N, F});
  require_shape(op, "dh", dh_N2F, {N, 2 * F});
  require_dtype(op, "da", da_NF, h_N2F.dtype());
  require_dtype(op, "dh", dh_N2F, h_N2F.dtype());
  require_cpu(op, ctx);
  dispatch_float(op, h_N2F, [&]<typename T>() { backward_impl<T>(h_N2F, da_NF, dh_N2F); });
}

}  // namespace quill::ops
