// The run-script reader: the seed's flags read to the values of recipes-and-measurement.md §3, with
// Megatron's defaults where the flags are silent, and the shell forms launch scripts use.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "recipe/run_definition.h"
#include "recipe/run_flags.h"
#include "recipe/validate.h"
#include "recipe_test_util.h"

namespace quill {
namespace {

RunFlags seed_flags(const VarMap& set = {}) {
  Recipe r = read_recipe(test::seed_path());
  return parse_run_flags(r.run, recipe_variables(r), set);
}

TEST(RunFlags, SeedDefinesTheRunOfTheSpec) {
  RunFlags f = seed_flags();
  ASSERT_TRUE(f.found);
  EXPECT_EQ(f.program, "python3 train.py");
  RunDefinition d = run_definition(f);
  EXPECT_EQ(d.optimizer, "adam");
  EXPECT_DOUBLE_EQ(*d.lr, 1e-5);
  EXPECT_DOUBLE_EQ(d.min_lr, 1e-6);
  EXPECT_EQ(d.lr_decay_style, "cosine");
  EXPECT_DOUBLE_EQ(*d.lr_warmup_fraction, 0.1);
  EXPECT_FALSE(d.lr_decay_iters);
  EXPECT_DOUBLE_EQ(d.weight_decay, 0.1);
  EXPECT_DOUBLE_EQ(d.adam_beta1, 0.9);
  EXPECT_DOUBLE_EQ(d.adam_beta2, 0.98);
  EXPECT_EQ(d.global_batch_size, 128);
  EXPECT_EQ(d.micro_batch_size, 1);
  EXPECT_EQ(d.num_rollout, 20);
  EXPECT_EQ(d.rollout_batch_size, 128);
  EXPECT_EQ(d.train_steps, 20);
  EXPECT_DOUBLE_EQ(d.distributed_timeout_minutes, 30);  // quill run bounds its collectives by it
  EXPECT_FALSE(d.save_interval);                         // so quill run writes no checkpoint
  EXPECT_TRUE(d.bf16);
  EXPECT_TRUE(d.calculate_per_token_loss);
  EXPECT_EQ(d.loss_type, "sft_loss");
  EXPECT_DOUBLE_EQ(d.attention_dropout, 0.0);
  EXPECT_DOUBLE_EQ(d.hidden_dropout, 0.0);
  // Megatron's defaults where the flags are silent.
  EXPECT_DOUBLE_EQ(d.adam_eps, 1e-8);
  EXPECT_EQ(d.origin.at("adam-eps"), "default");
  EXPECT_DOUBLE_EQ(d.clip_grad, 1.0);
  EXPECT_EQ(d.origin.at("clip-grad"), "default");
  EXPECT_EQ(d.seed, 1234);
  EXPECT_EQ(d.origin.at("lr"), "flag");
  // Layout flags.
  EXPECT_EQ(d.tp, 4);
  EXPECT_EQ(d.pp, 4);
  EXPECT_EQ(d.cp, 1);
  EXPECT_EQ(d.ep, 8);
  EXPECT_EQ(d.etp, 1);
  EXPECT_TRUE(d.sequence_parallel);
  EXPECT_EQ(d.first_stage_layers, 12);
  EXPECT_FALSE(d.last_stage_layers);
  EXPECT_EQ(d.world_size, 32);
  EXPECT_EQ(d.recompute_granularity, "full");
  EXPECT_EQ(d.recompute_method, "uniform");
  EXPECT_EQ(d.recompute_num_layers, 1);
  EXPECT_TRUE(d.optimizer_cpu_offload);
  EXPECT_DOUBLE_EQ(d.optimizer_offload_fraction, 0.7);
  EXPECT_TRUE(d.overlap_cpu_optimizer_d2h_h2d);
  EXPECT_TRUE(d.use_distributed_optimizer);
  EXPECT_TRUE(d.use_precision_aware_optimizer);
  EXPECT_EQ(d.hf_checkpoint, "$HF_CKPT");
  EXPECT_EQ(d.origin.at("hf-checkpoint"), "unresolved");
  EXPECT_TRUE(d.problems.empty()) << d.problems.front();
}

TEST(RunFlags, SeedScheduleGivesTheSpecsLearningRates) {
  RunDefinition d = run_definition(seed_flags());
  const LrSchedule s = d.lr_schedule();
  const double expect[20] = {0,        5e-06,    1e-05,    9.932e-06, 9.729e-06, 9.397e-06, 8.947e-06,
                             8.393e-06, 7.75e-06, 7.039e-06, 6.281e-06, 5.5e-06,   4.719e-06, 3.961e-06,
                             3.25e-06, 2.607e-06, 2.053e-06, 1.603e-06, 1.271e-06, 1.068e-06};
  for (int k = 0; k < 20; ++k) EXPECT_NEAR(s.lr_at(k, *d.train_steps), expect[k], 5e-10) << "step " << k;
  AdamWConfig a = d.adamw();
  EXPECT_DOUBLE_EQ(a.beta2, 0.98);
  EXPECT_DOUBLE_EQ(a.eps, 1e-8);
  EXPECT_DOUBLE_EQ(a.weight_decay, 0.1);
  EXPECT_DOUBLE_EQ(a.clip_grad, 1.0);
}

TEST(RunFlags, EveryFlagIsClassedOrReportedUnknown) {
  RunFlags f = seed_flags();
  EXPECT_EQ(f.unknown, (std::vector<std::string>{"--megatron-to-hf-mode", "--disable-compute-advantages-and-returns",
                                                 "--debug-train-only"}));
  size_t unknown = 0;
  for (const ParsedFlag& p : f.flags) {
    if (!p.spec) ++unknown;
    else EXPECT_NE(p.cls(), SettingClass::Unknown) << p.name;
  }
  EXPECT_EQ(unknown, 3u);
  EXPECT_EQ(f.flags.size(), 50u);  // every flag of the seed's command, none dropped
  EXPECT_EQ(f.find("tensor-model-parallel-size")->cls(), SettingClass::Placement);
  EXPECT_EQ(f.find("lr")->cls(), SettingClass::Numerics);
  EXPECT_EQ(f.find("distributed-timeout-minutes")->cls(), SettingClass::Launcher);
  EXPECT_EQ(f.find("optimizer-offload-fraction")->cls(), SettingClass::Placement);
  EXPECT_EQ(f.find("megatron-to-hf-mode")->value(), "raw");
  EXPECT_TRUE(f.problems.empty()) << f.problems.front();
}

TEST(RunFlags, ModelArgsAreReportedWithTheirSource) {
  RunFlags f = seed_flags();
  ASSERT_EQ(f.unexpanded.size(), 1u);
  EXPECT_EQ(f.unexpanded[0].name, "MODEL_ARGS");
  EXPECT_EQ(f.unexpanded[0].source,
            "the output of `python3 miles/utils/external_utils/model_args_utils.py inkling-small`");
  EXPECT_EQ(f.unresolved, (std::vector<std::string>{"HF_CKPT", "TORCH_DIST", "SFT_DATA"}));
  // The script's exports are known variables.
  EXPECT_EQ(f.variables.at("NCCL_NVLS_ENABLE"), "0");
}

TEST(RunFlags, SetSuppliesVariablesAndArrays) {
  RunFlags f = seed_flags({{"HF_CKPT", "/models/inkling-small"},
                           {"MODEL_ARGS_LINE", "--num-layers 42 --hidden-size 4096 --swiglu"}});
  EXPECT_TRUE(f.unexpanded.empty());
  EXPECT_EQ(f.find("hf-checkpoint")->value(), "/models/inkling-small");
  EXPECT_TRUE(f.find("hf-checkpoint")->unresolved.empty());
  EXPECT_EQ(f.find("num-layers")->value(), "42");
  EXPECT_EQ(f.find("swiglu")->cls(), SettingClass::Numerics);
  EXPECT_EQ(f.unresolved, (std::vector<std::string>{"TORCH_DIST", "SFT_DATA"}));
}

TEST(RunFlags, ShellForms) {
  const std::string script = R"(#!/bin/bash
set -e
# a comment with --not-a-flag
BASE=/data
LR=2e-5
PERF_ARGS=(
   --tensor-model-parallel-size 2   # trailing comment
   --sequence-parallel
)
OPT_ARGS=(--lr "$LR" --min-lr=1e-6 '--lr-decay-style' cosine)
OPT_ARGS+=(--clip-grad 0.5)
ray job submit --address="http://127.0.0.1:8265" --no-wait -- python3 train.py \
   ${PERF_ARGS[@]} \
   "${OPT_ARGS[@]}" \
   --prompt-data "${BASE}/rows.parquet" \
   --save ${SAVE_DIR:-/tmp/ckpt} \
   --weight-decay 0.1 --weight-decay 0.2 \
   --data-path a b c \
   --some-new-flag x y \
   --bf16 > train.log 2>&1
echo done --ignored-flag
)";
  RunFlags f = parse_run_flags(script);
  ASSERT_TRUE(f.found);
  EXPECT_EQ(f.program, "python3 train.py");
  RunDefinition d = run_definition(f);
  EXPECT_EQ(d.tp, 2);
  EXPECT_TRUE(d.sequence_parallel);
  EXPECT_DOUBLE_EQ(*d.lr, 2e-5);
  EXPECT_DOUBLE_EQ(d.min_lr, 1e-6);
  EXPECT_EQ(d.lr_decay_style, "cosine");
  EXPECT_DOUBLE_EQ(d.clip_grad, 0.5);
  EXPECT_DOUBLE_EQ(d.weight_decay, 0.2);  // the last one wins, as in argparse
  EXPECT_TRUE(d.bf16);
  EXPECT_EQ(f.find("prompt-data")->value(), "/data/rows.parquet");
  EXPECT_EQ(f.find("save")->value(), "/tmp/ckpt");
  EXPECT_EQ(f.find("data-path")->values, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(f.find("some-new-flag")->values, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(f.unknown, (std::vector<std::string>{"--some-new-flag"}));
  EXPECT_TRUE(f.unexpanded.empty());
  EXPECT_TRUE(f.unresolved.empty());
  ASSERT_EQ(f.problems.size(), 1u);
  EXPECT_NE(f.problems[0].find("--weight-decay is given more than once"), std::string::npos);
  EXPECT_FALSE(f.find("ignored-flag"));
  EXPECT_FALSE(f.find("address"));
  EXPECT_TRUE(f.exported.empty());  // plain shell variables do not reach the environment
}

TEST(RunFlags, ExportsReachTheTrainingCommand) {
  RunFlags f = parse_run_flags("export A=1\nB=2\nexport B\nC=3\nD=4 python3 train.py --lr 1e-5\nexport E=5\n");
  EXPECT_EQ(f.exported, (VarMap{{"A", "1"}, {"B", "2"}, {"D", "4"}}));
  RunFlags seed = seed_flags();
  EXPECT_EQ(seed.exported.size(), 10u);
  EXPECT_EQ(seed.exported.at("TRITON_CACHE_DIR"), "$KERNEL_CACHE/triton");
}

TEST(RunFlags, StraySwitchValueAndMissingValueAreProblems) {
  RunFlags f = parse_run_flags("python3 train.py --bf16 yes --lr\n");
  ASSERT_EQ(f.problems.size(), 2u);
  EXPECT_NE(f.problems[0].find("stray word 'yes'"), std::string::npos) << f.problems[0];
  EXPECT_NE(f.problems[1].find("--lr has no value"), std::string::npos) << f.problems[1];
  RunDefinition d = run_definition(f);
  EXPECT_FALSE(d.lr);
}

TEST(RunFlags, UnresolvedNumberIsReported) {
  RunFlags f = parse_run_flags("python3 train.py --lr $LR --global-batch-size 64\n");
  EXPECT_EQ(f.unresolved, (std::vector<std::string>{"LR"}));
  RunDefinition d = run_definition(f);
  EXPECT_FALSE(d.lr);
  EXPECT_EQ(d.origin.at("lr"), "unresolved");
  ASSERT_FALSE(d.problems.empty());
  EXPECT_NE(d.problems[0].find("--lr '$LR' uses LR without a value"), std::string::npos) << d.problems[0];
  RunDefinition e = run_definition(parse_run_flags("python3 train.py --lr $LR\n", {}, {{"LR", "3e-4"}}));
  EXPECT_DOUBLE_EQ(*e.lr, 3e-4);
}

TEST(RunFlags, EffectiveFlagsNormaliseValuesAndApplyDefaults) {
  auto a = effective_flags(parse_run_flags("python3 train.py --lr 1e-5 --tensor-model-parallel-size 4\n"));
  auto b = effective_flags(parse_run_flags("python3 train.py --lr 0.00001 --adam-eps 1e-8 --clip-grad 1 "
                                           "--tensor-model-parallel-size=4 --expert-tensor-parallel-size 4\n"));
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.at("lr"), "1.0e-05");
  EXPECT_EQ(a.at("expert-tensor-parallel-size"), "4");
  EXPECT_EQ(a.at("bf16"), "false");
  EXPECT_FALSE(a.count("global-batch-size"));  // no default
}

TEST(RunFlags, Fp8FlagsAreReadAndUnsetWhenAbsent) {
  const RunDefinition d =
      run_definition(parse_run_flags("python3 train.py --lr 1e-5 --fp8-format e4m3 --fp8-recipe blockwise\n"));
  EXPECT_EQ(d.fp8_format, std::optional<std::string>("e4m3"));
  EXPECT_EQ(d.fp8_recipe, std::optional<std::string>("blockwise"));
  const RunDefinition e = run_definition(parse_run_flags("python3 train.py --lr 1e-5\n"));
  EXPECT_FALSE(e.fp8_format);
  EXPECT_FALSE(e.fp8_recipe);
  EXPECT_FALSE(effective_flags(parse_run_flags("python3 train.py --lr 1e-5\n")).count("fp8-recipe"));
}

TEST(RunFlags, NoTrainingCommand) {
  RunFlags f = parse_run_flags("echo hello\nexport X=1\n");
  EXPECT_FALSE(f.found);
  EXPECT_TRUE(f.flags.empty());
}

TEST(RunFlags, FlagTableHasNoDuplicates) {
  std::vector<std::string> names;
  for (const FlagSpec& f : flag_table()) names.push_back(f.name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end());
  EXPECT_EQ(find_flag("--tensor_model_parallel_size"), find_flag("tensor-model-parallel-size"));
}

}  // namespace
}  // namespace quill
