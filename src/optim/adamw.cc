#include "optim/adamw.h"

#include <cmath>

#include "base/error.h"
#include "ops/adamw.h"
#include "ops/convert.h"
#include "ops/elementwise.h"

namespace quill {

AdamW::AdamW(ParamTable& params, AdamWConfig config, const DeviceContext& ctx)
    : params_(params), config_(config), ctx_(ctx) {
  for (Param& p : params_.params()) {
    if (!p.trainable) continue;
    QUILL_CHECK(p.grad.defined(), "AdamW: trainable parameter {} has no gradient buffer", p.name);
    trainable_.push_back(&p);
    for (std::vector<Tensor>* state : {&m_, &v_}) {
      state->push_back(Tensor::empty(p.shape, DType::F32, *ctx_.allocator));
      ops::zero(ctx_, state->back());
    }
  }
}

double AdamW::grad_norm() const {
  double sq = 0;
  for (const Param* p : trainable_) sq += ops::sum_squares(ctx_, p->grad);
  return std::sqrt(sq);
}

double AdamW::step(double lr) {
  const double norm = grad_norm();
  QUILL_CHECK(std::isfinite(norm), "gradient norm is {} at optimizer step {}: stopping before the weights are corrupted",
              norm, step_);
  ops::AdamWStep s;
  if (config_.clip_grad > 0) {
    const double coef = config_.clip_grad / (norm + 1e-6);  // torch's clip_grad_norm_ and Megatron's
    if (coef < 1.0) s.clip = static_cast<float>(coef);
  }
  ++step_;
  s.lr = static_cast<float>(lr);
  s.beta1 = static_cast<float>(config_.beta1);
  s.beta2 = static_cast<float>(config_.beta2);
  s.eps = static_cast<float>(config_.eps);
  s.bias_correction1 = 1.0 - std::pow(config_.beta1, static_cast<double>(step_));
  s.bias_correction2 = 1.0 - std::pow(config_.beta2, static_cast<double>(step_));
  for (size_t j = 0; j < trainable_.size(); ++j) {
    Param& p = *trainable_[j];
    s.weight_decay = p.weight_decay ? static_cast<float>(config_.weight_decay) : 0.0f;
    ops::adamw_update(ctx_, p.value, p.grad, m_[j], v_[j], p.compute, s);
  }
  return norm;
}

}  // namespace quill
