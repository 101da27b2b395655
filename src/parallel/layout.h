// Layout: the one value that says where this rank's work lives. Built once per process from a
// LayoutSpec, the world communicator and the model's layer count; validated before anything is
// loaded; passed by const reference to the model, the optimizer and the trainer. It holds the grid
// (Megatron's rank arithmetic, parallel/grid.h), this rank's coordinates, one owned communicator
// per group kind whose groups have more than one rank (the expert-parallel one split apart, so that
// the token exchange shares no queue with another group: Comm::split_isolated), and the pipeline
// stage split.
//
// With every size 1 (Layout::single()) it holds no communicator and the model is plain
// single-device code.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "comm/comm.h"
#include "parallel/grid.h"
#include "parallel/layout_spec.h"

namespace quill {

// Layers per pipeline stage: --pp-layers when given (checked: one count per stage, adding up to the
// model's layers), else Megatron's even split. Throws naming the flag. (Used by Layout and by the
// memory plan, which needs every stage's split without a communicator.)
std::vector<int64_t> resolve_stage_layers(const LayoutSpec& spec, int64_t num_layers);

class Layout {
 public:
  // Every size 1, no communicators.
  static Layout single(int64_t num_layers);
  // Validates `spec` against world's size (world may be null for a one-rank spec) and the model's
  // `num_layers` (the pipeline split), then splits world into this rank's communicators: a
  // collective call over world, made by every rank with the same spec. Throws quill::Error naming
  // the size or flag that does not work.
  static Layout create(const LayoutSpec& spec, int64_t num_layers, Comm* world);

  Layout(Layout&&) = default;
  Layout& operator=(Layout&&) = default;
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;

  const LayoutSpec& spec() const { return spec_; }
  const Grid& grid() const { return grid_; }
  int rank() const { return rank_; }  // in the world
  const GridCoords& coords() const { return coords_; }
  bool single() const { return spec_.single(); }

  // Ranks in this rank's group of `kind`, and its communicator (null when the group has one rank).
  int size(GroupKind kind) const;
  Comm* comm(GroupKind kind) const;
  Comm* world() const { return world_; }

  // Pipeline: layers per stage, and this rank's stage [first_layer, end_layer).
  const std::vector<int64_t>& stage_layers() const { return stage_layers_; }
  int64_t first_layer() const { return first_layer_; }
  int64_t end_layer() const { return end_layer_; }
  bool first_stage() const { return coords_.pp == 0; }
  bool last_stage() const { return coords_.pp == spec_.pp - 1; }

 private:
  Layout(const LayoutSpec& spec, int64_t num_layers, int world_size, int rank);

  LayoutSpec spec_;
  Grid grid_;
  int rank_ = 0;
  GridCoords coords_;
  Comm* world_ = nullptr;
  std::map<GroupKind, std::unique_ptr<Comm>> comms_;
  std::vector<int64_t> stage_layers_;
  int64_t first_layer_ = 0, end_layer_ = 0;
};

}  // namespace quill
