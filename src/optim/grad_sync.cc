#include "optim/grad_sync.h"

namespace quill {

void reduce_gradients(ParamTable& table) {
  for (ParamBucket& b : table.buckets()) {
    if (b.comm == nullptr) continue;
    b.comm->reduce_scatter(b.grads, b.grads.view_flat(b.shard_begin, {b.shard_end - b.shard_begin}), ReduceOp::Sum);
  }
}

}  // namespace quill
