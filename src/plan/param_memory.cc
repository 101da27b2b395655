#include "plan/param_memory.h"

#include <algorithm>
#include <map>

#include "model/fp8_params.h"
#include "model/bucket_split.h"
#include "model/param_placement.h"
#include "model/params.h"
#include "model/transient_compute.h"
#include "ops/fp8.h"
#include "parallel/shard_spec.h"

namespace quill::plan {

int64_t RankParams::compute_bytes() const {
  int64_t n = frozen_value_bytes + frozen_compute_bytes + fp8_copy_bytes;
  for (const BucketBytes& b : buckets)
    if (!b.compute_transient) n += b.numel * static_cast<int64_t>(dtype_size(b.compute));
  return n;
}

int64_t RankParams::transient_compute_bytes() const {
  int64_t n = frozen_transient_bytes;
  for (const BucketBytes& b : buckets)
    if (b.compute_transient) n += b.numel * static_cast<int64_t>(dtype_size(b.compute));
  return n;
}

int64_t RankParams::grad_bytes(DType main_grads) const {
  int64_t n = 0;
  for (const BucketBytes& b : buckets) n += b.numel * static_cast<int64_t>(dtype_size(main_grads));
  return n;
}

RankParams rank_params(const InklingConfig& config, const Grid& grid, int rank, const std::vector<int64_t>& stage_layers,
                       Device device, const std::vector<std::string>& freeze, bool fp8, int64_t bucket_size) {
  const GridCoords coords = grid.coords(rank);
  const LayoutSpec& sizes = grid.sizes();
  RankParams out;
  // Each kind's trainable tensors (shape and layer), cut into buckets below as place_params cuts them.
  std::vector<std::vector<Param>> kinds;
  // Per layer, its trained FP8 attention projections q, k, v, r in that order: their joined copy when they stack.
  std::map<int64_t, std::vector<Param>> projections;
  for (ParamDecl& d : param_decls(config)) {
    // The stage that owns the tensor, as ParamTable::for_config decides it.
    int stage = 0;
    for (int64_t end = 0; stage < sizes.pp; ++stage) {
      end += stage_layers[static_cast<size_t>(stage)];
      if (d.layer < end) break;
    }
    if (stage != coords.pp) continue;
    d.rule.stage = stage;
    Param p;
    p.name = d.name;
    p.shard = make_shard_spec(d.name, d.shape, d.rule, sizes, coords);
    p.shape = p.shard.local_shape;
    p.layer = d.layer;
    const int64_t n = shape_numel(p.shape);
    out.elements += n;
    p.fp8 = fp8 && runs_in_fp8(d.name);
    if (p.fp8) out.fp8_copy_bytes += ops::fp8_weight_copy_bytes(p.shape, device);
    const bool bf16 = device == Device::CUDA && computes_in_bf16(p);
    const bool transient = has_transient_compute(p, device);
    if (p.shape.size() >= 2 && bf16) out.largest_matrix = std::max(out.largest_matrix, n);
    if (device == Device::CPU && p.shape.size() == 2) out.largest_matrix = std::max(out.largest_matrix, n);
    bool frozen = d.is_buffer;
    for (const std::string& pattern : freeze) frozen = frozen || name_matches(d.name, pattern);
    if (frozen) {
      out.frozen_value_bytes += n * 4;
      if (bf16) (transient ? out.frozen_transient_bytes : out.frozen_compute_bytes) += n * 2;
      continue;
    }
    out.trainable_elements += n;
    if (p.fp8 && d.name.find(".attn.w") != std::string::npos && d.name.find(".attn.wo_ud.") == std::string::npos)
      projections[p.layer].push_back(p);
    // The kind, as place_params groups them.
    const char* group = group_kind_name(p.shard.reduce_over);
    const DType dtype = bf16 ? DType::BF16 : DType::F32;
    const bool replicated = p.shard.tp_replicated && sizes.tp > 1, sum_over_tp = p.shard.sum_grad_over_tp;
    auto it = std::find_if(out.buckets.begin(), out.buckets.end(), [&](const BucketBytes& b) {
      return b.group == group && b.compute == dtype && b.tp_replicated == replicated && b.sum_over_tp == sum_over_tp &&
             b.compute_transient == transient;
    });
    if (it == out.buckets.end()) {
      BucketBytes b;
      b.group = group;
      b.compute = dtype;
      b.tp_replicated = replicated;
      b.sum_over_tp = sum_over_tp;
      b.compute_transient = transient;
      b.group_size = grid.group(p.shard.reduce_over, rank).size();
      out.buckets.push_back(b);
      kinds.emplace_back();
      it = out.buckets.end() - 1;
    }
    // Only what the cut reads (shape and layer): whole Params (name, shard spec) copied for every rank of every
    // layout `quill tune` plans showed in its profile (about 6% of the search's samples).
    Param member;
    member.shape = p.shape;
    member.layer = p.layer;
    kinds[static_cast<size_t>(it - out.buckets.begin())].push_back(std::move(member));
  }
  // The attention blocks' stacked FP8 copies (model/attention_block.h: stacked_fp8), beside the four.
  for (const auto& [layer, parts] : projections) {
    std::vector<const Param*> ptrs;
    int64_t rows = 0;
    for (const Param& q : parts) ptrs.push_back(&q), rows += q.shape[0];
    if (ptrs.size() == 4 && StackedFp8Copy::stacks(ptrs))
      out.fp8_copy_bytes += ops::fp8_weight_copy_bytes({rows, ptrs[0]->shape[1]}, device);
  }
  const int64_t elements = bucket_size > 0 ? bucket_size : default_bucket_elements(sizes.dp);
  std::vector<BucketBytes> buckets;
  for (size_t k = 0; k < kinds.size(); ++k) {
    std::vector<size_t> members(kinds[k].size());
    for (size_t i = 0; i < members.size(); ++i) members[i] = i;
    for (const std::vector<size_t>& bucket : split_bucket_by_layers(kinds[k], members, elements)) {
      BucketBytes b = out.buckets[k];
      for (size_t i : bucket) b.numel += shape_numel(kinds[k][i].shape);
      b.numel = (b.numel + b.group_size - 1) / b.group_size * b.group_size;
      buckets.push_back(b);
    }
  }
  out.buckets = std::move(buckets);
  return out;
}

}  // namespace quill::plan
