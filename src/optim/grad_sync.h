// Gradient synchronisation of the distributed optimizer, one bucket at a time: the bucket's flat
// gradient buffer is reduce-scattered over its group, so that rank r of the group holds the summed
// gradient of its shard [shard_begin, shard_end) (the rest of its buffer is left as it was and not
// read again). Buckets of tensor-parallel shares (ParamBucket::sum_over_tp) are first all-reduced
// over the tensor-parallel group. On one rank, or for a bucket whose group has one rank, nothing
// moves. When and in which order the buckets start is optim/bucket_overlap.h's business.
#pragma once

#include <memory>

#include "comm/comm.h"
#include "model/params.h"
#include "ops/device_context.h"

namespace quill {

// Starts bucket b's reduction and returns its handle (null when nothing moves): the caller waits on it
// before reading the shard. The tensor-parallel all-reduce, when there is one, is a plain call: it is
// the small buffer of replicated layer-norm weights, and the reduce-scatter must follow it anyway.
std::unique_ptr<CommHandle> start_bucket_reduction(ParamBucket& b, const DeviceContext& ctx);

}  // namespace quill
