// The projection of a layout's step (plan/projection.h, docs/comm-model.md) against timelines worked
// out by hand: the 1F1B replay (one stage; two stages with messages; uniform stages giving Megatron's
// (m + p - 1)(f + b)), a whole step from measured compute and ledger rows (passes' collectives scaled
// per micro-batch, the optimizer's per step, nothing overlapped), stages that borrow a like stage's
// figures, and the refusals; the data-parallel collectives an overlap starts in the passes counted once per
// step; runs with timed stand-ins laid out from their measured passes, beside the none-overlapped step.
#include <gtest/gtest.h>

#include "base/error.h"
#include "plan/ledger_row.h"
#include "plan/projection.h"

namespace {

using quill::CollectiveRow;
using quill::plan::ProjectionRequest;
using quill::plan::RankMeasurement;
using quill::plan::replay_pipeline;

CollectiveRow row(const std::string& phase, const std::string& group, int size, const std::string& op, int64_t calls,
                  int64_t payload, int64_t sent, int64_t recv) {
  return quill::test::ledger_row(phase, group, size, op, calls, payload, sent, recv);
}

quill::plan::CommModelParams params() {
  quill::plan::CommModelParams p;
  p.intra_node = {100.0, 10.0};
  p.inter_node = {25.0, 40.0};
  p.gpus_per_node = 8;
  return p;
}

TEST(PipelineReplay, OneStageRunsItsPassesBackToBack) {
  const std::vector<double> ends = replay_pipeline(quill::one_f_one_b(1, 5), {1.0}, {2.0}, {});
  ASSERT_EQ(ends.size(), 1u);
  EXPECT_DOUBLE_EQ(ends[0], 15.0);
}

TEST(PipelineReplay, TwoStagesWithMessagesByHand) {
  // Stage 0: F0, send F0, F1, {send F1, recv B0}, B0, recv B1, B1.  Stage 1: recv F0, F0, B0,
  // {send B0, recv F1}, F1, B1, send B1.  f = 1, b = 2, a message 0.5:
  //   F0 on 0 [0, 1]; F0 to 1 [1, 1.5]; F1 on 0 [1.5, 2.5] while 1 runs F0 [1.5, 2.5] and B0 [2.5, 4.5];
  //   the fused exchanges meet at 4.5, end 5; 0 runs B0 [5, 7], 1 F1 [5, 6] and B1 [6, 8];
  //   B1's gradient [8, 8.5]; 0 runs B1 [8.5, 10.5].
  const std::vector<double> ends = replay_pipeline(quill::one_f_one_b(2, 2), {1.0, 1.0}, {2.0, 2.0}, {0.5});
  ASSERT_EQ(ends.size(), 2u);
  EXPECT_DOUBLE_EQ(ends[0], 10.5);
  EXPECT_DOUBLE_EQ(ends[1], 8.5);
}

TEST(PipelineReplay, UniformStagesTakeMegatronsFillAndDrain) {
  // (m + p - 1)(f + b): Narayanan et al. 2021 §2.2.1, bubble (p - 1)/m of m(f + b).
  for (int pp : {2, 4})
    for (int m : {1, 4, 8, 16}) {
      const std::vector<double> ends =
          replay_pipeline(quill::one_f_one_b(pp, m), std::vector<double>(pp, 1.0), std::vector<double>(pp, 2.0),
                          std::vector<double>(pp - 1, 0.0));
      EXPECT_DOUBLE_EQ(*std::max_element(ends.begin(), ends.end()), (m + pp - 1) * 3.0) << pp << " stages, " << m;
    }
}

TEST(PipelineReplay, TheSlowestStageSetsTheSteadyState) {
  // Stage 1 twice as slow: after the fill, every micro-batch waits for it.
  const std::vector<double> ends = replay_pipeline(quill::one_f_one_b(2, 8), {1.0, 2.0}, {2.0, 4.0}, {0.0});
  // Stage 1 runs its 8 (F + B) = 48 back to back after its first input (t = 1): 49; stage 0's last
  // backward follows stage 1's: 49 + 2 = 51.
  EXPECT_DOUBLE_EQ(ends[1], 49.0);
  EXPECT_DOUBLE_EQ(ends[0], 51.0);
  EXPECT_THROW(replay_pipeline(quill::one_f_one_b(2, 2), {1.0}, {2.0, 2.0}, {0.0}), quill::Error);
}

// One rank of a TP4 x DP2 layout (world 8, one stage): 4 micro-batches measured, 8 projected.
RankMeasurement tp_dp_rank() {
  RankMeasurement r;
  r.rank = 0;
  r.stage = 0;
  r.micro_batches = 4;
  r.passes_s = 2.0;  // 0.5 per micro-batch
  r.rest_s = 0.5;
  r.groups = {{"tp", {0, 1, 2, 3}}, {"dp-cp", {0, 4}}, {"world", {0, 1, 2, 3, 4, 5, 6, 7}}};
  // Passes: 8 all-reduces of 1.6e9 bytes in all (wire 2 * 3/4): 8 * 10 us + 1.2e9 / 100 GB/s = 0.01208 s
  // per step of 4 micro-batches.
  r.rows.push_back(row("passes", "tp", 4, "all_reduce", 8, 1'600'000'000, 1'200'000'000, 1'200'000'000));
  // Optimizer: the gradients' reduce-scatter over dp (1e9 each way: 10 us + 0.01 s), the loss sum.
  r.rows.push_back(row("optimizer", "dp-cp", 2, "reduce_scatter", 1, 2'000'000'000, 1'000'000'000, 1'000'000'000));
  r.rows.push_back(row("optimizer", "world", 8, "all_reduce", 1, 8, 14, 14));
  // Outside the steps: ignored.
  CollectiveRow setup = row("outside", "world", 8, "all_gather", 3, 1'000'000'000, 1'000'000'000, 1'000'000'000);
  setup.step = -1;
  r.rows.push_back(setup);
  return r;
}

// That rank's layout, 8 micro-batches projected.
ProjectionRequest tp_dp_request() {
  ProjectionRequest q;
  q.spec.tp = 4, q.spec.dp = 2;
  q.ranks = {tp_dp_rank()};
  q.micro_batches = 8;
  q.comm = params();
  return q;
}

TEST(Projection, AStepByHandWithNothingOverlapped) {
  ProjectionRequest q = tp_dp_request();
  const quill::plan::Projection p = quill::plan::project_step(q);
  ASSERT_EQ(p.stages.size(), 1u);
  const quill::plan::StageProjection& s = p.stages[0];
  EXPECT_DOUBLE_EQ(s.passes_compute_s, 0.5);
  EXPECT_NEAR(s.passes_comm_s, 0.01208 / 4, 1e-12);
  const double world_ar = 10e-6 + 14 / 100e9;
  EXPECT_NEAR(s.optimizer_comm_s, 10e-6 + 0.01 + world_ar, 1e-12);
  EXPECT_NEAR(p.pipeline_s, 8 * (0.5 + 0.00302), 1e-9);
  EXPECT_NEAR(p.step_s, 8 * (0.5 + 0.00302) + 0.5 + 0.01001 + world_ar, 1e-9);
  EXPECT_NEAR(p.compute_s, 4.5, 1e-12);
  EXPECT_NEAR(p.exposed_comm_s, 8 * 0.00302 + 0.01001 + world_ar, 1e-9);
  EXPECT_NEAR(p.bubble_s, 0.0, 1e-9);
  EXPECT_DOUBLE_EQ(p.bubble_fraction_formula, 0.0);
  // Per group, per projected step: the passes' calls doubled with the micro-batches.
  bool seen = false;
  for (const quill::plan::GroupTime& g : s.groups)
    if (g.group == "tp") {
      seen = true;
      EXPECT_EQ(g.calls, 16);
      EXPECT_EQ(g.wire_bytes, 2'400'000'000);
      EXPECT_FALSE(g.inter_node);
    }
  EXPECT_TRUE(seen);
}

// PP4 x TP8 (world 32, 8 per node: each stage a node). Stage 1 measured: 2 micro-batches, 1 s of passes,
// 8 messages of 2e8 bytes (4 send_recv calls) through the port: 40 us + 2e8 / 25 GB/s = 8.04 ms; 8 projected.
ProjectionRequest pipeline_request() {
  RankMeasurement r;
  r.rank = 8;
  r.stage = 1;
  r.micro_batches = 2;
  r.passes_s = 1.0;
  r.rest_s = 0.25;
  r.groups = {{"pp", {0, 8, 16, 24}}};
  r.rows.push_back(row("passes", "pp", 4, "send_recv", 4, 1'600'000'000, 800'000'000, 800'000'000));
  ProjectionRequest q;
  q.spec.tp = 8, q.spec.pp = 4;
  q.ranks = {r};
  q.micro_batches = 8;
  q.comm = params();
  return q;
}

TEST(Projection, PipelineStagesWithMessagesAndBorrowedFigures) {
  const quill::plan::Projection p = quill::plan::project_step(pipeline_request());
  ASSERT_EQ(p.stages.size(), 4u);
  for (const quill::plan::StageProjection& s : p.stages) {
    EXPECT_EQ(s.from_rank, 8);
    EXPECT_EQ(s.borrowed, s.stage != 1);
    EXPECT_NEAR(s.message_s, 40e-6 + 2e8 / 25e9, 1e-12);
    EXPECT_DOUBLE_EQ(s.forward_s + s.backward_s, 0.5);
  }
  EXPECT_EQ(p.notes.size(), 3u);
  // Uniform stages with messages: the replay's pipeline is at least Megatron's (m + p - 1)(f + b).
  EXPECT_GT(p.pipeline_s, 11 * 0.5);
  EXPECT_LT(p.pipeline_s, 11 * 0.5 + 2 * 8 * 4 * 0.00804);
  EXPECT_NEAR(p.step_s, p.pipeline_s + 0.25, 1e-12);
  EXPECT_DOUBLE_EQ(p.bubble_fraction_formula, 3.0 / 8.0);
  EXPECT_GT(p.bubble_s, 0.0);
}

TEST(Projection, BorrowsALikeStageFirst) {
  // Stages 0 and 3 measured of 4: the middle stages take the nearer end's figures.
  auto rank = [](int stage, double passes) {
    RankMeasurement r;
    r.rank = stage * 4;
    r.stage = stage;
    r.micro_batches = 4;
    r.passes_s = passes;
    return r;
  };
  ProjectionRequest q;
  q.spec.pp = 4, q.spec.tp = 4;
  q.ranks = {rank(0, 4.0), rank(3, 8.0)};
  q.micro_batches = 4;
  q.comm = params();
  const quill::plan::Projection p = quill::plan::project_step(q);
  EXPECT_EQ(p.stages[1].from_rank, 0);
  EXPECT_EQ(p.stages[2].from_rank, 12);
  // A middle stage measured is preferred by the other middle stage over a nearer end.
  q.ranks = {rank(0, 4.0), rank(2, 6.0), rank(3, 8.0)};
  EXPECT_EQ(quill::plan::project_step(q).stages[1].from_rank, 8);
}

TEST(Projection, Refusals) {
  ProjectionRequest q;
  q.spec.pp = 2;
  q.micro_batches = 4;
  q.comm = params();
  EXPECT_THROW(quill::plan::project_step(q), quill::Error);  // no rank
  RankMeasurement r;
  r.micro_batches = 2;
  r.stage = 2;
  q.ranks = {r};
  EXPECT_THROW(quill::plan::project_step(q), quill::Error);  // stage outside
  r.stage = 0;
  q.ranks = {r, r};
  EXPECT_THROW(quill::plan::project_step(q), quill::Error);  // two for one stage
  q.ranks = {r};
  q.micro_batches = 0;
  EXPECT_THROW(quill::plan::project_step(q), quill::Error);
  // A row of a group whose ranks were not listed.
  q.micro_batches = 2;
  q.ranks[0].rows.push_back(row("passes", "tp", 2, "all_reduce", 1, 8, 8, 8));
  EXPECT_THROW(quill::plan::project_step(q), quill::Error);
}

TEST(Projection, DataParallelCollectivesStartedInThePassesCountOncePerStep) {
  // --overlap-grad-reduce starts the reduce-scatter during the last backward: the ledger puts it in the
  // passes, but it happens once per step, not once per micro-batch.
  ProjectionRequest q = tp_dp_request();
  const quill::plan::Projection after = quill::plan::project_step(q);
  q.ranks[0].rows[1].phase = "passes";
  const quill::plan::Projection during = quill::plan::project_step(q);
  EXPECT_NEAR(during.stages[0].passes_comm_s, after.stages[0].passes_comm_s, 1e-15);
  EXPECT_NEAR(during.stages[0].optimizer_comm_s, after.stages[0].optimizer_comm_s, 1e-15);
  EXPECT_NEAR(during.step_s, after.step_s, 1e-12);
  for (const quill::plan::GroupTime& g : during.stages[0].groups)
    if (g.group == "dp-cp") EXPECT_EQ(g.calls, 1);
}

TEST(Projection, TimedRunsAreLaidOutAsMeasuredBesideTheNoneOverlappedStep) {
  // The TP4 x DP2 rank, run with timed stand-ins: half of tp's time and all of dp-cp's beside compute (the
  // op profile's shares), the world all-reduce not profiled (exposed). Its compute is that of the untimed
  // rank (0.5 s per micro-batch, 0.5 s of rest), so the measured passes hold half of tp's 0.01208 s and the
  // rest holds the world all-reduce only.
  const double world_ar = 10e-6 + 14 / 100e9;
  RankMeasurement r = tp_dp_rank();
  r.timed = true;
  r.hidden_share = {{"tp", 0.5}, {"dp-cp", 1.0}};
  r.passes_s = 2.0 + 0.01208 / 2;
  r.rest_s = 0.5 + world_ar;
  ProjectionRequest q = tp_dp_request();
  q.ranks = {r};
  const quill::plan::Projection p = quill::plan::project_step(q);
  EXPECT_TRUE(p.timed);
  const quill::plan::StageProjection& s = p.stages[0];
  EXPECT_NEAR(s.passes_compute_s, 0.5, 1e-12);
  EXPECT_NEAR(s.passes_hidden_s, 0.00151, 1e-12);
  EXPECT_NEAR(s.optimizer_compute_s, 0.5, 1e-12);
  EXPECT_NEAR(s.optimizer_hidden_s, 0.01001, 1e-12);
  EXPECT_NEAR(p.step_s, 8 * (0.5 + 0.00151) + 0.5 + world_ar, 1e-9);
  // With none overlapped: the untimed projection of the same compute (AStepByHandWithNothingOverlapped).
  EXPECT_NEAR(p.none_overlapped_step_s, 8 * (0.5 + 0.00302) + 0.5 + 0.01001 + world_ar, 1e-9);
  EXPECT_NEAR(p.modelled_comm_s, 8 * 0.00302 + 0.01001 + world_ar, 1e-9);
  EXPECT_NEAR(p.hidden_comm_s, 8 * 0.00151 + 0.01001, 1e-9);
  EXPECT_NEAR(p.exposed_comm_s, p.modelled_comm_s - p.hidden_comm_s, 1e-12);
  EXPECT_NEAR(p.compute_s, 4.5, 1e-9);
  for (const quill::plan::GroupTime& g : s.groups)
    EXPECT_DOUBLE_EQ(g.hidden_share, g.group == "tp" ? 0.5 : g.group == "dp-cp" ? 1.0 : -1.0) << g.group;
  // Untimed, the shares are not read: every collective exposed.
  q.ranks[0].timed = false;
  q.ranks[0].passes_s = 2.0, q.ranks[0].rest_s = 0.5;
  const quill::plan::Projection untimed = quill::plan::project_step(q);
  EXPECT_FALSE(untimed.timed);
  EXPECT_DOUBLE_EQ(untimed.none_overlapped_step_s, untimed.step_s);
  EXPECT_NEAR(untimed.step_s, p.none_overlapped_step_s, 1e-9);
  EXPECT_EQ(untimed.hidden_comm_s, 0.0);
  // A timed and an untimed rank in one projection: refused.
  q.spec.pp = 2;
  RankMeasurement second = r;
  second.stage = 1, second.rank = 4;
  second.groups = {{"tp", {4, 5, 6, 7}}, {"dp-cp", {0, 4}}, {"world", {0, 1, 2, 3, 4, 5, 6, 7}}};
  q.ranks.push_back(second);
  EXPECT_THROW(quill::plan::project_step(q), quill::Error);
}

TEST(Projection, TimedPipelineMessagesLeaveTheMeasuredPassesForTheReplay) {
  // The PP4 stage of PipelineStagesWithMessagesAndBorrowedFigures, timed: its measured passes hold its
  // blocking messages' modelled time, which the replay lays out itself: the same step as untimed.
  ProjectionRequest q = pipeline_request();
  const quill::plan::Projection untimed = quill::plan::project_step(q);
  q.ranks[0].timed = true;
  q.ranks[0].passes_s = 1.0 + untimed.stages[1].pipeline_comm_s * 2 / 8;  // the measured steps' messages
  const quill::plan::Projection timed = quill::plan::project_step(q);
  for (const quill::plan::StageProjection& s : timed.stages) EXPECT_NEAR(s.forward_s + s.backward_s, 0.5, 1e-12);
  EXPECT_NEAR(timed.step_s, untimed.step_s, 1e-12);
  EXPECT_NEAR(timed.none_overlapped_step_s, untimed.step_s, 1e-12);
}

}  // namespace
