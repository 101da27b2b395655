#include "parallel/pipeline_schedule.h"

#include <algorithm>

#include <fmt/format.h>

#include "base/error.h"

namespace quill {

namespace {

// The exchanges around one pass of stage s: what it receives before, what it sends after.
std::vector<PipeMessage> before(const PipeStep& p, int s, int stages) {
  if (p.pass == PipePass::Forward && s > 0) return {{false, PipePass::Forward, p.micro, s - 1}};
  if (p.pass == PipePass::Backward && s < stages - 1) return {{false, PipePass::Backward, p.micro, s + 1}};
  return {};
}
std::vector<PipeMessage> after(const PipeStep& p, int s, int stages) {
  if (p.pass == PipePass::Forward && s < stages - 1) return {{true, PipePass::Forward, p.micro, s + 1}};
  if (p.pass == PipePass::Backward && s > 0) return {{true, PipePass::Backward, p.micro, s - 1}};
  return {};
}

// Passes -> actions: each pass with its exchanges, a send and the next receive with the same peer fused.
std::vector<PipeAction> with_exchanges(const std::vector<PipeStep>& passes, int s, int stages) {
  std::vector<PipeAction> out;
  std::vector<PipeMessage> pending;  // the previous pass's send, not yet emitted
  auto flush = [&] {
    if (!pending.empty()) out.push_back({false, {}, {pending}});
    pending.clear();
  };
  for (const PipeStep& p : passes) {
    const std::vector<PipeMessage> recv = before(p, s, stages);
    if (!pending.empty() && !recv.empty() && pending[0].peer == recv[0].peer) {
      pending.push_back(recv[0]);
      flush();
    } else {
      flush();
      if (!recv.empty()) out.push_back({false, {}, {recv}});
    }
    out.push_back({true, p, {}});
    pending = after(p, s, stages);
  }
  flush();
  return out;
}

// The message that answers m (the peer's view of it), as sent from stage s.
PipeMessage complement(const PipeMessage& m, int s) { return {!m.send, m.kind, m.micro, s}; }

}  // namespace

namespace {

// A schedule of `stages` x `micro_batches` with no passes yet (both checked).
PipeSchedule empty_schedule(int stages, int micro_batches) {
  QUILL_CHECK(stages >= 1, "pipeline schedule: {} stages; there must be at least one", stages);
  QUILL_CHECK(micro_batches >= 1, "pipeline schedule: {} micro-batches; there must be at least one", micro_batches);
  PipeSchedule sch;
  sch.stages = stages;
  sch.micro_batches = micro_batches;
  return sch;
}

}  // namespace

PipeSchedule one_f_one_b(int stages, int micro_batches) {
  PipeSchedule sch = empty_schedule(stages, micro_batches);
  for (int s = 0; s < stages; ++s) {
    const int warmup = std::min(stages - s - 1, micro_batches), steady = micro_batches - warmup;
    std::vector<PipeStep> p;
    for (int m = 0; m < warmup; ++m) p.push_back({PipePass::Forward, m});
    for (int i = 0; i < steady; ++i) {
      p.push_back({PipePass::Forward, warmup + i});
      p.push_back({PipePass::Backward, i});
    }
    for (int m = steady; m < micro_batches; ++m) p.push_back({PipePass::Backward, m});
    sch.actions.push_back(with_exchanges(p, s, stages));
    sch.passes.push_back(std::move(p));
  }
  return sch;
}

PipeSchedule combined_one_f_one_b(int stages, int micro_batches) {
  PipeSchedule sch = empty_schedule(stages, micro_batches);
  QUILL_CHECK(stages == 1, "--overlap-moe-expert-parallel-comm: the combined 1F1B step runs without pipeline "
              "parallelism only (--pp 1); with {} stages Megatron needs interleaved (virtual) stages for it, which "
              "quill does not have", stages);
  std::vector<PipeStep> p = {{PipePass::Forward, 0}};
  for (int m = 0; m + 1 < micro_batches; ++m) {
    p.push_back({PipePass::Forward, m + 1, /*combined_with_next=*/true});
    p.push_back({PipePass::Backward, m});
  }
  p.push_back({PipePass::Backward, micro_batches - 1});
  sch.actions.push_back(with_exchanges(p, 0, stages));
  sch.passes.push_back(std::move(p));
  return sch;
}

PipeSchedule forward_only_schedule(int stages, int micro_batches) {
  PipeSchedule sch = empty_schedule(stages, micro_batches);
  sch.forward_only = true;
  for (int s = 0; s < stages; ++s) {
    std::vector<PipeStep> p;
    for (int m = 0; m < micro_batches; ++m) p.push_back({PipePass::Forward, m});
    sch.actions.push_back(with_exchanges(p, s, stages));
    sch.passes.push_back(std::move(p));
  }
  return sch;
}

PipeScheduleCheck check_schedule(const PipeSchedule& sch) {
  PipeScheduleCheck c;
  const int S = sch.stages, M = sch.micro_batches;
  auto fail = [&](std::string why) {
    c.problem = std::move(why);
    return c;
  };
  // Order: every micro-batch once forward, once backward, forward first; in-flight activations.
  for (int s = 0; s < S; ++s) {
    std::vector<int> fwd(static_cast<size_t>(M), -1), bwd(static_cast<size_t>(M), -1);
    int alive = 0, peak = 0;
    const auto& passes = sch.passes[static_cast<size_t>(s)];
    for (size_t k = 0; k < passes.size(); ++k) {
      const PipeStep& p = passes[k];
      if (p.micro < 0 || p.micro >= M) return fail(fmt::format("stage {}: micro-batch {} out of range", s, p.micro));
      std::vector<int>& seen = p.pass == PipePass::Forward ? fwd : bwd;
      if (seen[static_cast<size_t>(p.micro)] >= 0)
        return fail(fmt::format("stage {}: micro-batch {} runs twice", s, p.micro));
      seen[static_cast<size_t>(p.micro)] = static_cast<int>(k);
      if (sch.forward_only && p.pass == PipePass::Backward)
        return fail(fmt::format("stage {}: a backward of micro-batch {} in a forward-only schedule", s, p.micro));
      if (p.combined_with_next &&
          (p.pass != PipePass::Forward || k + 1 == passes.size() || passes[k + 1].pass != PipePass::Backward ||
           passes[k + 1].micro == p.micro || sch.forward_only))
        return fail(fmt::format("stage {}: the combined forward of micro-batch {} is not followed by another "
                                "micro-batch's backward", s, p.micro));
      // Forward only: nothing is kept for a backward, so one micro-batch is alive at a time.
      alive += p.pass == PipePass::Forward ? 1 : -1;
      peak = std::max(peak, alive);
      if (sch.forward_only) alive = 0;
    }
    for (int m = 0; m < M; ++m) {
      if (fwd[static_cast<size_t>(m)] < 0 || (!sch.forward_only && bwd[static_cast<size_t>(m)] < 0))
        return fail(fmt::format("stage {}: micro-batch {} lacks a forward or a backward", s, m));
      if (sch.forward_only) continue;
      if (bwd[static_cast<size_t>(m)] < fwd[static_cast<size_t>(m)])
        return fail(fmt::format("stage {}: micro-batch {}'s backward precedes its forward", s, m));
    }
    c.peak_in_flight.push_back(peak);
  }
  // Sends matched by receives in the same order, per direction between neighbours.
  for (int s = 0; s + 1 < S; ++s) {
    for (bool down : {true, false}) {  // down: activations s -> s+1; up: gradients s+1 -> s
      const int from = down ? s : s + 1, to = down ? s + 1 : s;
      std::vector<int> sent, received;
      for (const PipeAction& a : sch.actions[static_cast<size_t>(from)])
        for (const PipeMessage& m : a.exchange.messages)
          if (m.send && m.peer == to) sent.push_back(m.micro);
      for (const PipeAction& a : sch.actions[static_cast<size_t>(to)])
        for (const PipeMessage& m : a.exchange.messages)
          if (!m.send && m.peer == from) received.push_back(m.micro);
      if (sent != received)
        return fail(fmt::format("stages {} -> {}: the sends and the receives differ in number or order", from, to));
    }
  }
  // Rendezvous: a message completes when the peer's current action holds its complement (a send
  // meets its receive); an exchange completes when all its messages have (the two messages of a
  // fused send-and-receive may meet at different times, as with MPI_Sendrecv); a pass always runs.
  std::vector<size_t> at(static_cast<size_t>(S), 0);
  std::vector<std::vector<bool>> met(static_cast<size_t>(S));  // messages of each stage's current action
  auto current = [&](int s) -> const PipeAction* {
    const auto& acts = sch.actions[static_cast<size_t>(s)];
    return at[static_cast<size_t>(s)] < acts.size() ? &acts[at[static_cast<size_t>(s)]] : nullptr;
  };
  for (int s = 0; s < S; ++s)
    if (const PipeAction* a = current(s)) met[static_cast<size_t>(s)].assign(a->exchange.messages.size(), false);
  while (true) {
    bool done = true, moved = false;
    for (int s = 0; s < S; ++s) {
      const PipeAction* a = current(s);
      if (!a || a->is_pass) continue;
      for (size_t i = 0; i < a->exchange.messages.size(); ++i) {
        if (met[static_cast<size_t>(s)][i]) continue;
        const PipeMessage& m = a->exchange.messages[i];
        const PipeAction* p = current(m.peer);
        if (!p || p->is_pass) continue;
        const auto& pm = p->exchange.messages;
        const auto j = std::find(pm.begin(), pm.end(), complement(m, s)) - pm.begin();
        if (j == static_cast<long>(pm.size()) || met[static_cast<size_t>(m.peer)][static_cast<size_t>(j)]) continue;
        met[static_cast<size_t>(s)][i] = met[static_cast<size_t>(m.peer)][static_cast<size_t>(j)] = true;
        moved = true;
      }
    }
    for (int s = 0; s < S; ++s) {
      const PipeAction* a = current(s);
      if (!a) continue;
      done = false;
      const auto& flags = met[static_cast<size_t>(s)];
      if (a->is_pass || std::all_of(flags.begin(), flags.end(), [](bool f) { return f; })) {
        ++at[static_cast<size_t>(s)];
        moved = true;
        if (const PipeAction* n = current(s)) met[static_cast<size_t>(s)].assign(n->exchange.messages.size(), false);
      }
    }
    if (done) break;
    if (!moved) {
      std::string where;
      for (int s = 0; s < S; ++s) where += fmt::format(" stage {} at action {};", s, at[static_cast<size_t>(s)]);
      return fail("deadlock: no stage can move:" + where);
    }
    ++c.rounds;
  }
  return c;
}

size_t last_backward_action(const PipeSchedule& schedule, int stage) {
  const std::vector<PipeAction>& row = schedule.actions.at(static_cast<size_t>(stage));
  for (size_t i = row.size(); i-- > 0;)
    if (row[i].is_pass && row[i].step.pass == PipePass::Backward) return i;
  return row.size();
}

}  // namespace quill
