// The global L2 norm of the gradients, for clipping and the metrics: after the buckets are reduced, each
// rank sums the squares of its shard of every bucket (the shards of a bucket partition it over its
// group, and different groups hold different parameters), and the sums are added over `world`, so
// every trainable element counts exactly once; parameters replicated across tensor-parallel ranks
// (their own buckets) count on the first tensor-parallel rank only.
#pragma once

#include "comm/comm.h"
#include "model/params.h"
#include "ops/device_context.h"

namespace quill {

double global_grad_norm(const ParamTable& table, const DeviceContext& ctx, Comm* world);

}  // namespace quill
