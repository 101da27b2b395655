// How one parameter tensor is split over a layout (Megatron's scheme): which dimension tensor
// parallelism splits and this rank's range of it, which routed experts this rank holds (expert
// parallelism), which pipeline stage owns it, and which group reduces its gradients. Pure
// arithmetic on shapes; the model says which rule each of its tensors follows (model/params.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/grid.h"
#include "tensor/tensor.h"

namespace quill {

struct ShardRule {
  // Tensor parallelism: -1 = whole on every rank (replicated); else the dimension split evenly over
  // the tensor-parallel ranks (expert tensor-parallel ranks for routed experts), in whole `unit`s
  // (a head's rows). With gate_up, that dimension holds gate rows [0, F) then up rows [F, 2F) and
  // each half is split alike, so a rank holds matching gate and up rows.
  int tp_dim = -1;
  int64_t unit = 1;
  bool gate_up = false;
  // Dimension 0 indexes routed experts, split evenly over the expert-parallel ranks.
  bool experts = false;
  // A replicated tensor that acts on the sequence region (norms, residual short convolutions, the
  // dense MLP's output scale: parallel/tensor_parallel.h). Without sequence parallelism every
  // tensor-parallel rank computes its whole gradient from the same replicated activations; with it,
  // each rank its chunk's share. Replicated tensors of the split region (per-head norms, the
  // relative-bias tables) and the router (on each rank's own chunk) always get a share.
  bool sequence_region = false;
  int stage = 0;  // the pipeline stage that owns the tensor
};

struct ShardSpec {
  ShardRule rule;
  Shape global_shape, local_shape;
  int64_t tp_begin = 0, tp_end = 0;          // this rank's range of rule.tp_dim (of each half with gate_up)
  int64_t expert_begin = 0, expert_end = 0;  // routed experts held (dimension 0)
  GroupKind reduce_over = GroupKind::DP_CP;  // where its gradients are summed and its optimizer state sharded
  // Whole and equal on every rank of the tensor-parallel group (norms, the router): its gradient is
  // summed over that group once, and the gradient norm counts it on one rank of it.
  bool tp_replicated = true;
  // Replicated, and each tensor-parallel rank computes only its share of the gradient: summed over
  // the tensor-parallel group (once) before the data-parallel reduction.
  bool sum_grad_over_tp = false;
  bool whole() const { return global_shape == local_shape; }
};

// The spec of a tensor of `global` shape under `rule` for the rank at `coords` of a layout of
// `sizes`. Throws naming `name`, the dimension and the flag when the split does not divide.
ShardSpec make_shard_spec(const std::string& name, const Shape& global, const ShardRule& rule, const LayoutSpec& sizes,
                          const GridCoords& coords);

// Whether the rank at `coords` holds the canonical copy of its slice (for checkpoints and exports,
// so that each element is written once): the first data-parallel (and context-parallel) replica;
// of a tensor replicated across tensor-parallel ranks, the first of them; of routed experts, the
// first expert-data-parallel replica. (The pipeline stage is the caller's: only that stage holds it.)
bool canonical_holder(const ShardSpec& spec, const GridCoords& coords);

// This rank's slice as runs of consecutive elements: local[local_offset + i] is
// global[global_offset + i] for i < length (row-major, both flattened). Runs are in local order
// and cover the local tensor exactly once.
struct SliceRun {
  int64_t global_offset, local_offset, length;
};
std::vector<SliceRun> slice_runs(const ShardSpec& spec);

// The same slice seen as rows of the last dimension (what checkpoint readers walk): global row r
// (all leading dimensions flattened, row-major) is local row local_row[r], or -1 when it is not this
// rank's; within a row the rank holds columns [col_begin, col_end).
struct RowMap {
  std::vector<int64_t> local_row;
  int64_t col_begin = 0, col_end = 0;
};
RowMap row_map(const ShardSpec& spec);

}  // namespace quill
