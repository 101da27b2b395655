// AdamW with fp32 master weights and moments, as torch.optim.AdamW (decoupled weight decay):
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  p *= 1 - lr*wd;
//   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)        (t = 1-based step)
// Weight decay only on parameters marked for it (Megatron: none on 1-D). Gradient clipping by the
// global L2 norm over trainable parameters: coef = max_norm / (norm + 1e-6), applied when < 1.
//
// The distributed optimizer (ZeRO-1, Megatron's distributed optimizer), built from three parts:
// gradient sync (optim/grad_sync.h: each bucket reduce-scattered over its group), the global norm
// (optim/grad_norm.h), and the AdamW math over a range (ops/adamw.h, reused by CPU offload). Each
// rank keeps the moments of its shard of every bucket, updates its shard of the fp32 masters,
// writes the updated compute copies of that shard in the same pass, and each bucket's group
// all-gathers the compute copies in their own dtype (bf16 on a GPU, half the bytes of fp32).
#pragma once

#include <cstdint>
#include <vector>

#include "comm/comm.h"
#include "model/params.h"
#include "ops/adamw.h"
#include "ops/device_context.h"
#include "optim/optimizer_memory.h"

namespace quill {

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  double clip_grad = 1.0;  // 0 disables clipping
  OptimizerMemory memory;   // offload and state dtypes (all on the device in fp32 by default)
};

// The per-step constants of the update at 1-based step t (bias corrections, clip coefficient).
ops::AdamWStep adamw_step_constants(const AdamWConfig& config, double lr, int64_t t, double grad_norm);

class AdamW {
 public:
  // `params` must be placed (model/param_placement.h). `world` adds the norm over every rank of
  // the layout (null on one rank). The moments live on ctx's device.
  AdamW(ParamTable& params, AdamWConfig config, const DeviceContext& ctx = DeviceContext::cpu(), Comm* world = nullptr);

  // Reduces the gradients over their groups, then returns the global L2 norm of the trainable
  // gradients (before clipping).
  double reduce_and_norm();
  // Clips (when configured), updates this rank's shards at learning rate lr and gathers the
  // compute copies. Call after reduce_and_norm.
  void update(double lr, double norm);
  // Both, returning the pre-clip norm.
  double step(double lr);

  int64_t steps_taken() const { return step_; }
  void set_steps_taken(int64_t s) { step_ = s; }
  // Bucket b's moments: this rank's shard, as long as the bucket's master shard.
  const Tensor& exp_avg(size_t bucket) const { return m_[bucket]; }
  const Tensor& exp_avg_sq(size_t bucket) const { return v_[bucket]; }
  int64_t moment_bytes() const;
  const AdamWConfig& config() const { return config_; }

 private:
  ParamTable& params_;
  AdamWConfig config_;
  DeviceContext ctx_;
  Comm* world_;
  std::vector<Tensor> m_, v_;
  int64_t step_ = 0;
};

}  // namespace quill
