// CPU reference of ops/adamw.h, in the order torch.optim.AdamW applies it.
#include "ops/adamw.h"
#include "ops/op_table.h"

#include <cmath>

#include "ops/convert.h"
#include "ops/dispatch.h"
#include "tensor/dtype.h"

namespace quill::ops {

void adamw_update(const DeviceContext& ctx, const Tensor& value, const Tensor& grad, const Tensor& exp_avg,
                  const Tensor& exp_avg_sq, const Tensor& compute, const AdamWStep& s) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::adamw_update, "adamw_update")(ctx, value, grad, exp_avg, exp_avg_sq, compute, s);
  const char* op = "adamw_update";
  ops_detail::require_cpu(op, ctx);
  for (const Tensor* t : {&value, &grad, &exp_avg, &exp_avg_sq}) ops_detail::require_shape(op, "state", *t, value.shape());
  ops_detail::require_dtype(op, "value", value, DType::F32);
  ops_detail::require_dtype(op, "grad", grad, DType::F32);
  for (const Tensor* t : {&exp_avg, &exp_avg_sq})
    QUILL_CHECK(t->dtype() == DType::F32 || t->dtype() == DType::BF16, "{}: a moment has dtype {}, expected F32 or BF16",
                op, dtype_name(t->dtype()));
  float* w = value.data_as<float>();
  const float* g = grad.data_as<float>();
  // A moment of either dtype, read and written as fp32 (a BF16 store rounds to nearest even).
  auto load = [](const Tensor& t, int64_t i) {
    return t.dtype() == DType::BF16 ? bf16_to_f32(t.data_as<uint16_t>()[i]) : t.data_as<float>()[i];
  };
  auto store = [](const Tensor& t, int64_t i, float x) {
    if (t.dtype() == DType::BF16) t.data_as<uint16_t>()[i] = f32_to_bf16(x);
    else t.data_as<float>()[i] = x;
  };
  const float decay = 1.0f - s.lr * s.weight_decay;
  const float step_size = static_cast<float>(s.lr / s.bias_correction1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(s.bias_correction2));
  for (int64_t i = 0, n = value.numel(); i < n; ++i) {
    const float gi = g[i] * s.clip;
    const float m = s.beta1 * load(exp_avg, i) + (1.0f - s.beta1) * gi;
    const float v = s.beta2 * load(exp_avg_sq, i) + (1.0f - s.beta2) * gi * gi;
    store(exp_avg, i, m);
    store(exp_avg_sq, i, v);
    w[i] *= decay;
    w[i] -= step_size * m / (std::sqrt(v) / bc2_sqrt + s.eps);
  }
  if (compute.defined() && compute.data() != value.data()) convert(ctx, value, compute);
}

}  // namespace quill::ops
