// Small helpers shared by the layer files: fresh activation tensors on the context's device, and
// the gradient a layer writes for a parameter (a scratch tensor when the parameter is frozen, so
// layer code has one path whatever the frozen set).
#pragma once

#include "model/params.h"
#include "ops/device_context.h"

namespace quill {

inline Tensor new_activation(const DeviceContext& ctx, const Shape& shape, DType dtype = DType::F32) {
  return Tensor::empty(shape, dtype, *ctx.allocator);
}

inline Tensor new_zeros(const DeviceContext& ctx, const Shape& shape, DType dtype = DType::F32) {
  Tensor t = Tensor::empty(shape, dtype, *ctx.allocator);
  t.fill_zero();
  return t;
}

inline Tensor grad_target(const DeviceContext& ctx, const Param& p) {
  return p.grad.defined() ? p.grad : new_zeros(ctx, p.shape);
}

// A [K] convolution weight stored as [C, 1, K], seen as [C, K].
inline Tensor conv_weight(const Tensor& w_C1K) { return w_C1K.reshape({w_C1K.dim(0), w_C1K.dim(2)}); }

}  // namespace quill
