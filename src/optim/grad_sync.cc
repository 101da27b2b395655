#include "optim/grad_sync.h"

#include <string>

#include "ops/collective.h"

namespace quill {

std::unique_ptr<CommHandle> start_bucket_reduction(ParamBucket& b, const DeviceContext& ctx) {
  // Shares of a tensor-parallel replicated gradient first become the whole gradient on every
  // tensor-parallel rank (Megatron all-reduces layer-norm gradients under sequence parallelism).
  if (b.sum_over_tp && b.tp_comm != nullptr)
    ops::collective(ctx, "grads.tp_all_reduce", b.grads, [&] { b.tp_comm->all_reduce(b.grads, ReduceOp::Sum); });
  if (b.comm == nullptr) return nullptr;
  std::unique_ptr<CommHandle> handle;
  const std::string label = std::string("grads.reduce_scatter.") + b.group;
  ops::collective(ctx, label.c_str(), b.grads, [&] {
    handle = b.comm->start_reduce_scatter(b.grads, b.grads.view_flat(b.shard_begin, {b.shard_end - b.shard_begin}),
                                          ReduceOp::Sum);
  });
  return handle;
}

}  // namespace quill
