// CPU reference of the FP8 GEMMs (ops/fp8.h): each operand quantised as the GPU quantises it (the
// activation or gradient 1x128 along the contraction, the weight from its 128x128-block copy), then
// dequantised to fp32 and multiplied by the fp32 reference GEMMs of ops/linear.h and ops/moe.h. The
// dequantised values are exactly the GPU's (E4M3 value times a power of two), so the GPU result can
// differ from this one only by the order of its fp32 sums.
#include "ops/fp8.h"
#include "ops/op_table.h"

#include "ops/dispatch.h"
#include "ops/linear.h"
#include "ops/moe.h"

namespace quill::ops {
namespace {

using ops_detail::require_cpu;
using ops_detail::require_dtype;
using ops_detail::require_shape;

const DeviceContext kCpu = DeviceContext::cpu();

// What the GEMM reads of x under a tiling: its quantised values, dequantised.
Tensor seen_as_fp8(const Tensor& x, Fp8Tiling tiling) {
  Fp8Tensor q = fp8_empty(kCpu, x.shape(), tiling);
  fp8_quantize(kCpu, x, q);
  Tensor out = Tensor::empty(x.shape(), DType::F32);
  fp8_dequantize(kCpu, q, Tensor(), out);
  return out;
}
// The same with 128x1 tiles restarting at each group's first row.
Tensor seen_as_fp8_grouped(const Tensor& x_PK, const Tensor& counts_E) {
  Fp8Tensor q;
  q.tiling = Fp8Tiling::kColumns128;
  q.codes = Tensor::empty(x_PK.shape(), DType::U8);
  q.scale_inv = Tensor::empty(fp8_grouped_scale_shape(x_PK.shape(), counts_E), DType::F32);
  fp8_quantize_grouped(kCpu, x_PK, counts_E, q);
  Tensor out = Tensor::empty(x_PK.shape(), DType::F32);
  fp8_dequantize(kCpu, q, counts_E, out);
  return out;
}
// The weight's values as the GEMM reads them.
Tensor weight_values(const char* op, const Fp8Tensor& w, int64_t ndim) {
  QUILL_CHECK(w.defined() && w.tiling == Fp8Tiling::kBlocks128 && w.codes.ndim() == ndim,
              "{}: the weight must be a {}-D quantised tensor of 128x128 blocks (fp8_quantize)", op, ndim);
  Tensor out = Tensor::empty(w.codes.shape(), DType::F32);
  fp8_dequantize(kCpu, w, Tensor(), out);
  return out;
}
void require_f32(const char* op, const char* name, const Tensor& t) {
  QUILL_CHECK(t.defined(), "{}: {} is undefined", op, name);
  require_dtype(op, name, t, DType::F32);
}

}  // namespace

void fp8_linear_forward(const DeviceContext& ctx, const Tensor& x_NK, const Fp8Tensor& w_MK, const Tensor& y_NM) {
  if (ctx.device == Device::CUDA)
    return cuda_op(ctx, &OpTable::fp8_linear_forward, "fp8_linear_forward")(ctx, x_NK, w_MK, y_NM);
  const char* op = "fp8_linear_forward";
  require_cpu(op, ctx);
  require_f32(op, "x", x_NK);
  linear_forward(kCpu, seen_as_fp8(x_NK, Fp8Tiling::kRows128), weight_values(op, w_MK, 2), y_NM);
}

void fp8_linear_backward_input(const DeviceContext& ctx, const Tensor& dy_NM, const Fp8Tensor& w_MK,
                               const Tensor& dx_NK, bool accumulate) {
  if (ctx.device == Device::CUDA)
    return cuda_op(ctx, &OpTable::fp8_linear_backward_input, "fp8_linear_backward_input")(ctx, dy_NM, w_MK, dx_NK,
                                                                                            accumulate);
  const char* op = "fp8_linear_backward_input";
  require_cpu(op, ctx);
  require_f32(op, "dy", dy_NM);
  linear_backward_input(kCpu, seen_as_fp8(dy_NM, Fp8Tiling::kRows128), weight_values(op, w_MK, 2), dx_NK, accumulate);
}

void fp8_linear_backward_weight(const DeviceContext& ctx, const Tensor& dy_NM, const Tensor& x_NK, const Tensor& dw_MK,
                                bool accumulate) {
  if (ctx.device == Device::CUDA)
    return cuda_op(ctx, &OpTable::fp8_linear_backward_weight, "fp8_linear_backward_weight")(ctx, dy_NM, x_NK, dw_MK,
                                                                                              accumulate);
  const char* op = "fp8_linear_backward_weight";
  require_cpu(op, ctx);
  require_f32(op, "dy", dy_NM);
  require_f32(op, "x", x_NK);
  QUILL_CHECK(dy_NM.ndim() == 2 && x_NK.ndim() == 2 && dy_NM.dim(0) == x_NK.dim(0),
              "{}: dy {} and x {} must be 2-D with the same rows", op, shape_str(dy_NM.shape()), shape_str(x_NK.shape()));
  linear_backward_weight(kCpu, seen_as_fp8(dy_NM, Fp8Tiling::kColumns128), seen_as_fp8(x_NK, Fp8Tiling::kColumns128),
                         dw_MK, accumulate);
}

void fp8_grouped_linear_forward(const DeviceContext& ctx, const Tensor& x_PK, const Fp8Tensor& w_EMK,
                                const Tensor& counts_E, const Tensor& y_PM) {
  if (ctx.device == Device::CUDA)
    return cuda_op(ctx, &OpTable::fp8_grouped_linear_forward, "fp8_grouped_linear_forward")(ctx, x_PK, w_EMK, counts_E,
                                                                                              y_PM);
  const char* op = "fp8_grouped_linear_forward";
  require_cpu(op, ctx);
  require_f32(op, "x_PK", x_PK);
  grouped_linear_forward(kCpu, seen_as_fp8(x_PK, Fp8Tiling::kRows128), weight_values(op, w_EMK, 3), counts_E, y_PM);
}

void fp8_grouped_linear_backward_input(const DeviceContext& ctx, const Tensor& dy_PM, const Fp8Tensor& w_EMK,
                                       const Tensor& counts_E, const Tensor& dx_PK) {
  if (ctx.device == Device::CUDA)
    return cuda_op(ctx, &OpTable::fp8_grouped_linear_backward_input, "fp8_grouped_linear_backward_input")(
        ctx, dy_PM, w_EMK, counts_E, dx_PK);
  const char* op = "fp8_grouped_linear_backward_input";
  require_cpu(op, ctx);
  require_f32(op, "dy_PM", dy_PM);
  grouped_linear_backward_input(kCpu, seen_as_fp8(dy_PM, Fp8Tiling::kRows128), weight_values(op, w_EMK, 3), counts_E,
                                dx_PK);
}

void fp8_grouped_linear_backward_weight(const DeviceContext& ctx, const Tensor& dy_PM, const Tensor& x_PK,
                                        const Tensor& counts_E, const Tensor& dw_EMK, bool accumulate) {
  if (ctx.device == Device::CUDA)
    return cuda_op(ctx, &OpTable::fp8_grouped_linear_backward_weight, "fp8_grouped_linear_backward_weight")(
        ctx, dy_PM, x_PK, counts_E, dw_EMK, accumulate);
  const char* op = "fp8_grouped_linear_backward_weight";
  require_cpu(op, ctx);
  require_f32(op, "dy_PM", dy_PM);
  require_f32(op, "x_PK", x_PK);
  QUILL_CHECK(dy_PM.ndim() == 2 && x_PK.ndim() == 2 && dy_PM.dim(0) == x_PK.dim(0),
              "{}: dy {} and x {} must be 2-D with the same rows", op, shape_str(dy_PM.shape()), shape_str(x_PK.shape()));
  grouped_linear_backward_weight(kCpu, seen_as_fp8_grouped(dy_PM, counts_E), seen_as_fp8_grouped(x_PK, counts_E),
                                 counts_E, dw_EMK, accumulate);
}

}  // namespace quill::ops
