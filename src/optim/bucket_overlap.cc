#include "optim/bucket_overlap.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "base/error.h"
#include "model/param_placement.h"
#include "optim/grad_sync.h"

namespace quill {

BucketOverlap::BucketOverlap(ParamTable& table, const DeviceContext& ctx, const DdpConfig& config)
    : table_(table), ctx_(ctx), config_(config) {
  QUILL_CHECK(table_.placed(), "BucketOverlap: parameters must be placed first");
  const size_t n = table_.buckets().size();
  reduce_.resize(n);
  reduce_started_.assign(n, false);
  gather_.assign(n, Gather::kDone);
  gather_handle_.resize(n);
  forward_order_.resize(n);
  std::iota(forward_order_.begin(), forward_order_.end(), size_t{0});
  std::stable_sort(forward_order_.begin(), forward_order_.end(), [&](size_t a, size_t b) {
    return table_.buckets()[a].first_layer < table_.buckets()[b].first_layer;
  });
}

void BucketOverlap::start_reduce(size_t b) {
  ParamBucket& bucket = table_.buckets()[b];
  // A member no write of the step reached (an expert no token chose) still holds the last step's
  // sums: zeroed now, as settle_grads would after the passes; nothing writes it later in the step.
  settle_grads(table_, ctx_, bucket.members);
  reduce_[b] = start_bucket_reduction(bucket, ctx_);
  reduce_started_[b] = true;
}

void BucketOverlap::grads_written_from(int64_t layer) {
  if (!config_.overlap_grad_reduce || grads_reduced_) return;
  for (size_t b = 0; b < reduce_started_.size(); ++b)
    if (!reduce_started_[b] && table_.buckets()[b].first_layer >= layer) start_reduce(b);
}

void BucketOverlap::passes_done() {
  if (config_.overlap_grad_reduce) finish_grad_reduce();
}

void BucketOverlap::finish_grad_reduce() {
  if (grads_reduced_) return;
  for (size_t b = 0; b < reduce_started_.size(); ++b)
    if (!reduce_started_[b]) start_reduce(b);
  for (size_t b = 0; b < reduce_.size(); ++b) {
    if (reduce_[b]) reduce_[b]->wait();
    reduce_[b].reset();
    reduce_started_[b] = false;
  }
  grads_reduced_ = true;
}

void BucketOverlap::start_gather(size_t b) {
  const ParamBucket& bucket = table_.buckets()[b];
  gather_handle_[b] = bucket.comm->start_all_gather(
      bucket.compute.view_flat(bucket.shard_begin, {bucket.shard_end - bucket.shard_begin}), bucket.compute);
  gather_[b] = Gather::kStarted;
}

void BucketOverlap::wait_gather(size_t b) {
  gather_handle_[b]->wait();
  gather_handle_[b].reset();
  gather_[b] = Gather::kDone;
}

void BucketOverlap::gather_params() {
  grads_reduced_ = false;
  for (size_t b = 0; b < gather_.size(); ++b) {
    if (table_.buckets()[b].comm == nullptr) continue;
    // A transient bucket (model/transient_compute.h) gathers now: its FP8 copies are made from the gathered
    // values at the end of the update, and its bf16 buffer released.
    if (config_.overlap_param_gather && !table_.buckets()[b].compute_transient) {
      gather_[b] = Gather::kOwed;
      gathers_owed_ = true;
    } else {
      start_gather(b);
      wait_gather(b);
    }
  }
}

void BucketOverlap::weights_needed(int64_t layer) {
  if (!gathers_owed_) return;
  bool owed = false;
  for (size_t k = 0; k < forward_order_.size(); ++k) {
    const size_t b = forward_order_[k];
    if (gather_[b] == Gather::kDone) continue;
    if (table_.buckets()[b].first_layer > layer) {
      owed = true;
      continue;
    }
    if (gather_[b] == Gather::kOwed) start_gather(b);
    wait_gather(b);
    // The next bucket's all-gather (forward order, skipping buckets with nothing to gather) runs under
    // this one's layers.
    for (size_t n = k + 1; n < forward_order_.size(); ++n) {
      const size_t next = forward_order_[n];
      if (gather_[next] == Gather::kDone) continue;
      if (gather_[next] == Gather::kOwed) start_gather(next);
      break;
    }
  }
  gathers_owed_ = owed;
}

void BucketOverlap::finish_param_gather() {
  if (!gathers_owed_) return;
  weights_needed(std::numeric_limits<int64_t>::max());
}

}  // namespace quill
