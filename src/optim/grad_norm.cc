#include "optim/grad_norm.h"

#include <cmath>

#include "ops/elementwise.h"
#include "parallel/host_reduce.h"

namespace quill {

double global_grad_norm(const ParamTable& table, const DeviceContext& ctx, Comm* world) {
  double sq = 0;
  for (const ParamBucket& b : table.buckets())
    if (b.counts_in_norm) sq += ops::sum_squares(ctx, b.grads.view_flat(b.shard_begin, {b.shard_end - b.shard_begin}));
  return std::sqrt(sum_over(world, ctx, sq));
}

}  // namespace quill
