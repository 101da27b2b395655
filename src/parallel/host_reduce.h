// Small host values summed over a communicator of either device: staged through device memory when
// the communicator moves GPU tensors (NCCL, the staged one). For metrics, norms and counts.
#pragma once

#include "comm/comm.h"
#include "ops/device_context.h"

namespace quill {

// In place: every rank ends with the sum (or the largest) over comm's ranks (nothing to do for null or
// one rank).
void all_reduce_host(Comm* comm, const DeviceContext& ctx, const Tensor& host, ReduceOp op = ReduceOp::Sum);
double sum_over(Comm* comm, const DeviceContext& ctx, double value);
double max_over(Comm* comm, const DeviceContext& ctx, double value);

}  // namespace quill
