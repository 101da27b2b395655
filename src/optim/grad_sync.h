// Gradient synchronisation of the distributed optimizer: each bucket's flat gradient buffer is
// reduce-scattered over its group, so that rank r of the group holds the summed gradient of its
// shard [shard_begin, shard_end) (the rest of its buffer is left as it was and not read again).
// Buckets of tensor-parallel shares (ParamBucket::sum_over_tp) are first all-reduced over the
// tensor-parallel group. On one rank, or for a bucket whose group has one rank, nothing moves.
#pragma once

#include "model/params.h"
#include "ops/device_context.h"

namespace quill {

void reduce_gradients(ParamTable& table, const DeviceContext& ctx);

}  // namespace quill
