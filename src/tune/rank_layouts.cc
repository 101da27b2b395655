#include "tune/rank_layouts.h"

#include <fmt/format.h>

#include <algorithm>

#include "base/error.h"
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

RankedLayout project_candidate(const Candidate& cand, const RankRequest& q) {
  const LayoutSpec& spec = cand.layout;
  LedgerWorkload w;
  w.row_tokens = q.row_tokens;
  w.global_batch = q.global_batch;
  w.device = q.device;
  w.freeze = q.freeze;
  const int64_t m = q.global_batch / spec.dp;
  RankedLayout out;
  out.candidate = cand;
  plan::ProjectionRequest pr;
  pr.spec = spec;
  pr.micro_batches = m;
  pr.comm = q.comm;
  for (int s = 0; s < spec.pp; ++s) {
    const int rank = stage_rank(spec, s);
    const RankCompute c = rank_compute(q.config, spec, rank, w, cand.optimizer, q.rates);
    plan::RankMeasurement r;
    r.rank = rank;
    r.stage = s;
    r.micro_batches = m;
    r.passes_s = static_cast<double>(m) * (c.forward_s + c.backward_s);
    r.rest_s = c.optimizer_s;
    r.backward_share = c.backward_s / (c.forward_s + c.backward_s);
    r.rows = modelled_ledger(q.config, spec, rank, w);
    r.steps = 1;
    r.groups = rank_groups(spec, rank);
    pr.ranks.push_back(std::move(r));
    out.stage_compute.push_back(c);
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
  for (const RankCompute::Part& p : out.stage_compute[slowest].parts)
    consider(fmt::format("{} (stage {})", p.what, slowest), p.seconds);
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
  for (const Candidate& c : candidates) out.push_back(project_candidate(c, q));
  std::stable_sort(out.begin(), out.end(), [](const RankedLayout& a, const RankedLayout& b) {
    if (a.tokens_per_s_per_gpu != b.tokens_per_s_per_gpu) return a.tokens_per_s_per_gpu > b.tokens_per_s_per_gpu;
    return a.candidate.peak_device_bytes() < b.candidate.peak_device_bytes();
  });
  return out;
}

}  // namespace quill::tune
