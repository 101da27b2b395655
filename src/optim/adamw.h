// AdamW with fp32 master weights and moments, as torch.optim.AdamW (decoupled weight decay):
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  p *= 1 - lr*wd;
//   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)        (t = 1-based step)
// Weight decay only on parameters marked for it (Megatron: none on 1-D). Gradient clipping by the
// global L2 norm over trainable parameters: coef = max_norm / (norm + 1e-6), applied when < 1.
#pragma once

#include <cstdint>
#include <vector>

#include "model/params.h"
#include "ops/device_context.h"

namespace quill {

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  double clip_grad = 1.0;  // 0 disables clipping
};

class AdamW {
 public:
  // The moments live on ctx's device, beside the parameters' fp32 values.
  AdamW(ParamTable& params, AdamWConfig config, const DeviceContext& ctx = DeviceContext::cpu());

  // Global L2 norm of the trainable gradients (before clipping).
  double grad_norm() const;
  // Clips (when configured) and applies one step at learning rate lr. Returns the pre-clip norm.
  double step(double lr);

  int64_t steps_taken() const { return step_; }
  // State for training checkpoints: the moments per trainable parameter, in table order.
  std::vector<Tensor>& exp_avg() { return m_; }
  std::vector<Tensor>& exp_avg_sq() { return v_; }
  void set_steps_taken(int64_t s) { step_ = s; }
  const AdamWConfig& config() const { return config_; }

 private:
  ParamTable& params_;
  AdamWConfig config_;
  DeviceContext ctx_;
  std::vector<Param*> trainable_;
  std::vector<Tensor> m_, v_;
  int64_t step_ = 0;
};

}  // namespace quill
