// AdamW with fp32 master weights and moments, as torch.optim.AdamW (decoupled weight decay):
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  p *= 1 - lr*wd;
//   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)        (t = 1-based step)
// Weight decay only on parameters marked for it (Megatron: none on 1-D). Gradient clipping by the
// global L2 norm over trainable parameters: coef = max_norm / (norm + 1e-6), applied when < 1.
//
// Distributed (ZeRO-1, Megatron's distributed optimizer): with a data-parallel communicator of
// size D, the flat gradient buffer (model/params.h) is reduce-scattered so that rank r holds the
// summed gradient of its shard [r*S, (r+1)*S) (S = padded size / D); rank r keeps the Adam moments
// of that shard only, updates the fp32 values of its shard, and the values are all-gathered back.
// With no communicator (or D = 1) it is the plain single-device optimizer.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/comm.h"
#include "model/params.h"
#include "ops/device_context.h"

namespace quill {

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  double clip_grad = 1.0;  // 0 disables clipping
};

class AdamW {
 public:
  // `params` must be placed (model/param_placement.h) with flat buffers padded to a multiple of
  // the data-parallel size. The moments live on ctx's device.
  AdamW(ParamTable& params, AdamWConfig config, const DeviceContext& ctx = DeviceContext::cpu(), Comm* dp = nullptr);

  // Reduces the gradients over data-parallel ranks (when distributed), then returns the global L2
  // norm of the trainable gradients (before clipping).
  double reduce_and_norm();
  // Clips (when configured), updates the local shard at learning rate lr, gathers the values and
  // refreshes the compute copies. Call after reduce_and_norm.
  void update(double lr, double norm);
  // Both, returning the pre-clip norm.
  double step(double lr);

  int64_t steps_taken() const { return step_; }
  void set_steps_taken(int64_t s) { step_ = s; }
  // This rank's shard of the flat buffers, and its moments (each shard_end - shard_begin long).
  int64_t shard_begin() const { return shard_begin_; }
  int64_t shard_end() const { return shard_end_; }
  Tensor& exp_avg() { return m_; }
  Tensor& exp_avg_sq() { return v_; }
  const AdamWConfig& config() const { return config_; }

 private:
  ParamTable& params_;
  AdamWConfig config_;
  DeviceContext ctx_;
  Comm* dp_;
  int64_t shard_begin_ = 0, shard_end_ = 0;
  Tensor m_, v_;
  int64_t step_ = 0;
};

}  // namespace quill
