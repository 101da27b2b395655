// CPU reference of ops/convert.h: element casts via double, memset, memcpy.
#include "ops/convert.h"
#include "ops/op_table.h"

#include <cstring>

#include "ops/dispatch.h"

namespace quill::ops {

namespace {
double load(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::F32: return t.data_as<float>()[i];
    case DType::F64: return t.data_as<double>()[i];
    case DType::BF16: return bf16_to_f32(t.data_as<uint16_t>()[i]);
    default: QUILL_FAIL("convert: {} is not a float dtype", t.describe());
  }
}
void store(const Tensor& t, int64_t i, double v) {
  switch (t.dtype()) {
    case DType::F32: t.data_as<float>()[i] = static_cast<float>(v); break;
    case DType::F64: t.data_as<double>()[i] = v; break;
    case DType::BF16: t.data_as<uint16_t>()[i] = f32_to_bf16(static_cast<float>(v)); break;
    default: QUILL_FAIL("convert: {} is not a float dtype", t.describe());
  }
}
}  // namespace

void convert(const DeviceContext& ctx, const Tensor& src, const Tensor& dst) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::convert, "convert")(ctx, src, dst);
  ops_detail::require_cpu("convert", ctx);
  ops_detail::require_shape("convert", "dst", dst, src.shape());
  if (src.dtype() == dst.dtype()) {
    if (src.data() != dst.data()) std::memcpy(dst.data(), src.data(), src.nbytes());
    return;
  }
  for (int64_t i = 0, n = src.numel(); i < n; ++i) store(dst, i, load(src, i));
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

}  // namespace quill::ops
