#include "optim/adamw.h"

#include <cmath>

#include "base/error.h"

namespace quill {

AdamW::AdamW(ParamTable& params, AdamWConfig config) : params_(params), config_(config) {
  for (Param& p : params_.params()) {
    if (!p.trainable) continue;
    QUILL_CHECK(p.grad.defined(), "AdamW: trainable parameter {} has no gradient buffer", p.name);
    trainable_.push_back(&p);
    m_.push_back(Tensor::zeros(p.shape, DType::F32));
    v_.push_back(Tensor::zeros(p.shape, DType::F32));
  }
}

double AdamW::grad_norm() const {
  double sq = 0;
  for (const Param* p : trainable_) {
    const float* g = p->grad.data_as<float>();
    for (int64_t i = 0, n = p->grad.numel(); i < n; ++i) sq += static_cast<double>(g[i]) * g[i];
  }
  return std::sqrt(sq);
}

double AdamW::step(double lr) {
  const double norm = grad_norm();
  QUILL_CHECK(std::isfinite(norm), "gradient norm is {} at optimizer step {}: stopping before the weights are corrupted",
              norm, step_);
  float clip = 1.0f;
  if (config_.clip_grad > 0) {
    const double coef = config_.clip_grad / (norm + 1e-6);
    if (coef < 1.0) clip = static_cast<float>(coef);
  }
  ++step_;
  const double bc1 = 1.0 - std::pow(config_.beta1, static_cast<double>(step_));
  const double bc2 = 1.0 - std::pow(config_.beta2, static_cast<double>(step_));
  const float b1 = static_cast<float>(config_.beta1), b2 = static_cast<float>(config_.beta2);
  const float step_size = static_cast<float>(lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float eps = static_cast<float>(config_.eps);
  for (size_t j = 0; j < trainable_.size(); ++j) {
    Param& p = *trainable_[j];
    float* w = p.value.data_as<float>();
    const float* g = p.grad.data_as<float>();
    float* m = m_[j].data_as<float>();
    float* v = v_[j].data_as<float>();
    const float decay = p.weight_decay ? static_cast<float>(1.0 - lr * config_.weight_decay) : 1.0f;
    for (int64_t i = 0, n = p.value.numel(); i < n; ++i) {
      const float gi = g[i] * clip;
      m[i] = b1 * m[i] + (1.0f - b1) * gi;
      v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
      w[i] *= decay;
      w[i] -= step_size * m[i] / (std::sqrt(v[i]) / bc2_sqrt + eps);
    }
  }
  return norm;
}

}  // namespace quill
