// Small host values summed or gathered over a communicator of either device: staged through device
// memory when the communicator moves GPU tensors (NCCL, the staged one). For metrics, norms and counts,
// and for texts the ranks compare or collect (their output paths, their collective ledgers).
#pragma once

#include <string>
#include <vector>

#include "comm/comm.h"
#include "ops/device_context.h"

namespace quill {

// In place: every rank ends with the sum (or the largest) over comm's ranks (nothing to do for null or
// one rank).
void all_reduce_host(Comm* comm, const DeviceContext& ctx, const Tensor& host, ReduceOp op = ReduceOp::Sum);
double sum_over(Comm* comm, const DeviceContext& ctx, double value);
double max_over(Comm* comm, const DeviceContext& ctx, double value);
// out (host) receives every rank's `in` (host), rank after rank.
void all_gather_host(Comm& comm, const DeviceContext& ctx, const Tensor& in, const Tensor& out);
// Every rank's `mine`, in rank order (lengths first, then the texts padded to the longest). Collective.
std::vector<std::string> all_gather_strings(Comm* comm, const DeviceContext& ctx, const std::string& mine);

}  // namespace quill
