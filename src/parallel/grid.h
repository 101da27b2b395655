// Grid: which ranks form each parallel group, as pure rank arithmetic (no MPI, no CUDA).
//
// Semantics are Megatron-Core's (`parallel_state.RankGenerator`): ranks are laid out as a
// mixed-radix number over the axes of an order string, the first axis varying fastest
// ("tp-cp-ep-dp-pp": neighbouring ranks share a tensor-parallel group, pipeline stages are
// world/pp apart). A group of a set of axes holds the ranks that agree on every other axis.
//
// Two layouts share the same ranks:
//   dense layers   axes of `order` without ep, sizes tp, cp, dp, pp;  world = tp*cp*dp*pp
//   expert layers  axes of `order` without cp, with tp := etp, ep, dp := edp, pp;
//                  edp = world / (etp*ep*pp)  (the expert data-parallel size, derived)
// Pipeline stages coincide in both layouts (checked), so an expert layer lives on the same
// ranks as the dense layer beside it. Groups are sorted rank lists; a rank's index in its
// tp/cp/dp/pp/ep/etp/edp group is its coordinate on that axis.
#pragma once

#include <string>
#include <vector>

#include "parallel/layout_spec.h"

namespace quill {


enum class GroupKind {
  // dense layers
  TP,        // tensor parallel
  CP,        // context parallel
  DP,        // data parallel (without cp)
  PP,        // pipeline stages
  TP_CP,     // tensor x context
  DP_CP,     // data x context: where dense gradients are reduced and the optimizer is sharded
  TP_DP,     // tensor x data
  TP_DP_CP,  // tensor x data x context
  MP,        // model parallel: tensor x pipeline (Megatron's "tp-pp", no cp)
  // expert layers
  EP,         // expert parallel: the all-to-all of the token dispatcher
  ETP,        // expert tensor parallel
  EDP,        // expert data parallel: where expert gradients are reduced
  ETP_EP,     // expert tensor x expert parallel
  ETP_EP_PP,  // expert model parallel: etp x ep x pp
};

// "tp", "dp-cp", "etp-ep", ... (used in messages and as communicator names).
const char* group_kind_name(GroupKind kind);
std::vector<GroupKind> all_group_kinds();

// One rank's group of one kind.
struct RankGroup {
  std::vector<int> ranks;  // sorted ascending
  int index = 0;           // this rank's position in `ranks`
  int size() const { return static_cast<int>(ranks.size()); }
};

// A rank's coordinate on each axis (its index in the group of that axis).
struct GridCoords {
  int tp = 0, cp = 0, dp = 0, pp = 0;
  int ep = 0, etp = 0, edp = 0;
};

class Grid {
 public:
  // Validates `sizes` against `world`; throws quill::Error naming the violated rule.
  Grid(int world, LayoutSpec sizes);

  int world() const { return world_; }
  const LayoutSpec& sizes() const { return sizes_; }
  int edp() const { return edp_; }
  // Axis names of each layout, fastest first, as used for the arithmetic ("tp-cp-dp-pp").
  std::string dense_order() const;
  std::string expert_order() const;

  // Every group of `kind`, in Megatron's creation order (ascending first rank).
  std::vector<std::vector<int>> groups(GroupKind kind) const;
  // The group of `kind` that `rank` belongs to.
  RankGroup group(GroupKind kind, int rank) const;
  GridCoords coords(int rank) const;

  std::string describe() const;  // "world 32: tp 4 cp 1 dp 2 pp 4 | ep 8 etp 1 edp 1 | order tp-cp-ep-dp-pp"

  // Mixed-radix axes of one layout; public for tests and tools, not needed by callers.
  struct Axes {
    std::vector<std::string> names;  // fastest first
    std::vector<int> sizes;
  };

 private:
  const Axes& axes_for(GroupKind kind) const;

  int world_;
  LayoutSpec sizes_;
  int edp_ = 1;
  Axes dense_, expert_;
};

}  // namespace quill
