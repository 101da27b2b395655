#include "optim/adamw.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "model/param_placement.h"
#include "ops/adamw.h"
#include "ops/convert.h"
#include "ops/elementwise.h"

namespace quill {

namespace {
bool distributed(const Comm* dp) { return dp != nullptr && dp->size() > 1; }
}  // namespace

AdamW::AdamW(ParamTable& params, AdamWConfig config, const DeviceContext& ctx, Comm* dp)
    : params_(params), config_(config), ctx_(ctx), dp_(dp) {
  const Tensor& flat = params_.flat_grads();
  QUILL_CHECK(flat.defined(), "AdamW: parameters must be placed (flat buffers) before the optimizer is made");
  const int64_t ranks = distributed(dp_) ? dp_->size() : 1;
  QUILL_CHECK(flat.numel() % ranks == 0, "AdamW: flat buffer of {} elements does not split over {} data-parallel ranks",
              flat.numel(), ranks);
  const int64_t shard = flat.numel() / ranks;
  shard_begin_ = (distributed(dp_) ? dp_->rank() : 0) * shard;
  shard_end_ = shard_begin_ + shard;
  for (Tensor* state : {&m_, &v_}) {
    *state = Tensor::empty({shard}, DType::F32, *ctx_.allocator);
    ops::zero(ctx_, *state);
  }
}

double AdamW::reduce_and_norm() {
  const Tensor& flat = params_.flat_grads();
  const Tensor mine = flat.view_flat(shard_begin_, {shard_end_ - shard_begin_});
  if (distributed(dp_)) dp_->reduce_scatter(flat, mine, ReduceOp::Sum);
  double sq = ops::sum_squares(ctx_, mine);
  if (distributed(dp_)) {
    Tensor host = Tensor::empty({1}, DType::F64);
    host.data_as<double>()[0] = sq;
    Tensor t = ctx_.device == Device::CPU ? host : Tensor::empty({1}, DType::F64, *ctx_.allocator);
    ops::transfer(ctx_, host, t);
    dp_->all_reduce(t, ReduceOp::Sum);
    ops::transfer(ctx_, t, host);
    sq = host.data_as<double>()[0];
  }
  return std::sqrt(sq);
}

void AdamW::update(double lr, double norm) {
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

  // Update the part of each parameter that falls in this rank's shard. On one rank the kernel also
  // writes the compute copy (the bf16 weights the CUDA backend computes with) from the value it just
  // updated, rounded as ops::convert rounds: that saves refresh_compute's second pass over every
  // fp32 value (7 ms of a one-row slice step on an H200, bench/results/2026-11-30-slice-v3). With
  // data parallelism the other ranks' shards arrive by the all-gather, so the copies are refreshed after it.
  const bool write_compute = !distributed(dp_);
  const std::vector<int64_t> offsets = params_.flat_offsets();
  const Tensor& values = params_.flat_values();
  const Tensor& grads = params_.flat_grads();
  for (size_t i = 0; i < params_.params().size(); ++i) {
    const Param& p = params_.params()[i];
    if (!p.trainable) continue;
    const int64_t begin = std::max(offsets[i], shard_begin_), end = std::min(offsets[i] + p.value.numel(), shard_end_);
    if (begin >= end) continue;
    s.weight_decay = p.weight_decay ? static_cast<float>(config_.weight_decay) : 0.0f;
    const Shape n{end - begin};
    Tensor compute;
    if (write_compute && p.compute.defined() && p.compute.data() != p.value.data())
      compute = p.compute.view_flat(begin - offsets[i], n);
    ops::adamw_update(ctx_, values.view_flat(begin, n), grads.view_flat(begin, n), m_.view_flat(begin - shard_begin_, n),
                      v_.view_flat(begin - shard_begin_, n), compute, s);
  }
  if (distributed(dp_)) {
    dp_->all_gather(values.view_flat(shard_begin_, {shard_end_ - shard_begin_}), values);
    refresh_compute(params_, ctx_);
  }
}

double AdamW::step(double lr) {
  const double norm = reduce_and_norm();
  update(lr, norm);
  return norm;
}

}  // namespace quill
