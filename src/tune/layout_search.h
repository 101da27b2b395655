// The layouts `quill tune` considers for a model on a number of GPUs, and which of them fit
// (docs/tune.md). Every layout quill can run that divides the model and the GPU count is examined;
// each one the memory plan (plan/memory_plan.h) says cannot fit, or that quill refuses, is counted
// under its reason. What is pruned, and why, is listed in SearchResult::pruning.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/recompute.h"
#include "optim/optimizer_memory.h"
#include "parallel/layout_spec.h"

namespace quill::tune {

struct SearchRequest {
  InklingConfig config;
  int gpus = 1;
  int gpus_per_node = 8;
  int64_t row_tokens = 0;    // one row per micro-batch
  int64_t global_batch = 1;  // rows per optimizer step
  int64_t device_memory = 0; // bytes a GPU offers (plan::kH200MemoryBytes for an H200)
  // Bytes a node's host offers (0: not checked): a candidate's ranks of each node must fit it at startup
  // as quill train checks it (plan::check_host_fit), at the offload fraction the search picked.
  int64_t host_memory = 0;
  Device device = Device::CUDA;  // what the ranks compute on (the plan's dtypes)
  bool cross_node_ep = false;        // expert-parallel groups may span nodes
  // Uneven pipeline splits whose first or last stage differs from the middle stages by more layers are
  // not examined (a stage that much larger bounds the step; the even split always is).
  int64_t max_split_imbalance = 3;
  std::vector<std::string> freeze;   // frozen parameter patterns, as quill plan takes them
  bool show_progress = false;        // a progress line on stderr when the search takes more than a few seconds
};

// One fitting layout: its flags and its memory plan's figures.
struct Candidate {
  LayoutSpec layout;
  OptimizerMemory optimizer;
  // Full-layer recompute in place of offload (block N without offload), else none.
  RecomputeOptions recompute;
  std::string split;                       // "even", "first/last F/L" (Megatron's uneven split flags)
  std::vector<int64_t> stage_device_bytes; // the plan's device total per pipeline stage
  std::vector<int64_t> stage_allocator_peak_bytes;  // of it, the allocator's peak (what a run's summary.json measures)
  std::vector<std::string> stage_roles;    // "whole model", "first", "middle", "last"
  int64_t peak_device_bytes() const;       // the largest stage's
};

// Megatron's name of the recompute's method: "block" | "uniform".
const char* recompute_method_name(const RecomputeOptions& recompute);
// Megatron's flags for it, word by word (none when inactive): --recompute-granularity full
// --recompute-method M --recompute-num-layers N, as quill train and a recipe's run take them.
std::vector<std::string> recompute_flags(const RecomputeOptions& recompute);

struct Refusal {
  int64_t count = 0;
  std::string example;  // one layout refused for this reason, with the plan's or the check's message
};

struct SearchResult {
  std::vector<Candidate> fitting;
  std::map<std::string, Refusal> refused;  // by reason
  int64_t geometries = 0;                  // (tp, sp, pp, split, ep, dp) combinations examined
  int64_t plans = 0;                       // memory plans computed
  std::vector<std::string> pruning;        // what the search does not enumerate, and why
};

// The pipeline splits of `layers` over `pp` stages that Megatron's flags express: the even split when
// `layers` divides, and every (first, last) pair whose remaining layers divide evenly over the middle
// stages (--decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers), each stage at
// least one layer. Each split is the per-stage layer counts.
// With max_imbalance >= 0, only splits whose first and last stages are within that many layers of
// the middle stages' count (pp > 2) or of each other (pp == 2).
std::vector<std::vector<int64_t>> megatron_splits(int64_t layers, int pp, int64_t max_imbalance = -1);

SearchResult search_layouts(const SearchRequest& request);

}  // namespace quill::tune
