// The ranking of `quill tune` (docs/tune.md): each fitting layout of the search (tune/layout_search.h)
// projected as plan/projection.h projects simulated ranks, with one modelled rank per pipeline stage in
// place of a measured one: its collective rows from tune/ledger_model.h (exact bytes, balanced routing)
// and its compute from tune/compute_model.h (modelled rates). Ranked by projected tokens/s/GPU.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "plan/comm_model.h"
#include "plan/projection.h"
#include "tune/compute_model.h"
#include "tune/layout_search.h"

namespace quill::tune {

struct RankRequest {
  InklingConfig config;
  int64_t row_tokens = 0, global_batch = 1;
  Device device = Device::CUDA;
  std::vector<std::string> freeze;
  plan::CommModelParams comm;  // its gpus_per_node places the ranks
  ComputeRates rates;
  std::optional<double> price_per_gpu_hour;
  double peak_flops = 989e12;  // the MFU's denominator (recipe/metrics.h)
};

struct RankedLayout {
  Candidate candidate;
  plan::Projection projection;
  double step_s = 0, tokens_per_s_per_gpu = 0, mfu = 0;
  std::optional<double> usd_per_million_tokens;
  std::string bound;             // the largest part of the step: an op kind or a collective, with its seconds
  double bound_s = 0;
  std::vector<RankCompute> stage_compute;  // per stage, its representative rank's
};

// The projection of one candidate.
RankedLayout project_candidate(const Candidate& candidate, const RankRequest& request);

// Every candidate projected, best first (tokens/s/GPU, then the smaller peak memory).
std::vector<RankedLayout> rank_layouts(const std::vector<Candidate>& candidates, const RankRequest& request);

// Do the layout's expert-parallel groups each sit inside one node of gpus_per_node consecutive ranks?
bool expert_groups_inside_nodes(const LayoutSpec& spec, int gpus_per_node);

}  // namespace quill::tune
