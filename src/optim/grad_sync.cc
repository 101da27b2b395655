#include "optim/grad_sync.h"

#include <string>

#include "ops/collective.h"

namespace quill {

void reduce_gradients(ParamTable& table, const DeviceContext& ctx) {
  for (ParamBucket& b : table.buckets()) {
    // Shares of a tensor-parallel replicated gradient first become the whole gradient on every
    // tensor-parallel rank (Megatron all-reduces layer-norm gradients under sequence parallelism).
    if (b.sum_over_tp && b.tp_comm != nullptr)
      ops::collective(ctx, "grads.tp_all_reduce", b.grads, [&] { b.tp_comm->all_reduce(b.grads, ReduceOp::Sum); });
    if (b.comm == nullptr) continue;
    const std::string label = std::string("grads.reduce_scatter.") + b.group;
    ops::collective(ctx, label.c_str(), b.grads, [&] {
      b.comm->reduce_scatter(b.grads, b.grads.view_flat(b.shard_begin, {b.shard_end - b.shard_begin}), ReduceOp::Sum);
    });
  }
}

}  // namespace quill
