// Small helpers shared by the layer files: fresh activation tensors on the context's device, and
// the gradient a layer writes for a parameter (a scratch tensor when the parameter is frozen, so
// layer code has one path whatever the frozen set).
#pragma once

#include "model/params.h"
#include "ops/convert.h"
#include "ops/device_context.h"

namespace quill {

// An activation (or activation gradient): the context's activation dtype unless told otherwise
// (statistics, router values and the loss stay fp32 on every backend).
inline Tensor new_activation(const DeviceContext& ctx, const Shape& shape) {
  return Tensor::empty(shape, ctx.activation, *ctx.allocator);
}
inline Tensor new_tensor(const DeviceContext& ctx, const Shape& shape, DType dtype) {
  return Tensor::empty(shape, dtype, *ctx.allocator);
}
inline Tensor new_zeros(const DeviceContext& ctx, const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype, *ctx.allocator);
  ops::zero(ctx, t);
  return t;
}

inline Tensor grad_target(const DeviceContext& ctx, const Param& p) {
  return p.grad.defined() ? p.grad : new_zeros(ctx, p.shape, DType::F32);
}

// A [K] convolution weight stored as [C, 1, K], seen as [C, K].
inline Tensor conv_weight(const Tensor& w_C1K) { return w_C1K.reshape({w_C1K.dim(0), w_C1K.dim(2)}); }

}  // namespace quill
