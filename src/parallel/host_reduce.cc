#include "parallel/host_reduce.h"

#include "ops/convert.h"

namespace quill {

void all_reduce_host(Comm* comm, const DeviceContext& ctx, const Tensor& host, ReduceOp op) {
  if (comm == nullptr || comm->size() == 1) return;
  Tensor t = comm->device() == Device::CPU ? host : Tensor::empty(host.shape(), host.dtype(), *ctx.allocator);
  ops::transfer(ctx, host, t);
  comm->all_reduce(t, op);
  ops::transfer(ctx, t, host);
}

namespace {

double reduced(Comm* comm, const DeviceContext& ctx, double value, ReduceOp op) {
  Tensor host = Tensor::empty({1}, DType::F64);
  host.data_as<double>()[0] = value;
  all_reduce_host(comm, ctx, host, op);
  return host.data_as<double>()[0];
}

}  // namespace

double sum_over(Comm* comm, const DeviceContext& ctx, double value) { return reduced(comm, ctx, value, ReduceOp::Sum); }

double max_over(Comm* comm, const DeviceContext& ctx, double value) { return reduced(comm, ctx, value, ReduceOp::Max); }

}  // namespace quill
