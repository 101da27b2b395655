// The ranking of `quill tune` (docs/tune.md): each fitting layout of the search (tune/layout_search.h)
// projected as plan/projection.h projects simulated ranks, with one modelled rank per pipeline stage in
// place of a measured one: its collective rows from tune/ledger_model.h (exact bytes, balanced routing)
// and its compute from tune/compute_model.h (modelled rates), or, for `quill tune --measure`, from the
// measured runs of some of its stages (cli/tune_measure.h). Ranked by projected tokens/s/GPU.
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
  bool show_progress = false;  // rank_layouts: a progress line on stderr when it takes more than a few seconds
};

// A stage's compute measured by `quill train --simulate-rank` of its representative rank (stage_rank).
struct MeasuredStage {
  int stage = 0, rank = 0;
  double passes_per_micro_batch_s = 0;  // the forward and backward passes, per micro-batch
  double optimizer_s = 0;               // per step: the rest of the step (the optimizer phase's compute)
};

// Where the compute figures of one stage of a projection come from.
struct StageComputeSource {
  // "modelled" (tune/compute_model.h); "measured" (its own MeasuredStage); "scaled": the modelled figures
  // times the measured / modelled ratios of `from_stage`, a measured stage of the same role (first, middle,
  // last): the middle stages a measurement does not run.
  std::string source = "modelled";
  int from_stage = -1;  // measured: this stage; scaled: the measured one
  double modelled_passes_per_micro_batch_s = 0, modelled_optimizer_s = 0;
  double passes_per_micro_batch_s = 0, optimizer_s = 0;  // what the projection used
};

struct RankedLayout {
  Candidate candidate;
  plan::Projection projection;
  double step_s = 0, tokens_per_s_per_gpu = 0, mfu = 0;
  std::optional<double> usd_per_million_tokens;
  std::string bound;             // the largest part of the step: an op kind or a collective, with its seconds
  double bound_s = 0;
  std::vector<RankCompute> stage_compute;  // per stage, its representative rank's (modelled)
  std::vector<StageComputeSource> compute_sources;  // per stage
  bool measured() const;  // some stage's compute is measured
};

// The projection of one candidate: its modelled compute, or for the stages in `measured` (at most one
// each, for the rank stage_rank gives) the measured figures, and for the other stages of a measured
// stage's role the modelled figures scaled by its ratios. The collective rows are modelled in both cases.
RankedLayout project_candidate(const Candidate& candidate, const RankRequest& request,
                               const std::vector<MeasuredStage>& measured = {});

// The stages a measurement runs, one of each role: {0} (pp 1), {0, 1} (pp 2), {0, 1, pp - 1}.
std::vector<int> stages_to_measure(const LayoutSpec& spec);

// The ranking's order: more tokens/s/GPU first, then the smaller peak memory.
bool ranks_before(const RankedLayout& a, const RankedLayout& b);

// Every candidate projected, best first (tokens/s/GPU, then the smaller peak memory).
std::vector<RankedLayout> rank_layouts(const std::vector<Candidate>& candidates, const RankRequest& request);

// Do the layout's expert-parallel groups each sit inside one node of gpus_per_node consecutive ranks?
bool expert_groups_inside_nodes(const LayoutSpec& spec, int gpus_per_node);

}  // namespace quill::tune
