// `quill train` under Megatron's flag names (issue 45, item 6): each alias of the recipe layer's flag
// table gives the run of quill's own flag, the two names with different values are refused naming
// both, a Megatron flag without equivalent is refused with what to use instead, and a mistyped flag
// or command gets one line naming the nearest known one.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "util/run_dir.h"

namespace {

using quill::test::CommandResult;
using quill::test::fresh_temp_dir;
using quill::test::read_metrics;

CommandResult quill(const std::string& args) { return quill::test::run_command(std::string(QUILL_BINARY) + " " + args); }

std::string rows() {
  static const std::string dir = [] {
    const std::string d = fresh_temp_dir("megatron", "rows");
    EXPECT_EQ(quill("data synth --conversations 40 --row-tokens 32 --max-rows 8 --out " + d).status, 0);
    return d;
  }();
  return dir;
}

// Everything but the flags under test.
std::string train(const std::string& out) {
  return "train --config " + std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json --rows " + rows() +
         " --seed 5 --lr 1e-2 --quiet --out " + out;
}

size_t lines(const std::string& text) {
  size_t n = 0;
  for (char c : text) n += c == '\n';
  return n;
}

// Two runs' metrics.jsonl, step by step: the same loss, gradient norm, learning rate and tokens.
void expect_same_run(const std::string& a, const std::string& b) {
  const auto x = read_metrics(a), y = read_metrics(b);
  ASSERT_FALSE(x.empty()) << a;
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i)
    for (const char* key : {"loss", "grad_norm", "lr", "tokens"})
      EXPECT_EQ(x[i][key], y[i][key]) << key << " at step " << i;
}

TEST(MegatronNames, EachAliasGivesTheRunOfQuillsOwnFlag) {
  // Values away from the defaults, so that an alias read as nothing (or as another flag) shows: four steps
  // let beta1/beta2 reach the loss, the warm-up and the decay length reach the learning rate.
  const std::vector<std::pair<std::string, std::string>> pairs = {
      {"--steps 4", "--train-iters 4"},
      {"--global-batch 3", "--global-batch-size 3"},
      {"--beta1 0.5", "--adam-beta1 0.5"},
      {"--beta2 0.9", "--adam-beta2 0.9"},
      {"--warmup-fraction 0.4", "--lr-warmup-fraction 0.4"},
      {"--lr-decay-steps 5", "--lr-decay-iters 5"},
  };
  std::string own, megatron;
  for (const auto& [q, m] : pairs) own += " " + q, megatron += " " + m;
  const std::string a = fresh_temp_dir("megatron", "own"), b = fresh_temp_dir("megatron", "aliases");
  ASSERT_EQ(quill(train(a) + own).status, 0);
  // Accepted alongside: the one micro-batch size quill runs, and the notes of --bf16, --log-interval and
  // --exit-signal-handler (quill's stop on SIGTERM is always on: tests/cli/stop_signal_test.cc).
  CommandResult r = quill(train(b) + megatron + " --micro-batch-size 1 --bf16 --log-interval 10 --exit-signal-handler");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("note: --bf16: --device cpu computes in fp32"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("note: --log-interval 10: quill train logs every step"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("note: --exit-signal-handler: quill train always does this"), std::string::npos) << r.output;
  expect_same_run(a, b);
  ASSERT_EQ(read_metrics(b).size(), 4u);

  // Each alias on its own took effect: without it the run is another one.
  for (const auto& [q, m] : pairs) {
    if (q.rfind("--steps", 0) == 0 || q.rfind("--global-batch", 0) == 0) continue;  // required: no run without
    std::string without;
    for (const auto& [q2, m2] : pairs)
      if (q2 != q) without += " " + m2;
    const std::string c = fresh_temp_dir("megatron", "without-" + m.substr(2, m.find(' ') - 2));
    ASSERT_EQ(quill(train(c) + without).status, 0);
    const auto x = read_metrics(b), y = read_metrics(c);
    bool differs = false;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) differs = differs || x[i]["loss"] != y[i]["loss"] || x[i]["lr"] != y[i]["lr"];
    EXPECT_TRUE(differs) << m << " made no difference to the run";
  }

  // Both names with one value are one setting.
  r = quill(train(fresh_temp_dir("megatron", "both")) + own + " --train-iters 4 --adam-beta1 0.50");
  EXPECT_EQ(r.status, 0) << r.output;
}

TEST(MegatronNames, LoadResumesAsResumeDoes) {
  const std::string base = fresh_temp_dir("megatron", "base");
  ASSERT_EQ(quill(train(base) + " --steps 2 --global-batch 2 --save " + base + "/checkpoint").status, 0);
  const std::string a = fresh_temp_dir("megatron", "resumed"), b = fresh_temp_dir("megatron", "loaded");
  ASSERT_EQ(quill(train(a) + " --steps 3 --global-batch 2 --resume " + base + "/checkpoint").status, 0);
  CommandResult r = quill(train(b) + " --train-iters 3 --global-batch-size 2 --load " + base + "/checkpoint");
  ASSERT_EQ(r.status, 0) << r.output;
  expect_same_run(a, b);
  EXPECT_EQ(read_metrics(b).front()["step"].get<int>(), 2);
}

