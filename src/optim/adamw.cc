#include "optim/adamw.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "ops/convert.h"
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

AdamW::AdamW(ParamTable& params, AdamWConfig config, const DeviceContext& ctx, Comm* world)
    : params_(params), config_(config), ctx_(ctx), world_(world) {
  QUILL_CHECK(params_.placed(), "AdamW: parameters must be placed before the optimizer is made");
  for (const ParamBucket& b : params_.buckets()) {
    for (std::vector<Tensor>* state : {&m_, &v_}) {
      state->push_back(Tensor::empty({b.shard_end - b.shard_begin}, DType::F32, *ctx_.allocator));
      ops::zero(ctx_, state->back());
    }
  }
}

int64_t AdamW::moment_bytes() const {
  int64_t n = 0;
  for (size_t b = 0; b < m_.size(); ++b) n += static_cast<int64_t>(m_[b].nbytes() + v_[b].nbytes());
  return n;
}

double AdamW::reduce_and_norm() {
  reduce_gradients(params_);
  return global_grad_norm(params_, ctx_, world_);
}

void AdamW::update(double lr, double norm) {
  QUILL_CHECK(std::isfinite(norm), "gradient norm is {} at optimizer step {}: stopping before the weights are corrupted",
              norm, step_);
  ++step_;
  ops::AdamWStep s = adamw_step_constants(config_, lr, step_, norm);
  const std::vector<Param>& params = params_.params();
  for (size_t bi = 0; bi < params_.buckets().size(); ++bi) {
    const ParamBucket& b = params_.buckets()[bi];
    // The part of each member inside this rank's shard. When the master is not its own compute copy,
    // the kernel also writes the compute copy of that part (rounded as ops::convert rounds), which
    // saves a second pass over every fp32 value (7 ms of a one-row slice step on an H200,
    // bench/results/2026-11-30-slice-v3); the all-gather below brings the other ranks' parts.
    for (size_t i : b.members) {
      const Param& p = params[i];
      const int64_t o = p.bucket_offset;
      const int64_t begin = std::max(o, b.shard_begin), end = std::min(o + shape_numel(p.shape), b.shard_end);
      if (begin >= end) continue;
      s.weight_decay = p.weight_decay ? static_cast<float>(config_.weight_decay) : 0.0f;
      const Shape n{end - begin};
      const int64_t local = begin - b.shard_begin;
      const Tensor compute = b.master_is_compute() ? Tensor() : b.compute.view_flat(begin, n);
      ops::adamw_update(ctx_, b.master.view_flat(local, n), b.grads.view_flat(begin, n), m_[bi].view_flat(local, n),
                        v_[bi].view_flat(local, n), compute, s);
    }
    if (b.comm) b.comm->all_gather(b.compute.view_flat(b.shard_begin, {b.shard_end - b.shard_begin}), b.compute);
  }
}

double AdamW::step(double lr) {
  const double norm = reduce_and_norm();
  update(lr, norm);
  return norm;
}

}  // namespace quill
