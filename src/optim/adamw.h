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
// all-gathers the compute copies in their own dtype (bf16 on a GPU, half the bytes of fp32). When
// each bucket's reduce-scatter and all-gather are issued (after the passes and after the update, or
// overlapped with the backward and the next forward) is optim/bucket_overlap.h's.
//
// Optimizer memory (AdamWConfig::memory, Megatron's flags; docs/decisions/optimizer-offload.md):
// - CPU offload: placement (model/offload_split.h) puts the head of each bucket's shard in pinned
//   host memory; here its moments live there too, its gradients are copied down, the host AdamW
//   (optim/cpu_adamw.h, the device kernel's arithmetic bit for bit) updates it on a thread pool and
//   its updated compute copy goes back up before the all-gather, in 64 MiB stretches behind the
//   host update. With overlap_d2h_h2d the copy down is pipelined too (the host updates a stretch
//   while the next ones come down) and the device updates the rest meanwhile; without it, the
//   whole copy down, the host update and the device's part follow one another.
// - bf16 moments (exp_avg / exp_avg_sq): stored in bf16 on either side, fp32 arithmetic.
// - bf16 main gradients are refused (check_adamw_config says why).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/thread_pool.h"

#include "comm/comm.h"
#include "model/params.h"
#include "ops/adamw.h"
#include "ops/device_context.h"
#include "optim/bucket_overlap.h"
#include "optim/ddp_config.h"
#include "optim/optimizer_memory.h"

namespace quill {

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  double clip_grad = 1.0;  // 0 disables clipping
  OptimizerMemory memory;   // offload and state dtypes (all on the device in fp32 by default)
  DdpConfig ddp;            // when the buckets' collectives are issued (optim/bucket_overlap.h)
  // CPU offload's unit of copying and updating (elements; 64 MiB of fp32). Any value gives the same
  // bits; tests make it small so that stretches cut members and pipelines have many stages.
  int64_t offload_stretch_elements = int64_t{1} << 24;
};

// Refuses what the optimizer cannot carry out, naming the flag (before anything is loaded).
void check_adamw_config(const AdamWConfig& config);

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
  // What the stage's passes call at their overlap points (--overlap-grad-reduce,
  // --overlap-param-gather; without them the calls do nothing): pass it to the pipeline executor.
  PassHooks* pass_hooks() { return &overlap_; }
  // After the step's passes: with --overlap-grad-reduce the step's reductions complete here, at the end
  // of the passes as in Megatron (the rest of the step, its loss reductions included, follows them).
  void passes_done() { overlap_.passes_done(); }
  // Completes the parameter all-gathers --overlap-param-gather left for the next forward: before
  // the compute copies are read by anything else (the Hugging Face export). Collective.
  void finish_param_gather() { overlap_.finish_param_gather(); }

  int64_t steps_taken() const { return step_; }
  void set_steps_taken(int64_t s) { step_ = s; }
  // Bucket b's moments on the device: shard-local elements [offload_end, shard) of its shard (all of
  // it without offload), in the configured dtypes.
  const Tensor& exp_avg(size_t bucket) const { return m_[bucket]; }
  const Tensor& exp_avg_sq(size_t bucket) const { return v_[bucket]; }
  // Either moment (0: exp_avg, 1: exp_avg_sq) of shard-local elements [local, local + n) of bucket b,
  // on the device or in host memory, as ParamBucket::master_range; the range must not straddle.
  Tensor moment_range(int which, size_t bucket, int64_t local, int64_t n) const;
  int64_t moment_bytes() const;       // both moments, device and host
  int64_t host_moment_bytes() const;  // of which in host memory
  const AdamWConfig& config() const { return config_; }
  // Host-clock seconds of the last update's offloaded part (all zero without offload): waiting for the
  // gradients' copy down, the host AdamW (with its copies up started), and (without the overlap)
  // waiting for the last copies up. With the overlap the device's part and the copies run beside them.
  struct OffloadTimes {
    double wait_down_s = 0, host_s = 0, wait_up_s = 0;
  };
  const OffloadTimes& offload_times() const { return offload_times_; }

 private:
  // One bucket's offloaded head (elements [0, offload_end) of its shard), all in pinned host memory.
  struct HostPart {
    Tensor grads;                // F32: the reduced gradients, copied down
    Tensor exp_avg, exp_avg_sq;  // the moments, in their dtypes
    Tensor compute;              // the updated compute copy before it goes up (bf16 buckets only)
  };
  // Elements [begin, end) of bucket `bucket`'s offloaded head.
  struct Stretch {
    size_t bucket;
    int64_t begin, end;
  };
  void update_device_parts(ops::AdamWStep s);
  std::vector<Stretch> host_stretches() const;
  // Starts the stretch's reduced gradients down to host memory.
  void copy_down(const Stretch& st);
  // The host AdamW over the stretch (its gradients down), then starts its updated compute copy up.
  void update_host_stretch(ops::AdamWStep s, const Stretch& st);

  ParamTable& params_;
  AdamWConfig config_;
  DeviceContext ctx_;
  Comm* world_;
  std::vector<Tensor> m_, v_;
  std::vector<HostPart> host_;
  bool offloaded_ = false;
  std::unique_ptr<ThreadPool> pool_;  // the host update's threads (with offload only)
  BucketOverlap overlap_;
  int64_t step_ = 0;
  OffloadTimes offload_times_;
};

}  // namespace quill
