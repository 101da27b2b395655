#include "tune/rank_layouts.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "base/error.h"
#include "base/progress.h"
#include "model/config.h"
#include "tune/ledger_model.h"

namespace quill::tune {

bool expert_groups_inside_nodes(const LayoutSpec& spec, int gpus_per_node) {
  if (spec.ep == 1) return true;
  for (int r = 0; r < spec.world(); ++r) {
    const auto groups = rank_groups(spec, r);
    const auto ep = groups.find("ep");
    if (ep == groups.end()) continue;
    for (int q : ep->second)
      if (q / gpus_per_node != r / gpus_per_node) return false;
  }
  return true;
}

namespace {

// A stage's role: 0 first (the embedding), 1 middle, 2 last (the head); one stage is the first.
int stage_role(int stage, int pp) { return stage == 0 ? 0 : stage == pp - 1 ? 2 : 1; }

// The compute figures stage s uses: its measurement, a same-role measurement's ratios, or the model's.
StageComputeSource source_of(int s, const LayoutSpec& spec, const RankCompute& modelled,
                             const std::vector<MeasuredStage>& measured, const std::vector<RankCompute>& all_modelled) {
  StageComputeSource out;
  out.modelled_passes_per_micro_batch_s = modelled.forward_s + modelled.backward_s;
  out.modelled_optimizer_s = modelled.optimizer_s;
  out.passes_per_micro_batch_s = out.modelled_passes_per_micro_batch_s;
  out.optimizer_s = out.modelled_optimizer_s;
  const MeasuredStage* same_role = nullptr;
  for (const MeasuredStage& m : measured) {
    if (m.stage == s) {
      out.source = "measured", out.from_stage = s;
      out.passes_per_micro_batch_s = m.passes_per_micro_batch_s;
      out.optimizer_s = m.optimizer_s;
      return out;
    }
    if (stage_role(m.stage, spec.pp) == stage_role(s, spec.pp) && (!same_role || std::abs(m.stage - s) < std::abs(same_role->stage - s)))
      same_role = &m;
  }
  if (!same_role) return out;
  const RankCompute& ref = all_modelled[static_cast<size_t>(same_role->stage)];
  const double ref_passes = ref.forward_s + ref.backward_s;
  out.source = "scaled", out.from_stage = same_role->stage;
  if (ref_passes > 0) out.passes_per_micro_batch_s *= same_role->passes_per_micro_batch_s / ref_passes;
  if (ref.optimizer_s > 0) out.optimizer_s *= same_role->optimizer_s / ref.optimizer_s;
  return out;
}

}  // namespace

bool RankedLayout::measured() const {
  for (const StageComputeSource& s : compute_sources)
    if (s.source != "modelled") return true;
  return false;
}

std::vector<int> stages_to_measure(const LayoutSpec& spec) {
  if (spec.pp == 1) return {0};
  if (spec.pp == 2) return {0, 1};
  return {0, 1, spec.pp - 1};
}

bool ranks_before(const RankedLayout& a, const RankedLayout& b) {
  if (a.tokens_per_s_per_gpu != b.tokens_per_s_per_gpu) return a.tokens_per_s_per_gpu > b.tokens_per_s_per_gpu;
  return a.candidate.peak_device_bytes() < b.candidate.peak_device_bytes();
}

RankedLayout project_candidate(const Candidate& cand, const RankRequest& q, const std::vector<MeasuredStage>& measured) {
  const LayoutSpec& spec = cand.layout;
  LedgerWorkload w;
  w.row_tokens = q.row_tokens;
  w.global_batch = q.global_batch;
  w.device = q.device;
  w.freeze = q.freeze;
  w.recompute = cand.recompute;  // the recomputed forward's collectives
  const int64_t m = q.global_batch / spec.dp;
  RankedLayout out;
  out.candidate = cand;
  plan::ProjectionRequest pr;
  pr.spec = spec;
  pr.micro_batches = m;
  pr.comm = q.comm;
  for (const MeasuredStage& x : measured)
    QUILL_CHECK(x.stage >= 0 && x.stage < spec.pp && x.rank == stage_rank(spec, x.stage),
                "{}: a measurement of stage {} rank {}, but the projection's rank of that stage is {}", spec.describe(),
                x.stage, x.rank, x.stage >= 0 && x.stage < spec.pp ? stage_rank(spec, x.stage) : -1);
  for (int s = 0; s < spec.pp; ++s)
    out.stage_compute.push_back(
        rank_compute(q.config, spec, stage_rank(spec, s), w, cand.optimizer, q.rates, cand.recompute));
  for (int s = 0; s < spec.pp; ++s) {
    const int rank = stage_rank(spec, s);
    const RankCompute& c = out.stage_compute[static_cast<size_t>(s)];
    const StageComputeSource src = source_of(s, spec, c, measured, out.stage_compute);
    plan::RankMeasurement r;
    r.rank = rank;
    r.stage = s;
    r.micro_batches = m;
    r.passes_s = static_cast<double>(m) * src.passes_per_micro_batch_s;
    r.rest_s = src.optimizer_s;
    // The split of a pass into forward and backward is the model's (a run measures their sum).
    r.backward_share = c.backward_s / (c.forward_s + c.backward_s);
    r.rows = modelled_ledger(q.config, spec, rank, w);
    r.steps = 1;
    r.groups = rank_groups(spec, rank);
    pr.ranks.push_back(std::move(r));
    out.compute_sources.push_back(src);
  }
  out.projection = plan::project_step(pr);
  out.step_s = out.projection.step_s;
  const double tokens = static_cast<double>(q.global_batch * q.row_tokens);
  out.tokens_per_s_per_gpu = tokens / out.step_s / static_cast<double>(spec.world());
  out.mfu = 6.0 * static_cast<double>(count_params(q.config).active) * out.tokens_per_s_per_gpu / q.peak_flops;
  if (q.price_per_gpu_hour) out.usd_per_million_tokens = *q.price_per_gpu_hour / (out.tokens_per_s_per_gpu * 3600) * 1e6;

  // What bounds the step: the largest of the slowest stage's compute parts, any stage's collective group,
  // and the pipeline's fill, drain and waits.
  size_t slowest = 0;
  for (size_t s = 0; s < out.projection.stages.size(); ++s)
    if (out.projection.stages[s].pipeline_end_s > out.projection.stages[slowest].pipeline_end_s) slowest = s;
  auto consider = [&](const std::string& what, double seconds) {
    if (seconds > out.bound_s) out.bound_s = seconds, out.bound = what;
  };
  const StageComputeSource& src = out.compute_sources[slowest];
  if (src.source == "modelled") {
    for (const RankCompute::Part& p : out.stage_compute[slowest].parts)
      consider(fmt::format("{} (stage {})", p.what, slowest), p.seconds);
  } else {  // a measurement has no parts by op kind: the passes and the optimizer step
    consider(fmt::format("compute of the passes ({}, stage {})", src.source, slowest),
             static_cast<double>(m) * src.passes_per_micro_batch_s);
    consider(fmt::format("optimizer step ({}, stage {})", src.source, slowest), src.optimizer_s);
  }
  for (const plan::StageProjection& sp : out.projection.stages)
    for (const plan::GroupTime& g : sp.groups)
      consider(fmt::format("{} {} over {} ({}{})", g.phase == "passes" ? "passes" : "optimizer", g.op, g.group,
                           g.group_size, g.inter_node ? ", across nodes" : ""),
               g.seconds);
  consider("pipeline fill, drain and waits", out.projection.bubble_s);
  return out;
}

std::vector<RankedLayout> rank_layouts(const std::vector<Candidate>& candidates, const RankRequest& q) {
  std::vector<RankedLayout> out;
  out.reserve(candidates.size());
  Progress progress("quill tune: projecting layouts", ProgressOptions::counting(q.show_progress, "layouts"));
  for (const Candidate& c : candidates) {
    out.push_back(project_candidate(c, q));
    progress.update(static_cast<int64_t>(out.size()), static_cast<int64_t>(candidates.size()));
  }
  progress.finish();
  std::stable_sort(out.begin(), out.end(), ranks_before);
  return out;
}

}  // namespace quill::tune
