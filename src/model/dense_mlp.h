// The dense SwiGLU MLP of Inkling's first layers (transformers' InklingMLP):
//   y = (W2 * swiglu(W13 * x)) * global_scale
// with W13 in quill's split gate/up layout. Under tensor parallelism W13 is column-parallel (the
// rank's matching gate and up rows) and W2 row-parallel; the scale acts on the reduced output, in
// the sequence region. Legend: T tokens, D hidden, F dense width (this rank's).
#pragma once

#include "model/config.h"
#include "model/params.h"
#include "ops/device_context.h"
#include "parallel/tensor_parallel.h"

namespace quill {

class DenseMlp {
 public:
  DenseMlp(const InklingConfig& config, int64_t layer, ParamTable& params, const TensorParallel& tp = {});

  struct Saved {
    Tensor x_TD, h_T2F, a_TF, o_TD;  // x_TD: all T rows; o_TD: the reduced output (sequence region)
    // --recompute-modules layernorm: the input made again (restore_input); under --tp-comm-overlap the backward
    // gathers x_TD from it, beside its first GEMMs.
    Tensor x_region;
  };
  Tensor forward(const DeviceContext& ctx, const Tensor& x_TD, Saved& saved) const;
  // --recompute-modules layernorm: the input the forward dropped, from `x_region` (the norm's output again).
  void restore_input(const DeviceContext& ctx, const Tensor& x_region, Saved& saved) const;
  Tensor backward(const DeviceContext& ctx, const Saved& saved, const Tensor& dy_TD) const;

 private:
  int64_t F_;
  TensorParallel tp_;
  Param *w13_, *w2_, *scale_;
};

}  // namespace quill
