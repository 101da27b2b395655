// CPU reference of ops/adamw.h, in the order torch.optim.AdamW applies it.
#include "ops/adamw.h"
#include "ops/op_table.h"

#include <cmath>

#include "ops/convert.h"
#include "ops/dispatch.h"

namespace quill::ops {

void adamw_update(const DeviceContext& ctx, const Tensor& value, const Tensor& grad, const Tensor& exp_avg,
                  const Tensor& exp_avg_sq, const Tensor& compute, const AdamWStep& s) {
  if (ctx.device == Device::CUDA) return cuda_op(ctx, &OpTable::adamw_update, "adamw_update")(ctx, value, grad, exp_avg, exp_avg_sq, compute, s);
  const char* op = "adamw_update";
  ops_detail::require_cpu(op, ctx);
  for (const Tensor* t : {&value, &grad, &exp_avg, &exp_avg_sq}) {
    ops_detail::require_shape(op, "state", *t, value.shape());
    ops_detail::require_dtype(op, "state", *t, DType::F32);
  }
  float* w = value.data_as<float>();
  const float* g = grad.data_as<float>();
  float* m = exp_avg.data_as<float>();
  float* v = exp_avg_sq.data_as<float>();
  const float decay = 1.0f - s.lr * s.weight_decay;
  const float step_size = static_cast<float>(s.lr / s.bias_correction1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(s.bias_correction2));
  for (int64_t i = 0, n = value.numel(); i < n; ++i) {
    const float gi = g[i] * s.clip;
    m[i] = s.beta1 * m[i] + (1.0f - s.beta1) * gi;
    v[i] = s.beta2 * v[i] + (1.0f - s.beta2) * gi * gi;
    w[i] *= decay;
    w[i] -= step_size * m[i] / (std::sqrt(v[i]) / bc2_sqrt + s.eps);
  }
  if (compute.defined() && compute.data() != value.data()) convert(ctx, value, compute);
}

}  // namespace quill::ops
