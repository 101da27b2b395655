#include "optim/adamw.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "ops/convert.h"
#include "optim/cpu_adamw.h"
#include "optim/grad_norm.h"
#include "optim/grad_sync.h"

namespace quill {

ops::AdamWStep adamw_step_constants(const AdamWConfig& config, double lr, int64_t t, double grad_norm) {
  ops::AdamWStep s;
  if (config.clip_grad > 0) {
    const double coef = config.clip_grad / (grad_norm + 1e-6);  // torch's clip_grad_norm_ and Megatron's
    if (coef < 1.0) s.clip = static_cast<float>(coef);
  }
  s.lr = static_cast<float>(lr);
  s.beta1 = static_cast<float>(config.beta1);
  s.beta2 = static_cast<float>(config.beta2);
  s.eps = static_cast<float>(config.eps);
  s.bias_correction1 = 1.0 - std::pow(config.beta1, static_cast<double>(t));
  s.bias_correction2 = 1.0 - std::pow(config.beta2, static_cast<double>(t));
  return s;
}

void check_adamw_config(const AdamWConfig& config) {
  // Megatron keeps main gradients in bf16 only with its precision-aware optimizer, where the
  // gradient buffer is written once per step. quill's is an accumulator: every row's backward adds
  // into it (model/layer_util.h) and a bf16 buffer would round each partial sum to 8 significant bits,
  // a change of the gradient itself, not of its storage; the norm and clipping also read it.
  QUILL_CHECK(config.memory.main_grads == DType::F32,
              "--main-grads-dtype bf16 is not supported: quill accumulates each step's gradients over its rows in the "
              "buffer the optimizer reads, and bf16 would round every partial sum (8 significant bits), changing the "
              "gradient, not only its storage; use fp32 (the default), and --exp-avg-dtype/--exp-avg-sq-dtype bf16 to "
              "save optimizer memory");
  check_optimizer_memory(config.memory);
}

AdamW::AdamW(ParamTable& params, AdamWConfig config, const DeviceContext& ctx, Comm* world)
    : params_(params), config_(config), ctx_(ctx), world_(world) {
  QUILL_CHECK(params_.placed(), "AdamW: parameters must be placed before the optimizer is made");
  check_adamw_config(config_);
  const DType dtypes[2] = {config_.memory.exp_avg, config_.memory.exp_avg_sq};
  for (const ParamBucket& b : params_.buckets()) {
    const int64_t shard = b.shard_end - b.shard_begin, h = b.offload_end;
    m_.push_back(Tensor::empty({shard - h}, dtypes[0], *ctx_.allocator));
    v_.push_back(Tensor::empty({shard - h}, dtypes[1], *ctx_.allocator));
    ops::zero(ctx_, m_.back());
    ops::zero(ctx_, v_.back());
    HostPart part;
    if (h > 0) {
      Allocator& pinned = *ctx_.host_pinned;
      part.grads = Tensor::zeros({h}, DType::F32, pinned);
      part.exp_avg = Tensor::zeros({h}, dtypes[0], pinned);
      part.exp_avg_sq = Tensor::zeros({h}, dtypes[1], pinned);
      if (!b.master_is_compute()) part.compute = Tensor::zeros({h}, b.compute_dtype, pinned);
      offloaded_ = true;
    }
    host_.push_back(part);
  }
  if (offloaded_) pool_ = std::make_unique<ThreadPool>(hardware_threads());
}

Tensor AdamW::moment_range(int which, size_t bucket, int64_t local, int64_t n) const {
  const ParamBucket& b = params_.buckets()[bucket];
  const HostPart& part = host_[bucket];
  QUILL_CHECK(local >= 0 && n >= 0 && local + n <= b.shard_end - b.shard_begin,
              "AdamW: moment elements [{}, {}) are outside the shard of {}", local, local + n, b.shard_end - b.shard_begin);
  if (b.offload_end > 0 && local + n <= b.offload_end)
    return (which == 0 ? part.exp_avg : part.exp_avg_sq).view_flat(local, {n});
  QUILL_CHECK(local >= b.offload_end, "AdamW: moment elements [{}, {}) straddle the offload boundary {}", local,
              local + n, b.offload_end);
  return (which == 0 ? m_[bucket] : v_[bucket]).view_flat(local - b.offload_end, {n});
}

int64_t AdamW::moment_bytes() const {
  int64_t n = 0;
  for (size_t b = 0; b < m_.size(); ++b) n += static_cast<int64_t>(m_[b].nbytes() + v_[b].nbytes());
  return n + host_moment_bytes();
}

int64_t AdamW::host_moment_bytes() const {
  int64_t n = 0;
  for (const HostPart& p : host_)
    if (p.exp_avg.defined()) n += static_cast<int64_t>(p.exp_avg.nbytes() + p.exp_avg_sq.nbytes());
  return n;
}

double AdamW::reduce_and_norm() {
  reduce_gradients(params_, ctx_);
  return global_grad_norm(params_, ctx_, world_);
}

void AdamW::update_device_parts(ops::AdamWStep s) {
  const std::vector<Param>& params = params_.params();
  for (size_t bi = 0; bi < params_.buckets().size(); ++bi) {
    const ParamBucket& b = params_.buckets()[bi];
    // The part of each member inside this rank's shard, past the offloaded head. When the master is
    // not its own compute copy, the kernel also writes the compute copy of that part (rounded as
    // ops::convert rounds), which saves a second pass over every fp32 value (7 ms of a one-row slice
    // step on an H200, bench/results/2026-11-30-slice-v3); the all-gather brings the other ranks' parts.
    const int64_t lo = b.shard_begin + b.offload_end;
    for (size_t i : b.members) {
      const Param& p = params[i];
      const int64_t o = p.bucket_offset;
      const int64_t begin = std::max(o, lo), end = std::min(o + shape_numel(p.shape), b.shard_end);
      if (begin >= end) continue;
      s.weight_decay = p.weight_decay ? static_cast<float>(config_.weight_decay) : 0.0f;
      const int64_t n = end - begin, local = begin - b.shard_begin;
      const Tensor compute = b.master_is_compute() ? Tensor() : b.compute.view_flat(begin, {n});
      ops::adamw_update(ctx_, b.master_range(local, n), b.grads.view_flat(begin, {n}), moment_range(0, bi, local, n),
                        moment_range(1, bi, local, n), compute, s);
    }
  }
}

void AdamW::update_host_parts(ops::AdamWStep s) {
  // The copy up goes in stretches of at least this many elements, each started as soon as the host
  // has updated it, so that it runs under the host's next stretch (64 MiB of fp32).
  constexpr int64_t kStretch = int64_t{1} << 24;
  const std::vector<Param>& params = params_.params();
  for (size_t bi = 0; bi < params_.buckets().size(); ++bi) {
    const ParamBucket& b = params_.buckets()[bi];
    const HostPart& part = host_[bi];
    const int64_t h = b.offload_end;
    if (h == 0) continue;
    // What goes up: the bf16 copy the host wrote, or (fp32 buckets) the updated master itself.
    const Tensor& up = b.master_is_compute() ? b.host_master : part.compute;
    uint16_t* bf16_out = b.master_is_compute() ? nullptr : part.compute.data_as<uint16_t>();
    QUILL_CHECK(b.master_is_compute() || b.compute_dtype == DType::BF16,
                "AdamW: an offloaded bucket computes in {}, the host update writes fp32 or bf16",
                dtype_name(b.compute_dtype));
    int64_t sent = 0;
    auto send_up_to = [&](int64_t done) {
      if (done <= sent) return;
      ops::transfer_async(ctx_, up.view_flat(sent, {done - sent}), b.compute.view_flat(b.shard_begin + sent, {done - sent}));
      sent = done;
    };
    const size_t m_size = dtype_size(part.exp_avg.dtype()), v_size = dtype_size(part.exp_avg_sq.dtype());
    for (size_t i : b.members) {
      const Param& p = params[i];
      const int64_t o = p.bucket_offset;
      const int64_t begin = std::max(o, b.shard_begin), end = std::min(o + shape_numel(p.shape), b.shard_begin + h);
      if (begin >= end) continue;
      s.weight_decay = p.weight_decay ? static_cast<float>(config_.weight_decay) : 0.0f;
      const int64_t local = begin - b.shard_begin, n = end - begin;
      adamw_update_host(s, b.host_master.data_as<float>() + local, part.grads.data_as<float>() + local,
                        static_cast<char*>(part.exp_avg.data()) + local * m_size, part.exp_avg.dtype(),
                        static_cast<char*>(part.exp_avg_sq.data()) + local * v_size, part.exp_avg_sq.dtype(),
                        bf16_out ? bf16_out + local : nullptr, n, *pool_);
      if (local + n - sent >= kStretch) send_up_to(local + n);
    }
    // Padding past the last member (never trained) is in the range too: its copy is zero either way.
    send_up_to(h);
  }
}

void AdamW::update(double lr, double norm) {
  QUILL_CHECK(std::isfinite(norm), "gradient norm is {} at optimizer step {}: stopping before the weights are corrupted",
              norm, step_);
  ++step_;
  const ops::AdamWStep s = adamw_step_constants(config_, lr, step_, norm);
  if (offloaded_) {
    // The offloaded heads' reduced gradients go down (on a GPU: the copy stream, after the reduction).
    for (size_t bi = 0; bi < params_.buckets().size(); ++bi) {
      const ParamBucket& b = params_.buckets()[bi];
      if (b.offload_end > 0)
        ops::transfer_async(ctx_, b.grads.view_flat(b.shard_begin, {b.offload_end}), host_[bi].grads);
    }
    if (!config_.memory.overlap_d2h_h2d) {
      // One after the other: copy down, host update, copy up, then the device's part.
      ops::wait_transfers(ctx_, /*host=*/true);
      update_host_parts(s);
      ops::wait_transfers(ctx_, /*host=*/true);
    }
  }
  update_device_parts(s);
  if (offloaded_ && config_.memory.overlap_d2h_h2d) {
    // The device update is enqueued; the host waits only for the copy down (which ran beside it),
    // updates its part while the device updates the rest, and its copies up follow stretch by stretch.
    ops::wait_transfers(ctx_, /*host=*/true);
    update_host_parts(s);
  }
  // The all-gathers (and the next step's ops) read the copies up.
  if (offloaded_) ops::wait_transfers(ctx_, /*host=*/false);
  for (const ParamBucket& b : params_.buckets())
    if (b.comm) b.comm->all_gather(b.compute.view_flat(b.shard_begin, {b.shard_end - b.shard_begin}), b.compute);
}

double AdamW::step(double lr) {
  const double norm = reduce_and_norm();
  update(lr, norm);
  return norm;
}

}  // namespace quill
