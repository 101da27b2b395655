#include "parallel/host_reduce.h"

#include <algorithm>
#include <cstring>

#include "ops/convert.h"

namespace quill {

void all_gather_host(Comm& comm, const DeviceContext& ctx, const Tensor& in, const Tensor& out) {
  if (comm.device() == Device::CPU) return comm.all_gather(in, out);
  Tensor d_in = Tensor::empty(in.shape(), in.dtype(), *ctx.allocator), d_out = Tensor::empty(out.shape(), out.dtype(), *ctx.allocator);
  ops::transfer(ctx, in, d_in);
  comm.all_gather(d_in, d_out);
  ops::transfer(ctx, d_out, out);
}

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

std::vector<std::string> all_gather_strings(Comm* comm, const DeviceContext& ctx, const std::string& mine) {
  if (comm == nullptr || comm->size() == 1) return {mine};
  const int p = comm->size();
  Tensor len = Tensor::empty({1}, DType::I64), lens = Tensor::empty({p}, DType::I64);
  len.data_as<int64_t>()[0] = static_cast<int64_t>(mine.size());
  all_gather_host(*comm, ctx, len, lens);
  const int64_t* n = lens.data_as<int64_t>();
  const int64_t longest = std::max<int64_t>(1, *std::max_element(n, n + p));
  Tensor buf = Tensor::zeros({longest}, DType::U8), all = Tensor::empty({longest * p}, DType::U8);
  std::memcpy(buf.data(), mine.data(), mine.size());
  all_gather_host(*comm, ctx, buf, all);
  std::vector<std::string> texts;
  for (int r = 0; r < p; ++r) texts.emplace_back(static_cast<const char*>(all.data()) + r * longest, static_cast<size_t>(n[r]));
  return texts;
}

}  // namespace quill
