#include "optim/grad_sync.h"

namespace quill {

void reduce_gradients(ParamTable& table) {
  for (ParamBucket& b : table.buckets()) {
    // Shares of a tensor-parallel replicated gradient first become the whole gradient on every
    // tensor-parallel rank (Megatron all-reduces layer-norm gradients under sequence parallelism).
    if (b.sum_over_tp && b.tp_comm != nullptr) b.tp_comm->all_reduce(b.grads, ReduceOp::Sum);
    if (b.comm == nullptr) continue;
    b.comm->reduce_scatter(b.grads, b.grads.view_flat(b.shard_begin, {b.shard_end - b.shard_begin}), ReduceOp::Sum);
  }
}

}  // namespace quill
