#include "ops/collective.h"

#include "ops/op_table.h"

namespace quill::ops {

void collective(const DeviceContext& ctx, const char* label, const Tensor& moved, const std::function<void()>& body) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::collective, "collective")(ctx, label, moved, body);
  body();
}

}  // namespace quill::ops
