// Embedding lookup. Shapes: table_VD [V, D], ids_T I32 [T], out_TD [T, D].
// Backward accumulates into dtable (dtable[ids[t]] += dout[t]). An id outside [0, V) is an error
// naming the position.
#pragma once

#include "ops/device_context.h"

namespace quill::ops {

void embedding_forward(const DeviceContext& ctx, const Tensor& table_VD, const Tensor& ids_T, const Tensor& out_TD);
void embedding_backward(const DeviceContext& ctx, const Tensor& ids_T, const Tensor& dout_TD, const Tensor& dtable_VD);

}  // namespace quill::ops
