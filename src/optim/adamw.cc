#include "optim/adamw.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "base/error.h"
#include "model/transient_compute.h"
#include "ops/convert.h"
#include "optim/cpu_adamw.h"
#include "optim/grad_norm.h"

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
  QUILL_CHECK(config.offload_stretch_elements > 0, "AdamW: offload_stretch_elements must be positive, got {}",
              config.offload_stretch_elements);
}

AdamW::AdamW(ParamTable& params, AdamWConfig config, const DeviceContext& ctx, Comm* world)
    : params_(params), config_(config), ctx_(ctx), world_(world), overlap_(params, ctx, config.ddp) {
  QUILL_CHECK(params_.placed(), "AdamW: parameters must be placed before the optimizer is made");
  check_adamw_config(config_);
  const DType dtypes[2] = {config_.memory.exp_avg, config_.memory.exp_avg_sq};
  for (const ParamBucket& b : params_.buckets()) offloaded_ |= b.offload_end > 0;
  if (offloaded_) pool_ = std::make_unique<ThreadPool>(hardware_threads());
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
    }
    host_.push_back(part);
  }
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
  overlap_.finish_grad_reduce();
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

// The offloaded heads cut into stretches of at most offload_stretch_elements (2^24): the unit of
// the copies up (each started as soon as the host has updated it, so that it runs under the host's
// next stretch) and, with the overlap, of the pipelined copy down.
std::vector<AdamW::Stretch> AdamW::host_stretches() const {
  const int64_t kStretch = config_.offload_stretch_elements;
  std::vector<Stretch> out;
  for (size_t bi = 0; bi < params_.buckets().size(); ++bi)
    for (int64_t at = 0, h = params_.buckets()[bi].offload_end; at < h; at += kStretch)
      out.push_back({bi, at, std::min(h, at + kStretch)});
  return out;
}

void AdamW::copy_down(const Stretch& st) {
  const ParamBucket& b = params_.buckets()[st.bucket];
  ops::transfer_async(ctx_, b.grads.view_flat(b.shard_begin + st.begin, {st.end - st.begin}),
                      host_[st.bucket].grads.view_flat(st.begin, {st.end - st.begin}));
}

void AdamW::update_host_stretch(ops::AdamWStep s, const Stretch& st) {
  const std::vector<Param>& params = params_.params();
  const ParamBucket& b = params_.buckets()[st.bucket];
  const HostPart& part = host_[st.bucket];
  QUILL_CHECK(b.master_is_compute() || b.compute_dtype == DType::BF16,
              "AdamW: an offloaded bucket computes in {}, the host update writes fp32 or bf16",
              dtype_name(b.compute_dtype));
  // What goes up: the bf16 copy the host wrote, or (fp32 buckets) the updated master itself.
  const Tensor& up = b.master_is_compute() ? b.host_master : part.compute;
  uint16_t* bf16_out = b.master_is_compute() ? nullptr : part.compute.data_as<uint16_t>();
  const size_t m_size = dtype_size(part.exp_avg.dtype()), v_size = dtype_size(part.exp_avg_sq.dtype());
  const int64_t lo = b.shard_begin + st.begin, hi = b.shard_begin + st.end;
  for (size_t i : b.members) {
    const Param& p = params[i];
    const int64_t o = p.bucket_offset;
    const int64_t begin = std::max(o, lo), end = std::min(o + shape_numel(p.shape), hi);
    if (begin >= end) continue;
    // Elementwise: a member cut at a stretch's edge gets the same bits as updated whole.
    s.weight_decay = p.weight_decay ? static_cast<float>(config_.weight_decay) : 0.0f;
    const int64_t local = begin - b.shard_begin, n = end - begin;
    adamw_update_host(s, b.host_master.data_as<float>() + local, part.grads.data_as<float>() + local,
                      static_cast<char*>(part.exp_avg.data()) + local * m_size, part.exp_avg.dtype(),
                      static_cast<char*>(part.exp_avg_sq.data()) + local * v_size, part.exp_avg_sq.dtype(),
                      bf16_out ? bf16_out + local : nullptr, n, *pool_);
  }
  // Padding past the last member (never trained) is in the range too: its copy is zero either way.
  ops::transfer_async(ctx_, up.view_flat(st.begin, {st.end - st.begin}),
                      b.compute.view_flat(b.shard_begin + st.begin, {st.end - st.begin}));
}

void AdamW::update(double lr, double norm) {
  QUILL_CHECK(std::isfinite(norm), "gradient norm is {} at optimizer step {}: stopping before the weights are corrupted",
              norm, step_);
  ++step_;
  const ops::AdamWStep s = adamw_step_constants(config_, lr, step_, norm);
  hold_transient_compute(params_, ctx_);  // the FP8 matrices' bf16 copies, written below
  offload_times_ = OffloadTimes{};
  if (offloaded_) {
    using clock = std::chrono::steady_clock;
    auto since = [](clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); };
    const std::vector<Stretch> stretches = host_stretches();
    if (config_.memory.overlap_d2h_h2d) {
      // Pipelined (Megatron's --overlap-cpu-optimizer-d2h-h2d): every stretch's gradients start down
      // at once, each followed by a fence (on a GPU the copy stream, after the reduction); the
      // device's part is enqueued behind them on the compute stream and runs beside the copies; the
      // host updates each stretch as soon as its fence is reached, while the later stretches are
      // still coming down, and starts its copy up. So the copy down hides under the host update.
      std::vector<ops::TransferFence> fences;
      fences.reserve(stretches.size());
      for (const Stretch& st : stretches) {
        copy_down(st);
        fences.push_back(ops::transfer_fence(ctx_));
      }
      update_device_parts(s);
      for (size_t i = 0; i < stretches.size(); ++i) {
        clock::time_point t = clock::now();
        ops::wait_transfer_fence(ctx_, fences[i]);
        offload_times_.wait_down_s += since(t);
        t = clock::now();
        update_host_stretch(s, stretches[i]);
        offload_times_.host_s += since(t);
      }
    } else {
      // One after the other: the whole copy down, the host update (each stretch's copy up started as
      // it is done), the last copies up, then the device's part.
      clock::time_point t = clock::now();
      for (const Stretch& st : stretches) copy_down(st);
      ops::wait_transfers(ctx_, /*host=*/true);
      offload_times_.wait_down_s = since(t);
      t = clock::now();
      for (const Stretch& st : stretches) update_host_stretch(s, st);
      offload_times_.host_s = since(t);
      t = clock::now();
      ops::wait_transfers(ctx_, /*host=*/true);
      offload_times_.wait_up_s = since(t);
      update_device_parts(s);
    }
  } else {
    update_device_parts(s);
  }
  // The all-gathers (and the next step's ops) read the copies up.
  if (offloaded_) ops::wait_transfers(ctx_, /*host=*/false);
  overlap_.gather_params();  // with --overlap-param-gather: owed, waited on before each bucket's first use
  params_.trainable_compute_changed();
  release_transient_compute(params_, ctx_);  // their FP8 copies made from them (gathered above)
}

double AdamW::step(double lr) {
  const double norm = reduce_and_norm();
  update(lr, norm);
  return norm;
}

}  // namespace quill
