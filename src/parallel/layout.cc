#include "parallel/layout.h"

#include <numeric>

#include "base/error.h"
#include "parallel/stage_split.h"

namespace quill {

namespace {

// The groups a training run talks over: tensor, context, data (and data x context, where dense
// gradients are reduced), pipeline, expert, expert-tensor and expert-data parallel.
const GroupKind kCommKinds[] = {GroupKind::TP, GroupKind::CP,  GroupKind::DP,  GroupKind::DP_CP,
                                GroupKind::PP, GroupKind::EP,  GroupKind::ETP, GroupKind::EDP};

}  // namespace

std::vector<int64_t> resolve_stage_layers(const LayoutSpec& spec, int64_t num_layers) {
  if (!spec.pp_layers.empty()) {
    LayoutSpec checked = spec;
    check_layout_flags(checked);
    const int64_t total = std::accumulate(spec.pp_layers.begin(), spec.pp_layers.end(), int64_t{0});
    QUILL_CHECK(total == num_layers, "--pp-layers adds up to {} layers, the model has {}", total, num_layers);
    return spec.pp_layers;
  }
  const StageSplit split = split_layers(num_layers, spec.pp, std::nullopt, std::nullopt);
  QUILL_CHECK(split.error.empty(), "--pipeline-model-parallel-size {}: {} (give --pp-layers)", spec.pp, split.error);
  return split.layers;
}

Layout::Layout(const LayoutSpec& spec, int64_t num_layers, int world_size, int rank)
    : spec_(spec), grid_(world_size, spec), rank_(rank), coords_(grid_.coords(rank)) {
  stage_layers_ = resolve_stage_layers(spec, num_layers);
  for (int s = 0; s < coords_.pp; ++s) first_layer_ += stage_layers_[static_cast<size_t>(s)];
  end_layer_ = first_layer_ + stage_layers_[static_cast<size_t>(coords_.pp)];
}

Layout Layout::single(int64_t num_layers) { return Layout(LayoutSpec{}, num_layers, 1, 0); }

Layout Layout::create(const LayoutSpec& spec, int64_t num_layers, Comm* world) {
  const int world_size = world ? world->size() : 1;
  QUILL_CHECK(spec.world() == world_size,
              "the layout needs tp x cp x dp x pp = {} x {} x {} x {} = {} ranks, but the launcher started {} (mpirun -np {})",
              spec.tp, spec.cp, spec.dp, spec.pp, spec.world(), world_size, spec.world());
  Layout layout(spec, num_layers, world_size, world ? world->rank() : 0);
  layout.world_ = world;
  // Every rank splits every kind in the same order (a collective over world); kinds whose groups
  // have one rank (the same for every rank of a grid) are skipped by all alike.
  for (GroupKind kind : kCommKinds) {
    const RankGroup g = layout.grid_.group(kind, layout.rank_);
    if (g.size() == 1) continue;
    // The experts' token exchange queues apart from every other group's collectives (on a GPU its
    // own NCCL communicator and stream), so that it never waits behind, nor holds up, the gradients'
    // reduce-scatter (docs/decisions/expert-exchange-stream.md).
    layout.comms_[kind] = kind == GroupKind::EP ? world->split_isolated(g.ranks, group_kind_name(kind))
                                                : world->split(g.ranks, group_kind_name(kind));
  }
  return layout;
}

int Layout::size(GroupKind kind) const { return grid_.group(kind, rank_).size(); }

Comm* Layout::comm(GroupKind kind) const {
  auto it = comms_.find(kind);
  return it == comms_.end() ? nullptr : it->second.get();
}

}  // namespace quill
