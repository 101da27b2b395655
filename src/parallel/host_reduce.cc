#include "parallel/host_reduce.h"

#include "ops/convert.h"

namespace quill {

void all_reduce_host(Comm* comm, const DeviceContext& ctx, const Tensor& host) {
  if (comm == nullptr || comm->size() == 1) return;
  Tensor t = comm->device() == Device::CPU ? host : Tensor::empty(host.shape(), host.dtype(), *ctx.allocator);
  ops::transfer(ctx, host, t);
  comm->all_reduce(t, ReduceOp::Sum);
  ops::transfer(ctx, t, host);
}

double sum_over(Comm* comm, const DeviceContext& ctx, double value) {
  Tensor host = Tensor::empty({1}, DType::F64);
  host.data_as<double>()[0] = value;
  all_reduce_host(comm, ctx, host);
  return host.data_as<double>()[0];
}

}  // namespace quill
