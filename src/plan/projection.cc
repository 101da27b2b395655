#include "plan/projection.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "base/error.h"

namespace quill::plan {

namespace {

// A stage's role for borrowing: the first holds the embedding, the last the head and loss.
int role(int stage, int pp) { return stage == 0 ? 0 : stage == pp - 1 ? 2 : 1; }

// The measured rank whose figures stage s uses: its own, else one of the same role (nearest index),
// else the nearest stage.
const RankMeasurement& source_for(int s, int pp, const std::vector<RankMeasurement>& ranks) {
  const RankMeasurement* best = nullptr;
  auto better = [&](const RankMeasurement& r) {
    if (!best) return true;
    const bool same_role = role(r.stage, pp) == role(s, pp), best_same = role(best->stage, pp) == role(s, pp);
    if (same_role != best_same) return same_role;
    return std::abs(r.stage - s) < std::abs(best->stage - s);
  };
  for (const RankMeasurement& r : ranks) {
    if (r.stage == s) return r;
    if (better(r)) best = &r;
  }
  return *best;
}

int64_t messages_of(const CollectiveRow& r) {
  if (r.op == "send_recv") return 2 * r.calls;
  return r.op == "send" || r.op == "recv" ? r.calls : 0;
}

}  // namespace

std::vector<double> replay_pipeline(const PipeSchedule& sch, const std::vector<double>& fwd, const std::vector<double>& bwd,
                                    const std::vector<double>& msg) {
  const int S = sch.stages;
  QUILL_CHECK(static_cast<int>(fwd.size()) == S && static_cast<int>(bwd.size()) == S &&
                  static_cast<int>(msg.size()) == std::max(0, S - 1),
              "pipeline replay: {} stages, but {} forward, {} backward and {} message times", S, fwd.size(), bwd.size(),
              msg.size());
  std::vector<size_t> at(static_cast<size_t>(S), 0);
  std::vector<double> clock(static_cast<size_t>(S), 0.0);
  // Per stage, for the messages of its current exchange: the time each completed (< 0: not yet).
  std::vector<std::vector<double>> done(static_cast<size_t>(S));
  auto current = [&](int s) -> const PipeAction* {
    const auto& acts = sch.actions[static_cast<size_t>(s)];
    return at[static_cast<size_t>(s)] < acts.size() ? &acts[at[static_cast<size_t>(s)]] : nullptr;
  };
  auto arrive = [&](int s) {
    if (const PipeAction* a = current(s)) done[static_cast<size_t>(s)].assign(a->exchange.messages.size(), -1.0);
  };
  for (int s = 0; s < S; ++s) arrive(s);
  while (true) {
    bool finished = true, moved = false;
    // Passes run at once; an exchange's message meets its complement when both stages are at them.
    for (int s = 0; s < S; ++s) {
      const PipeAction* a = current(s);
      if (!a) continue;
      finished = false;
      if (a->is_pass) {
        clock[static_cast<size_t>(s)] += a->step.pass == PipePass::Forward ? fwd[static_cast<size_t>(s)] : bwd[static_cast<size_t>(s)];
        ++at[static_cast<size_t>(s)];
        arrive(s);
        moved = true;
        continue;
      }
      for (size_t i = 0; i < a->exchange.messages.size(); ++i) {
        if (done[static_cast<size_t>(s)][i] >= 0) continue;
        const PipeMessage& m = a->exchange.messages[i];
        const PipeAction* p = current(m.peer);
        if (!p || p->is_pass) continue;
        const PipeMessage want{!m.send, m.kind, m.micro, s};
        const auto& pm = p->exchange.messages;
        const size_t j = static_cast<size_t>(std::find(pm.begin(), pm.end(), want) - pm.begin());
        if (j == pm.size() || done[static_cast<size_t>(m.peer)][j] >= 0) continue;
        const double t = std::max(clock[static_cast<size_t>(s)], clock[static_cast<size_t>(m.peer)]) +
                         msg[static_cast<size_t>(std::min(s, m.peer))];
        done[static_cast<size_t>(s)][i] = done[static_cast<size_t>(m.peer)][j] = t;
        moved = true;
      }
    }
    // An exchange ends when all its messages have (a fused send and receive: the later of the two).
    for (int s = 0; s < S; ++s) {
      const PipeAction* a = current(s);
      if (!a || a->is_pass) continue;
      const auto& d = done[static_cast<size_t>(s)];
      if (std::any_of(d.begin(), d.end(), [](double t) { return t < 0; })) continue;
      clock[static_cast<size_t>(s)] = std::max(clock[static_cast<size_t>(s)], *std::max_element(d.begin(), d.end()));
      ++at[static_cast<size_t>(s)];
      arrive(s);
      moved = true;
    }
    if (finished) break;
    QUILL_CHECK(moved, "pipeline replay: no stage can move (the schedule deadlocks)");
  }
  return clock;
}

Projection project_step(const ProjectionRequest& q) {
  const int pp = q.spec.pp;
  QUILL_CHECK(!q.ranks.empty(), "projection: no measured rank");
  QUILL_CHECK(q.micro_batches >= 1, "projection: {} micro-batches per step; there must be at least one", q.micro_batches);
  for (const RankMeasurement& r : q.ranks) {
    QUILL_CHECK(r.stage >= 0 && r.stage < pp, "projection: rank {} is on stage {}, outside the layout's {} stages", r.rank,
                r.stage, pp);
    QUILL_CHECK(r.micro_batches >= 1 && r.steps >= 1, "projection: rank {}: no measured micro-batch or step", r.rank);
    for (const RankMeasurement& o : q.ranks)
      QUILL_CHECK(&o == &r || o.stage != r.stage, "projection: ranks {} and {} both measure stage {}; give one per stage",
                  r.rank, o.rank, r.stage);
  }
  Projection out;
  out.micro_batches = q.micro_batches;
  const double fb = q.backward_share;
  for (int s = 0; s < pp; ++s) {
    const RankMeasurement& r = source_for(s, pp, q.ranks);
    StageProjection sp;
    sp.stage = s;
    sp.from_rank = r.rank;
    sp.borrowed = r.stage != s;
    if (sp.borrowed)
      out.notes.push_back(fmt::format("stage {} was not measured: it takes stage {}'s figures (rank {})", s, r.stage, r.rank));
    const double scale = static_cast<double>(q.micro_batches) / static_cast<double>(r.micro_batches);
    sp.passes_compute_s = r.passes_s / static_cast<double>(r.micro_batches);
    sp.optimizer_compute_s = r.rest_s;
    int64_t pp_messages = 0, pp_bytes = 0;
    double pp_busbw = 0, pp_latency = 0;
    std::map<std::tuple<std::string, std::string, std::string>, GroupTime> by_group;
    for (const CollectiveRow& row : r.rows) {
      if (row.step < 0 || row.phase == "outside") continue;
      const auto g = r.groups.find(row.group);
      QUILL_CHECK(g != r.groups.end() || row.group_size == 1, "projection: rank {} has no ranks listed for group '{}'",
                  r.rank, row.group);
      const GroupPlacement place = g == r.groups.end() ? GroupPlacement{} : place_group(g->second, r.rank, q.comm.gpus_per_node);
      const RowTime t = row_time(row, place, q.comm);
      const bool pipeline_message = row.phase == "passes" && messages_of(row) > 0;
      // Passes' collectives (but the pipeline's messages) repeat per micro-batch; the optimizer's per step.
      const double per_step = row.phase == "passes" ? scale : 1.0;
      GroupTime& gt = by_group[{row.phase, row.group, row.op}];
      gt.phase = row.phase, gt.group = row.group, gt.op = row.op, gt.group_size = row.group_size;
      gt.inter_node = t.inter_node;
      const double n = static_cast<double>(r.steps);
      gt.calls += static_cast<int64_t>(std::llround(static_cast<double>(row.calls) * per_step / n));
      gt.wire_bytes += static_cast<int64_t>(std::llround(static_cast<double>(std::max(row.sent_bytes, row.recv_bytes)) * per_step / n));
      gt.seconds += t.total_s() * per_step / n;
      if (pipeline_message) {
        pp_messages += messages_of(row);
        pp_bytes += row.payload_bytes;
        pp_busbw = effective_busbw_gbps(row.op, place, q.comm);
        pp_latency = (t.inter_node ? q.comm.inter_node.latency_us : q.comm.intra_node.latency_us) * 1e-6;
        sp.pipeline_comm_s += t.total_s() * per_step / n;
      } else if (row.phase == "passes") {
        sp.passes_comm_s += t.total_s() / static_cast<double>(r.micro_batches) / n;
      } else {
        sp.optimizer_comm_s += t.total_s() / n;
      }
    }
    // One message in the replay: its latency and its bytes (every message of a stage has the same shape).
    if (pp_messages > 0)
      sp.message_s = pp_latency + static_cast<double>(pp_bytes) / static_cast<double>(pp_messages) / (pp_busbw * 1e9);
    for (auto& [key, gt] : by_group) sp.groups.push_back(gt);
    const double pass = sp.passes_compute_s + sp.passes_comm_s;
    const double share = r.backward_share >= 0 ? r.backward_share : fb;
    sp.forward_s = (1 - share) * pass;
    sp.backward_s = share * pass;
    out.stages.push_back(sp);
  }
  // The passes by the 1F1B table, at the projected micro-batch count.
  const PipeSchedule schedule = one_f_one_b(pp, static_cast<int>(q.micro_batches));
  std::vector<double> fwd, bwd, msg;
  for (const StageProjection& sp : out.stages) fwd.push_back(sp.forward_s), bwd.push_back(sp.backward_s);
  for (int s = 0; s + 1 < pp; ++s) msg.push_back(std::max(out.stages[s].message_s, out.stages[s + 1].message_s));
  const std::vector<double> ends = replay_pipeline(schedule, fwd, bwd, msg);
  for (int s = 0; s < pp; ++s) out.stages[s].pipeline_end_s = ends[s];
  out.pipeline_s = *std::max_element(ends.begin(), ends.end());
  // The world all-reduces after the passes: the optimizer phase starts together, ends with the slowest.
  for (const StageProjection& sp : out.stages)
    out.optimizer_s = std::max(out.optimizer_s, sp.optimizer_compute_s + sp.optimizer_comm_s);
  out.step_s = out.pipeline_s + out.optimizer_s;
  // What the step is made of, on the terms of the stage with the most compute: its compute, its modelled
  // communication (all of it exposed), and the rest of the step (the pipeline's fill and drain, waits for
  // slower stages and for the slowest optimizer phase).
  double most = -1;
  for (const StageProjection& sp : out.stages) {
    const double compute = sp.passes_compute_s * static_cast<double>(q.micro_batches) + sp.optimizer_compute_s;
    const double comm = sp.passes_comm_s * static_cast<double>(q.micro_batches) + sp.pipeline_comm_s + sp.optimizer_comm_s;
    if (compute > most) most = compute, out.compute_s = compute, out.exposed_comm_s = comm;
  }
  out.bubble_s = std::max(0.0, out.step_s - out.compute_s - out.exposed_comm_s);
  out.bubble_fraction_formula = static_cast<double>(pp - 1) / static_cast<double>(q.micro_batches);
  return out;
}

}  // namespace quill::plan
