// The validation loss (`quill train --valid-rows DIR --eval-interval N --eval-iters K`, issue 45): the
// evaluation steps and keys of metrics.jsonl, the log line and summary.json; training bit-identical with
// and without it (losses, gradient norms, expert counts and every fp32 weight); under DP2, TP2+SP, PP2
// and EP2 x DP2 on CPU ranks, every validation loss within 1e-5 of one rank's; and the flag checks, each
// refused before training starts with one line naming the flag.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>

#include "util/command.h"
#include "util/run_dir.h"

namespace {

std::string temp(const std::string& name) { return quill::test::fresh_temp_dir("valid", name); }

const std::string kQuill = QUILL_BINARY;

// Training and held-out rows of the synthetic set (quill data synth --valid-fraction), built once.
const std::string& split_rows() {
  static const std::string rows = [] {
    const std::string dir = temp("rows");
    quill::test::run_checked(kQuill + " data synth --conversations 400 --row-tokens 64 --max-rows 64 "
                                      "--valid-fraction 0.1 --out " + dir);
    return dir;
  }();
  return rows;
}

std::string train_flags(int steps = 4) {
  return " train --config " + std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json --rows " + split_rows() +
         " --seed 5 --steps " + std::to_string(steps) + " --global-batch 4 --lr 1e-2 --weight-decay 0.1";
}

std::string eval_flags(int interval = 2, int iters = 2) {
  return " --valid-rows " + split_rows() + "/valid --eval-interval " + std::to_string(interval) + " --eval-iters " +
         std::to_string(iters);
}

TEST(ValidLoss, EveryIntervalAndTheLastStepInMetricsLogAndSummary) {
  const std::string out = temp("steps");
  std::string log;
  // 5 steps, --eval-interval 2: after steps 1 and 3 (Megatron's iterations 2 and 4) and after the last, 4.
  ASSERT_EQ(quill::test::run_checked(kQuill + train_flags(5) + eval_flags() + " --out " + out, &log), 0);
  const auto m = quill::test::read_metrics(out);
  ASSERT_EQ(m.size(), 5u);
  for (size_t i = 0; i < m.size(); ++i) {
    const bool eval = i == 1 || i == 3 || i == 4;
    ASSERT_EQ(m[i].contains("valid_loss"), eval) << "step " << i;
    if (!eval) continue;
    const double v = m[i]["valid_loss"].get<double>();
    EXPECT_TRUE(std::isfinite(v) && v > 0) << v;
    EXPECT_GT(m[i]["valid_supervised_tokens"].get<int64_t>(), 0);
  }
  // The same rows at every evaluation: the loss moves only with the weights (here it falls as they learn).
  EXPECT_LT(m[4]["valid_loss"].get<double>(), m[1]["valid_loss"].get<double>());
  char want[64];
  std::snprintf(want, sizeof want, "valid loss %.4f |", m[3]["valid_loss"].get<double>());
  EXPECT_NE(log.find(want), std::string::npos) << log;
  const nlohmann::json summary = quill::test::read_json(out + "/summary.json");
  EXPECT_EQ(summary["valid_loss"].get<double>(), m[4]["valid_loss"].get<double>());
  EXPECT_EQ(summary["valid_loss_step"], 4);
}

TEST(ValidLoss, TrainingIsBitIdenticalWithAndWithoutEvaluation) {
  const std::string plain = temp("plain"), evaluated = temp("evaluated");
  ASSERT_EQ(quill::test::run_checked(kQuill + train_flags() + " --quiet --out " + plain + " --save " + plain +
                                     "/checkpoint"), 0);
  ASSERT_EQ(quill::test::run_checked(kQuill + train_flags() + eval_flags(1) + " --quiet --out " +
                                     evaluated + " --save " + evaluated + "/checkpoint"), 0);
  quill::test::expect_runs_bit_identical(plain, evaluated, 4);
  for (const nlohmann::json& line : quill::test::read_metrics(evaluated)) EXPECT_TRUE(line.contains("valid_loss"));
}

// Each layout's validation loss, at every evaluation, within 1e-5 of one rank's (training steps too).
TEST(ValidLoss, LayoutsEqualOneRank) {
  const std::string one = temp("one");
  ASSERT_EQ(quill::test::run_checked(kQuill + train_flags() + eval_flags() + " --quiet --out " + one), 0);
  const auto ref = quill::test::read_metrics(one);
  ASSERT_EQ(ref.size(), 4u);
  int index = 0;
  for (const auto& [layout, ranks] : {std::pair<std::string, int>{"--dp 2", 2},
                                      {"--tp 2 --sp", 2},
                                      {"--pp 2 --pp-layers 1,3", 2},
                                      {"--dp 2 --ep 2", 2},
                                      {"--pp 2 --dp 2 --pp-layers 3,1", 4}}) {
    SCOPED_TRACE(layout);
    const std::string out = temp("layout" + std::to_string(index++));
    ASSERT_EQ(quill::test::run_checked("timeout 300 " + quill::test::mpirun_command(ranks) + kQuill + train_flags() +
                                       eval_flags() + " --quiet " + layout + " --out " + out + " </dev/null"), 0);
    const auto got = quill::test::read_metrics(out);
    quill::test::expect_steps_match(got, ref);
    for (size_t i = 0; i < ref.size(); ++i) {
      ASSERT_EQ(got[i].contains("valid_loss"), ref[i].contains("valid_loss")) << "step " << i;
      if (!ref[i].contains("valid_loss")) continue;
      const double a = got[i]["valid_loss"].get<double>(), b = ref[i]["valid_loss"].get<double>();
      EXPECT_NEAR(a, b, 1e-5 * std::fabs(b)) << "step " << i;
      EXPECT_EQ(got[i]["valid_supervised_tokens"], ref[i]["valid_supervised_tokens"]) << "step " << i;
    }
  }
}

// Each mistake stops quill train before step 0 with one line naming the flag, and leaves no metrics.
TEST(ValidLoss, FlagMistakesAreRefusedBeforeTraining) {
  const std::string other_rows = temp("rows32");
  ASSERT_EQ(quill::test::run_checked(kQuill + " data synth --conversations 100 --row-tokens 32 --max-rows 8 --out " +
                                     other_rows), 0);
  const std::string cases[][2] = {
      {" --eval-interval 2", "--eval-interval 2 needs --valid-rows DIR"},
      {" --eval-iters 3", "--eval-iters 3 needs --valid-rows DIR"},
      {eval_flags(2, 0), "--eval-iters 0: must be at least 1"},
      {" --valid-rows " + other_rows, "--valid-rows " + other_rows + ": its rows hold 32 tokens, the training rows"},
      {" --valid-rows " + temp("missing"), "--valid-rows " + temp("missing") + ": "},
  };
  int index = 0;
  for (const auto& [flags, message] : cases) {
    SCOPED_TRACE(flags);
    const std::string out = temp("refused" + std::to_string(index++));
    const quill::test::CommandResult r = quill::test::run_command(kQuill + train_flags() + flags + " --out " + out);
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
    EXPECT_TRUE(quill::test::read_metrics(out).empty());
  }
}

}  // namespace

