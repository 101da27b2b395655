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

namespace {

// The data-parallel groups' collectives (the gradients' reduce-scatter, the weights' all-gather) happen once
// per step, whichever phase started them: --overlap-grad-reduce starts them during the last backward,
// --overlap-param-gather during the next step's first forward (optim/bucket_overlap.h).
bool once_per_step(const CollectiveRow& row) {
  return row.phase != "passes" || row.group == "dp-cp" || row.group == "edp" || row.group == "dp";
}

// The passes by the 1F1B table at `micro_batches`, each stage's pass time split by its backward share, then
// the optimizer phase (the world all-reduces after the passes: it starts together and ends with the slowest).
struct StepLayout {
  std::vector<double> ends;
  double pipeline_s = 0, optimizer_s = 0;
};
StepLayout lay_out_step(const PipeSchedule& schedule, const std::vector<StageProjection>& stages,
                        const std::vector<double>& pass_s, const std::vector<double>& backward_share,
                        const std::vector<double>& optimizer_s) {
  std::vector<double> fwd, bwd, msg;
  for (size_t s = 0; s < stages.size(); ++s)
    fwd.push_back((1 - backward_share[s]) * pass_s[s]), bwd.push_back(backward_share[s] * pass_s[s]);
  for (size_t s = 0; s + 1 < stages.size(); ++s) msg.push_back(std::max(stages[s].message_s, stages[s + 1].message_s));
  StepLayout out;
  out.ends = replay_pipeline(schedule, fwd, bwd, msg);
  out.pipeline_s = *std::max_element(out.ends.begin(), out.ends.end());
  for (double o : optimizer_s) out.optimizer_s = std::max(out.optimizer_s, o);
  return out;
}

}  // namespace

