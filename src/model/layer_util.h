// Small helpers shared by the layer files: fresh activation tensors on the context's device, and
// the gradient a layer writes for a parameter (a scratch tensor when the parameter is frozen, so
// layer code has one path whatever the frozen set).
#pragma once

#include "model/param_gemm.h"
#include "model/params.h"
#include "ops/convert.h"
#include "ops/device_context.h"
#include "ops/linear.h"
#include "ops/moe.h"

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

// The gradient tensor for an op that can only add to it (norms, convolutions, scatters): zeroed first
// when this is the step's first write (Param::grad_unset); a zeroed scratch tensor when p is frozen.
inline Tensor grad_target(const DeviceContext& ctx, const Param& p) {
  if (!p.grad.defined()) return new_zeros(ctx, p.shape, DType::F32);
  if (p.grad_unset) {
    ops::zero(ctx, p.grad);
    p.grad_unset = false;
  }
  return p.grad;
}

// The gradient tensor for an op that can overwrite or add (the GEMMs' `accumulate`), and which to do:
// overwrite on the step's first write, which saves zeroing the tensor and the GEMM's read of it
// (docs/decisions/gradient-first-write.md). A parameter written in parts (expert slices, row chunks) takes
// the flag once and gives each part's first write that flag.
struct GradWrite {
  Tensor grad;
  bool accumulate;
};
inline GradWrite grad_write(const DeviceContext& ctx, const Param& p) {
  if (!p.grad.defined()) return {new_tensor(ctx, p.shape, DType::F32), false};  // frozen: scratch, overwritten
  const bool accumulate = !p.grad_unset;
  p.grad_unset = false;
  return {p.grad, accumulate};
}

// A [K] convolution weight stored as [C, 1, K], seen as [C, K].
inline Tensor conv_weight(const Tensor& w_C1K) { return w_C1K.reshape({w_C1K.dim(0), w_C1K.dim(2)}); }

// dw(p) = dy^T x, overwriting or adding by grad_write's rule (in FP8 for an FP8 matrix: model/param_gemm.h).
inline void write_weight_grad(const DeviceContext& ctx, const Tensor& dy, const Tensor& x, const Param& p) {
  const GradWrite w = grad_write(ctx, p);
  param_backward_weight(ctx, dy, x, p, w.grad, w.accumulate);
}
// The same per expert: dw(p)[e] = dy[rows of e]^T x[rows of e].
inline void write_grouped_weight_grad(const DeviceContext& ctx, const Tensor& dy, const Tensor& x,
                                      const Tensor& counts_E, const Param& p) {
  const GradWrite w = grad_write(ctx, p);
  param_grouped_backward_weight(ctx, dy, x, counts_E, p, w.grad, w.accumulate);
}

}  // namespace quill
