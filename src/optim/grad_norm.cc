#include "optim/grad_norm.h"

#include <cmath>

#include "ops/convert.h"
#include "ops/elementwise.h"

namespace quill {

double sum_over(Comm* comm, const DeviceContext& ctx, double value) {
  if (comm == nullptr || comm->size() == 1) return value;
  Tensor host = Tensor::empty({1}, DType::F64);
  host.data_as<double>()[0] = value;
  Tensor t = comm->device() == Device::CPU ? host : Tensor::empty({1}, DType::F64, *ctx.allocator);
  ops::transfer(ctx, host, t);
  comm->all_reduce(t, ReduceOp::Sum);
  ops::transfer(ctx, t, host);
  return host.data_as<double>()[0];
}

double global_grad_norm(const ParamTable& table, const DeviceContext& ctx, Comm* world) {
  double sq = 0;
  for (const ParamBucket& b : table.buckets())
    if (b.counts_in_norm) sq += ops::sum_squares(ctx, b.grads.view_flat(b.shard_begin, {b.shard_end - b.shard_begin}));
  return std::sqrt(sum_over(world, ctx, sq));
}

}  // namespace quill