Projection project_step(const ProjectionRequest& q) {
  const int pp = q.spec.pp;
  QUILL_CHECK(!q.ranks.empty(), "projection: no measured rank");
  QUILL_CHECK(q.micro_batches >= 1, "projection: {} micro-batches per step; there must be at least one", q.micro_batches);
  for (const RankMeasurement& r : q.ranks) {
    QUILL_CHECK(r.stage >= 0 && r.stage < pp, "projection: rank {} is on stage {}, outside the layout's {} stages", r.rank,
                r.stage, pp);
    QUILL_CHECK(r.micro_batches >= 1 && r.steps >= 1, "projection: rank {}: no measured micro-batch or step", r.rank);
    QUILL_CHECK(r.timed == q.ranks.front().timed,
                "projection: rank {} ran {} timed stand-ins and rank {} {}; give runs measured alike", r.rank,
                r.timed ? "with" : "without", q.ranks.front().rank, q.ranks.front().timed ? "with" : "without");
    for (const RankMeasurement& o : q.ranks)
      QUILL_CHECK(&o == &r || o.stage != r.stage, "projection: ranks {} and {} both measure stage {}; give one per stage",
                  r.rank, o.rank, r.stage);
  }
  Projection out;
  out.micro_batches = q.micro_batches;
  out.timed = q.ranks.front().timed;
  const double m = static_cast<double>(q.micro_batches);
  // Per stage: the pass per micro-batch and the optimizer phase as the runs ran them (timed: measured, the
  // exposed communication in), and with every collective exposed.
  std::vector<double> pass_as_run, pass_exposed, opt_as_run, opt_exposed, shares;
  for (int s = 0; s < pp; ++s) {
    const RankMeasurement& r = source_for(s, pp, q.ranks);
    StageProjection sp;
    sp.stage = s;
    sp.from_rank = r.rank;
    sp.borrowed = r.stage != s;
    if (sp.borrowed)
      out.notes.push_back(fmt::format("stage {} was not measured: it takes stage {}'s figures (rank {})", s, r.stage, r.rank));
    const double mb = static_cast<double>(r.micro_batches), n = static_cast<double>(r.steps);
    const double scale = m / mb;
    int64_t pp_messages = 0, pp_bytes = 0;
    double pp_busbw = 0, pp_latency = 0, measured_pipeline_s = 0;
    std::map<std::tuple<std::string, std::string, std::string>, GroupTime> by_group;
    for (const CollectiveRow& row : r.rows) {
      if (row.step < 0 || row.phase == "outside") continue;
      const auto g = r.groups.find(row.group);
      QUILL_CHECK(g != r.groups.end() || row.group_size == 1, "projection: rank {} has no ranks listed for group '{}'",
                  r.rank, row.group);
      const GroupPlacement place = g == r.groups.end() ? GroupPlacement{} : place_group(g->second, r.rank, q.comm.gpus_per_node);
      const RowTime t = row_time(row, place, q.comm);
      // The pipeline's messages; other groups' send_recv (--tp-comm-overlap's ring) are the passes' collectives.
      const bool pipeline_message = row.phase == "passes" && row.group == "pp" && messages_of(row) > 0;
      // The passes' collectives (the pipeline's messages among them) repeat per micro-batch; the rest per step.
      const bool per_micro_batch = !once_per_step(row);
      const auto hidden = r.hidden_share.find(row.group);
      const double h = r.timed && hidden != r.hidden_share.end() ? hidden->second : 0.0;
      GroupTime& gt = by_group[{row.phase, row.group, row.op}];
      gt.phase = row.phase, gt.group = row.group, gt.op = row.op, gt.group_size = row.group_size;
      gt.inter_node = t.inter_node;
      if (r.timed && hidden != r.hidden_share.end()) gt.hidden_share = h;
      const double per_step = per_micro_batch ? scale : 1.0;
      gt.calls += static_cast<int64_t>(std::llround(static_cast<double>(row.calls) * per_step / n));
      gt.wire_bytes += static_cast<int64_t>(std::llround(static_cast<double>(std::max(row.sent_bytes, row.recv_bytes)) * per_step / n));
      gt.seconds += t.total_s() * per_step / n;
      if (pipeline_message) {
        pp_messages += messages_of(row);
        pp_bytes += row.payload_bytes;
        pp_busbw = effective_busbw_gbps(row.op, place, q.comm);
        pp_latency = (t.inter_node ? q.comm.inter_node.latency_us : q.comm.intra_node.latency_us) * 1e-6;
        sp.pipeline_comm_s += t.total_s() * per_step / n;
        measured_pipeline_s += t.total_s() / n;
      } else if (per_micro_batch) {
        sp.passes_comm_s += t.total_s() / mb / n;
        sp.passes_hidden_s += h * t.total_s() / mb / n;
      } else {
        sp.optimizer_comm_s += t.total_s() / n;
        sp.optimizer_hidden_s += h * t.total_s() / n;
      }
    }
    // One message in the replay: its latency and its bytes (every message of a stage has the same shape).
    if (pp_messages > 0)
      sp.message_s = pp_latency + static_cast<double>(pp_bytes) / static_cast<double>(pp_messages) / (pp_busbw * 1e9);
    for (auto& [key, gt] : by_group) sp.groups.push_back(gt);
    double pass = 0, opt = 0;
    if (r.timed) {
      // The measured passes hold the pipeline's messages (blocking stand-ins: the replay adds them) and the
      // other collectives' exposed part; the rest of the step, the optimizer's collectives' exposed part.
      pass = std::max(0.0, r.passes_s - measured_pipeline_s) / mb;
      opt = r.rest_s;
      sp.passes_compute_s = std::max(0.0, pass - (sp.passes_comm_s - sp.passes_hidden_s));
      sp.optimizer_compute_s = std::max(0.0, opt - (sp.optimizer_comm_s - sp.optimizer_hidden_s));
    } else {
      sp.passes_compute_s = r.passes_s / mb;
      sp.optimizer_compute_s = r.rest_s;
      pass = sp.passes_compute_s + sp.passes_comm_s;
      opt = sp.optimizer_compute_s + sp.optimizer_comm_s;
    }
    const double share = r.backward_share >= 0 ? r.backward_share : q.backward_share;
    sp.forward_s = (1 - share) * pass;
    sp.backward_s = share * pass;
    pass_as_run.push_back(pass), opt_as_run.push_back(opt), shares.push_back(share);
    pass_exposed.push_back(sp.passes_compute_s + sp.passes_comm_s);
    opt_exposed.push_back(sp.optimizer_compute_s + sp.optimizer_comm_s);
    out.stages.push_back(sp);
  }
  const PipeSchedule schedule = one_f_one_b(pp, static_cast<int>(q.micro_batches));
  const StepLayout as_run = lay_out_step(schedule, out.stages, pass_as_run, shares, opt_as_run);
  for (int s = 0; s < pp; ++s) out.stages[s].pipeline_end_s = as_run.ends[s];
  out.pipeline_s = as_run.pipeline_s;
  out.optimizer_s = as_run.optimizer_s;
  out.step_s = out.pipeline_s + out.optimizer_s;
  if (out.timed) {
    const StepLayout exposed = lay_out_step(schedule, out.stages, pass_exposed, shares, opt_exposed);
    out.none_overlapped_step_s = exposed.pipeline_s + exposed.optimizer_s;
  } else {
    out.none_overlapped_step_s = out.step_s;
  }
  // What the step is made of, on the terms of the stage with the most compute: its compute, its modelled
  // communication less what ran beside compute, and the rest of the step (the pipeline's fill and drain,
  // waits for slower stages and for the slowest optimizer phase).
  double most = -1;
  for (const StageProjection& sp : out.stages) {
    const double compute = sp.passes_compute_s * m + sp.optimizer_compute_s;
    const double comm = sp.passes_comm_s * m + sp.pipeline_comm_s + sp.optimizer_comm_s;
    const double hidden = sp.passes_hidden_s * m + sp.optimizer_hidden_s;
    if (compute > most)
      most = compute, out.compute_s = compute, out.modelled_comm_s = comm, out.hidden_comm_s = hidden,
      out.exposed_comm_s = comm - hidden;
  }
  out.bubble_s = std::max(0.0, out.step_s - out.compute_s - out.exposed_comm_s);
  out.bubble_fraction_formula = static_cast<double>(pp - 1) / m;
  return out;
}

}  // namespace quill::plan