namespace {

// `quill run` of the tiny recipe with Megatron's --eval-interval 2 --eval-iters 1 in its run flags: with
// --valid-rows the trainer evaluates after steps 1 and 2 (the last); without validation rows the run notes
// that nothing is evaluated and trains as before.
TEST(ValidLoss, QuillRunMapsTheRecipesEvalFlags) {
  const std::string src = QUILL_SOURCE_DIR, rows = temp("run-rows");
  ASSERT_EQ(quill::test::run_checked(kQuill + " data synth --input " + src + "/data/synthetic/conversations.jsonl "
                                             "--row-tokens 128 --valid-fraction 0.1 --out " + rows), 0);
  const std::string recipe = temp("eval.yaml");
  std::ofstream(recipe) << quill::test::edited_text(
      src + "/recipes/tiny-cpu.yaml",
      {{"--moe-token-dispatcher-type alltoall", "--moe-token-dispatcher-type alltoall --eval-interval 2 --eval-iters 1"}});
  const std::string run = "cd " + src + " && " + kQuill + " run " + recipe + " --device cpu --set SFT_DATA=" + rows +
                          " --steps 3";
  std::string said;
  const std::string with = temp("run-with"), without = temp("run-without");
  ASSERT_EQ(quill::test::run_checked(run + " --valid-rows " + rows + "/valid --out " + with, &said), 0);
  EXPECT_NE(said.find("validation loss on " + rows + "/valid (1 global batches) every 2 steps"), std::string::npos)
      << said;
  const auto m = quill::test::read_metrics(with);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_FALSE(m[0].contains("valid_loss"));
  EXPECT_TRUE(m[1].contains("valid_loss"));
  EXPECT_TRUE(m[2].contains("valid_loss"));
  ASSERT_EQ(quill::test::run_checked(run + " --out " + without, &said), 0);
  EXPECT_NE(said.find("the run's --eval-interval / --eval-iters: no validation rows"), std::string::npos) << said;
  const auto plain = quill::test::read_metrics(without);
  ASSERT_EQ(plain.size(), 3u);
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_FALSE(plain[i].contains("valid_loss"));
    EXPECT_EQ(plain[i]["loss"], m[i]["loss"]) << "step " << i;
  }
}

}  // namespace
