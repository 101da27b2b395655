// CPU reference of ops/convert.h: the tensor layer's element casts, memset, memcpy.
#include "ops/convert.h"
#include "ops/op_table.h"

#include <cstring>

#include "ops/dispatch.h"

namespace quill::ops {


void convert(const DeviceContext& ctx, const Tensor& src, const Tensor& dst) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::convert, "convert")(ctx, src, dst);
  ops_detail::require_cpu("convert", ctx);
  ops_detail::require_shape("convert", "dst", dst, src.shape());
  convert_into(src, dst);
}

void zero(const DeviceContext& ctx, const Tensor& t) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::zero, "zero")(ctx, t);
  ops_detail::require_cpu("zero", ctx);
  t.fill_zero();
}

void transfer(const DeviceContext& ctx, const Tensor& src, const Tensor& dst) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::transfer, "transfer")(ctx, src, dst);
  ops_detail::require_cpu("transfer", ctx);
  ops_detail::require_shape("transfer", "dst", dst, src.shape());
  ops_detail::require_dtype("transfer", "dst", dst, src.dtype());
  if (src.data() != dst.data()) std::memcpy(dst.data(), src.data(), src.nbytes());
}

void transfer_async(const DeviceContext& ctx, const Tensor& src, const Tensor& dst) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::transfer_async, "transfer_async")(ctx, src, dst);
  transfer(ctx, src, dst);  // the CPU backend has no streams: done on return
}

void wait_transfers(const DeviceContext& ctx, bool host) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::wait_transfers, "wait_transfers")(ctx, host);
}

TransferFence transfer_fence(const DeviceContext& ctx) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::transfer_fence, "transfer_fence")(ctx);
  return TransferFence{};  // the CPU backend's copies are done on return
}

void bind_host_thread(const DeviceContext& ctx) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::bind_host_thread, "bind_host_thread")(ctx);
}

void wait_transfer_fence(const DeviceContext& ctx, const TransferFence& fence) {
  if (ctx.device == Device::CUDA)
    return cuda_op(ctx, &OpTable::wait_transfer_fence, "wait_transfer_fence")(ctx, fence);
}

}  // namespace quill::ops