TEST(MegatronNames, BothNamesWithDifferentValuesAreRefusedNamingBoth) {
  CommandResult r = quill(train(fresh_temp_dir("megatron", "conflict")) + " --steps 2 --train-iters 3 --global-batch 2");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("quill: error: --steps 2 and --train-iters 3: --train-iters is Megatron's name for --steps"),
            std::string::npos)
      << r.output;
  r = quill(train(fresh_temp_dir("megatron", "conflict2")) + " --steps 2 --global-batch 2 --beta1 0.9 --adam-beta1 0.8");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("--beta1 0.9 and --adam-beta1 0.8"), std::string::npos) << r.output;
}

TEST(MegatronNames, AFlagWithoutEquivalentIsRefusedWithWhatToUse) {
  const std::string out = fresh_temp_dir("megatron", "refused");
  for (const auto& [flag, message] : std::vector<std::pair<std::string, std::string>>{
           {" --fp16", "quill: error: --fp16: Megatron's flag (fp16 parameters and activations) has no equivalent in "
                       "quill train: quill computes in bf16 on --device cuda"},
           {" --num-layers 4", "--num-layers: Megatron's flag (model shape) has no equivalent in quill train: the "
                               "model's shape is its config.json"}}) {
    const CommandResult refused = quill(train(out) + " --steps 2 --global-batch 2" + flag);
    EXPECT_EQ(refused.status, 1) << refused.output;
    EXPECT_EQ(lines(refused.output), 1u) << refused.output;
    EXPECT_NE(refused.output.find(message), std::string::npos) << refused.output;
  }
  CommandResult r;
  // A value quill cannot take, named with the one it can.
  r = quill(train(out) + " --steps 2 --global-batch 2 --micro-batch-size 4");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("--micro-batch-size 4: quill runs one row per micro-batch"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("give --micro-batch-size 1 or leave it out"), std::string::npos) << r.output;
  // The required flag, under either name.
  r = quill(train(out) + " --global-batch 2");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("--steps is required (or Megatron's --train-iters)"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(out)) << "a refused run writes nothing";
}

TEST(MegatronNames, FlagsNotHonouredAreAcceptedAndNamedInOneWarning) {
  const std::string out = fresh_temp_dir("megatron", "ignored");
  const CommandResult r =
      quill(train(out) + " --steps 2 --global-batch 2 --use-wandb --wandb-project p --wandb-group g --timing-log-level 1");
  ASSERT_EQ(r.status, 0) << r.output;
  size_t warnings = 0;
  for (size_t at = r.output.find("not honoured"); at != std::string::npos; at = r.output.find("not honoured", at + 1))
    ++warnings;
  EXPECT_EQ(warnings, 1u) << r.output;
  EXPECT_NE(r.output.find("warning: not honoured (accepted, nothing done): --timing-log-level, --use-wandb, "
                          "--wandb-project, --wandb-group; "),
            std::string::npos)
      << r.output;
  EXPECT_EQ(read_metrics(out).size(), 2u);
}

TEST(MegatronNames, AMistypedFlagNamesTheNearestKnownOne) {
  // The misspelt required flag is reported as what it is, not as --steps missing.
  CommandResult r = quill(train(fresh_temp_dir("megatron", "typo")) + " --trian-iters 2 --global-batch 2");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_EQ(lines(r.output), 1u) << r.output;
  EXPECT_NE(r.output.find("quill: error: quill train: unknown flag --trian-iters; did you mean --train-iters?"),
            std::string::npos)
      << r.output;
  r = quill(train(fresh_temp_dir("megatron", "typo2")) + " --steps 2 --global-batch 2 --lr-warmup-fractoin 0.1");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_EQ(lines(r.output), 1u) << r.output;
  EXPECT_NE(r.output.find("unknown flag --lr-warmup-fractoin; did you mean --lr-warmup-fraction?"), std::string::npos)
      << r.output;
  // Nothing near: the line says where the flags are listed.
  r = quill(train(fresh_temp_dir("megatron", "typo3")) + " --steps 2 --global-batch 2 --zzzzzzzz");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("unknown flag --zzzzzzzz (quill train --help lists its flags)"), std::string::npos) << r.output;
}

TEST(MegatronNames, HelpListsTheNamesAndAnUnknownCommandIsAnError) {
  CommandResult r = quill("train --help");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("--train-iters"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("--fp16"), std::string::npos) << "refused names are hidden";

  r = quill("frobnicate --help");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_EQ(lines(r.output), 1u) << r.output;
  EXPECT_NE(r.output.find("quill: error: unknown command 'frobnicate'"), std::string::npos) << r.output;
  r = quill("trian --help");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("unknown command 'trian'; did you mean 'quill train'?"), std::string::npos) << r.output;
  r = quill("data snyth --out x");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("quill data: unknown command 'snyth'; did you mean 'quill data synth'?"), std::string::npos)
      << r.output;
}

}  // namespace
