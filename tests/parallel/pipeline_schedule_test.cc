// The 1F1B table builder: for every (pp, micro-batches) up to 8 x 64, every micro-batch's forward
// precedes its backward on every stage, sends match receives in order, a rendezvous simulation
// finishes (no deadlock), and stage s holds at most min(pp - s, micro-batches) activations. The
// checker itself must catch broken tables.
#include <gtest/gtest.h>

#include <algorithm>

#include "base/error.h"
#include "parallel/pipeline_schedule.h"

namespace quill {
namespace {

TEST(PipelineSchedule, OneFOneBIsSoundForEveryShapeUpTo8x64) {
  for (int pp = 1; pp <= 8; ++pp) {
    for (int m = 1; m <= 64; ++m) {
      const PipeSchedule s = one_f_one_b(pp, m);
      const PipeScheduleCheck c = check_schedule(s);
      ASSERT_EQ(c.problem, "") << "pp " << pp << " micro-batches " << m;
      for (int st = 0; st < pp; ++st)
        EXPECT_EQ(c.peak_in_flight[static_cast<size_t>(st)], std::min(pp - st, m)) << "pp " << pp << " m " << m << " stage " << st;
    }
  }
}

// Evaluation's table (Megatron's forward_only): forwards only, in order, every exchange matched, no
// deadlock, one micro-batch alive at a time; a backward in it is caught.
TEST(PipelineSchedule, ForwardOnlyIsSoundForEveryShapeUpTo8x64) {
  for (int pp = 1; pp <= 8; ++pp) {
    for (int m = 1; m <= 64; ++m) {
      const PipeSchedule s = forward_only_schedule(pp, m);
      ASSERT_TRUE(s.forward_only);
      const PipeScheduleCheck c = check_schedule(s);
      ASSERT_EQ(c.problem, "") << "pp " << pp << " micro-batches " << m;
      for (int st = 0; st < pp; ++st) {
        EXPECT_EQ(c.peak_in_flight[static_cast<size_t>(st)], 1) << "pp " << pp << " m " << m << " stage " << st;
        const auto& passes = s.passes[static_cast<size_t>(st)];
        ASSERT_EQ(passes.size(), static_cast<size_t>(m));
        for (int k = 0; k < m; ++k) {
          EXPECT_EQ(passes[static_cast<size_t>(k)].pass, PipePass::Forward);
          EXPECT_EQ(passes[static_cast<size_t>(k)].micro, k);
        }
      }
    }
  }
  PipeSchedule broken = forward_only_schedule(2, 2);
  broken.passes[1].push_back({PipePass::Backward, 0});
  EXPECT_NE(check_schedule(broken).problem.find("a backward of micro-batch 0 in a forward-only schedule"),
            std::string::npos);
}

// --overlap-grad-reduce starts the reductions in each stage's last backward: in 1F1B the last micro-batch's,
// after every other pass of the row (only exchanges follow it); a forward-only row has none.
TEST(PipelineSchedule, TheLastBackwardIsTheLastMicroBatchsAndNoPassFollowsIt) {
  for (int pp = 1; pp <= 8; ++pp) {
    for (int m = 1; m <= 16; ++m) {
      const PipeSchedule s = one_f_one_b(pp, m);
      for (int st = 0; st < pp; ++st) {
        const std::vector<PipeAction>& row = s.actions[static_cast<size_t>(st)];
        const size_t last = last_backward_action(s, st);
        ASSERT_LT(last, row.size());
        EXPECT_EQ(row[last].step.pass, PipePass::Backward);
        EXPECT_EQ(row[last].step.micro, m - 1) << "pp " << pp << " m " << m << " stage " << st;
        for (size_t i = last + 1; i < row.size(); ++i) EXPECT_FALSE(row[i].is_pass) << "pp " << pp << " stage " << st;
      }
    }
    const PipeSchedule f = forward_only_schedule(pp, 4);
    for (int st = 0; st < pp; ++st) EXPECT_EQ(last_backward_action(f, st), f.actions[static_cast<size_t>(st)].size());
  }
}

TEST(PipelineSchedule, TheSeedsFourStagesLookLikeMegatrons) {
  // pp 4, 8 micro-batches: stage 0 warms up with 3 forwards, the last stage alternates at once.
  const PipeSchedule s = one_f_one_b(4, 8);
  auto str = [](const std::vector<PipeStep>& p) {
    std::string out;
    for (const PipeStep& x : p) out += (x.pass == PipePass::Forward ? "F" : "B") + std::to_string(x.micro) + " ";
    return out;
  };
  EXPECT_EQ(str(s.passes[0]), "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7 ");
  EXPECT_EQ(str(s.passes[3]), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7 ");
  // Stage 1's steady state exchanges with stage 2 as one send-and-receive.
  int fused = 0;
  for (const PipeAction& a : s.actions[1]) fused += !a.is_pass && a.exchange.messages.size() == 2;
  EXPECT_GT(fused, 0);
}

TEST(PipelineSchedule, TheCheckerCatchesBrokenTables) {
  PipeSchedule s = one_f_one_b(3, 4);
  // A backward moved before its forward.
  PipeSchedule a = s;
  std::swap(a.passes[2][0], a.passes[2][1]);
  EXPECT_NE(check_schedule(a).problem.find("backward precedes its forward"), std::string::npos);
  // Exchanges without their fusion deadlock under rendezvous: stage 1 sends (waiting for stage 2's
  // receive) while stage 2 sends a gradient (waiting for stage 1's receive).
  PipeSchedule d = s;
  for (auto& acts : d.actions) {
    std::vector<PipeAction> split;
    for (const PipeAction& x : acts) {
      if (x.is_pass || x.exchange.messages.size() == 1) {
        split.push_back(x);
        continue;
      }
      for (const PipeMessage& m : x.exchange.messages) split.push_back({false, {}, {{m}}});
    }
    acts = split;
  }
  EXPECT_NE(check_schedule(d).problem.find("deadlock"), std::string::npos) << check_schedule(d).problem;
  // A receive that no stage sends.
  PipeSchedule r = s;
  r.actions[1].insert(r.actions[1].begin(), PipeAction{false, {}, {{{false, PipePass::Forward, 3, 0}}}});
  EXPECT_NE(check_schedule(r).problem, "");
  EXPECT_THROW(one_f_one_b(0, 4), Error);
  EXPECT_THROW(one_f_one_b(2, 0), Error);
}

// The combined 1F1B of one stage (--overlap-moe-expert-parallel-comm): F0, then F(m+1) combined with B(m),
// then the last backward; sound, two micro-batches alive at the peak (one when there is one micro-batch);
// the last backward stands alone (the overlapped gradient reductions start after it); a pipeline refused,
// naming the flag; a combined forward not followed by another micro-batch's backward caught.
TEST(PipelineSchedule, CombinedOneFOneBPairsEachForwardWithThePreviousBackward) {
  for (int m = 1; m <= 64; ++m) {
    const PipeSchedule s = combined_one_f_one_b(1, m);
    const PipeScheduleCheck c = check_schedule(s);
    ASSERT_EQ(c.problem, "") << m;
    EXPECT_EQ(c.peak_in_flight.at(0), std::min(2, m)) << m;
    const std::vector<PipeStep>& p = s.passes[0];
    ASSERT_EQ(p.size(), static_cast<size_t>(2 * m));
    int combined = 0;
    for (size_t k = 0; k < p.size(); ++k)
      if (p[k].combined_with_next) {
        ++combined;
        EXPECT_EQ(p[k + 1].pass, PipePass::Backward);
        EXPECT_EQ(p[k + 1].micro, p[k].micro - 1);
      }
    EXPECT_EQ(combined, m - 1);
    const size_t last = last_backward_action(s, 0);
    EXPECT_FALSE(s.actions[0][last - 1].step.combined_with_next) << m;
  }
  const std::string what = [] {
    try {
      combined_one_f_one_b(2, 4);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  }();
  EXPECT_NE(what.find("--overlap-moe-expert-parallel-comm"), std::string::npos) << what;
  PipeSchedule bad = combined_one_f_one_b(1, 4);
  std::swap(bad.passes[0][2], bad.passes[0][3]);  // F1 (combined), F2, B0, ...
  EXPECT_NE(check_schedule(bad).problem.find("not followed by another micro-batch's backward"), std::string::npos)
      << check_schedule(bad).problem;
}

}  // namespace
}  // namespace quill

#include "parallel/stage_split.h"

namespace quill {
namespace {

TEST(StageSplit, EvenSplitsAndWhyOthersDoNot) {
  EXPECT_EQ(split_layers(42, 4, 12, 10).layers, (std::vector<int64_t>{12, 10, 10, 10}));
  EXPECT_EQ(split_layers(8, 4, std::nullopt, std::nullopt).layers, (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_NE(split_layers(4, 5, std::nullopt, std::nullopt).error.find("4 layers cannot fill 5 stages"), std::string::npos);
  EXPECT_NE(split_layers(6, 4, std::nullopt, std::nullopt).error.find("6 layers do not divide evenly over 4 stages"),
            std::string::npos);
}

}  // namespace
}  // namespace quill
