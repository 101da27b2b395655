// SwiGLU on the split gate/up layout: h_N2F [N, 2F] holds gate in columns [0, F) and up in [F, 2F)
// (quill's internal layout; checkpoints interleave rows and io converts). a = silu(gate) * up.
// Backward: dh overwritten.
#pragma once

#include "ops/device_context.h"

namespace quill::ops {

void swiglu_forward(const DeviceContext& ctx, const Tensor& h_N2F, const Tensor& a_NF);
void swiglu_backward(const DeviceContext& ctx, const Tensor& h_N2F, const Tensor& da_NF, const Tensor& dh_N2F);

}  // namespace quill::ops
