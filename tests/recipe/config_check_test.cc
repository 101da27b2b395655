// The configuration check (recipes-and-measurement.md §5): a layout-only change passes; a numerics
// change fails; a setting the project does not know is unknown and fails.
#include <gtest/gtest.h>

#include <algorithm>

#include "base/file_util.h"
#include "recipe/config_check.h"
#include "recipe_test_util.h"

namespace quill {
namespace {

Recipe seed() { return read_recipe(test::seed_path()); }

Recipe seed_with(const std::vector<std::pair<std::string, std::string>>& edits) {
  std::string text = read_file(test::seed_path());
  for (const auto& [from, to] : edits) test::replace_once(text, from, to);
  return parse_recipe(text, "edited.yaml");
}

const SettingDiff* find(const ConfigCheckResult& r, const std::string& setting) {
  auto it = std::find_if(r.differences.begin(), r.differences.end(),
                         [&](const SettingDiff& d) { return d.setting == setting; });
  return it == r.differences.end() ? nullptr : &*it;
}

TEST(ConfigCheck, SeedAgainstItselfPassesWithNoDifferences) {
  ConfigCheckResult r = check_config(seed(), seed());
  EXPECT_TRUE(r.passed);
  EXPECT_TRUE(r.differences.empty()) << r.to_json().dump(2);
  EXPECT_FALSE(r.notes.empty());  // MODEL_ARGS and the unresolved paths are named
}

TEST(ConfigCheck, ADifferentLayoutPasses) {
  // The layout section and the flags that place the work both change.
  Recipe c = seed_with({{"--tensor-model-parallel-size 4", "--tensor-model-parallel-size 2"},
                        {"--pipeline-model-parallel-size 4", "--pipeline-model-parallel-size 8"},
                        {"--decoder-first-pipeline-num-layers 12", "--decoder-first-pipeline-num-layers 7"},
                        {"--expert-model-parallel-size 8", "--expert-model-parallel-size 4"},
                        {"--optimizer-offload-fraction 0.7 \\", "--optimizer-offload-fraction 1.0 \\"},
                        {"--micro-batch-size 1", "--micro-batch-size 2"},
                        {"--distributed-timeout-minutes 30", "--distributed-timeout-minutes 60"},
                        {"NCCL_NVLS_ENABLE: '0'", "NCCL_NVLS_ENABLE: '1'"}});
  c.layout.tp = 2;
  c.layout.pp = 8;
  c.layout.ep = 4;
  c.layout.dp = 2;
  c.layout.layer_split = LayerSplit{7, 5};
  c.layout.offload->optimizer_fraction = 1.0;
  c.layout.rows_per_microbatch = 2;
  c.layout.label = "TP2 PP8 EP4 DP2";  // description: not a setting
  c.gpu.count = 32;
  ConfigCheckResult r = check_config(c, seed());
  EXPECT_TRUE(r.passed) << r.to_json().dump(2);
  for (const SettingDiff& d : r.differences) EXPECT_EQ(d.cls, SettingClass::Placement) << d.setting;
  for (const char* s : {"layout.tp", "layout.pp", "layout.ep", "layout.layer_split.first", "layout.layer_split.last",
                        "layout.offload.optimizer_fraction", "--tensor-model-parallel-size",
                        "--optimizer-offload-fraction", "--micro-batch-size", "--distributed-timeout-minutes",
                        "env.NCCL_NVLS_ENABLE"})
    EXPECT_TRUE(find(r, s)) << s << "\n" << r.to_json().dump(2);
  EXPECT_FALSE(find(r, "layout.label"));
  const SettingDiff* tp = find(r, "layout.tp");
  EXPECT_EQ(tp->candidate, "2");
  EXPECT_EQ(tp->reference, "4");
  EXPECT_EQ(r.to_json()["result"], "pass");
}

TEST(ConfigCheck, ADifferentLearningRateFailsAsNumerics) {
  ConfigCheckResult r = check_config(seed_with({{"--lr 1e-5", "--lr 2e-5"}}), seed());
  EXPECT_FALSE(r.passed);
  ASSERT_EQ(r.differences.size(), 1u) << r.to_json().dump(2);
  EXPECT_EQ(r.differences[0].setting, "--lr");
  EXPECT_EQ(r.differences[0].cls, SettingClass::Numerics);
  EXPECT_EQ(r.differences[0].candidate, "2.0e-05");
  EXPECT_EQ(r.to_json()["counts"]["numerics"], 1);
}

TEST(ConfigCheck, BfloatMomentsFailAsNumericsAndOffloadPassesAsPlacement) {
  // Megatron's precision-aware optimizer flags change the arithmetic's results (bf16 moments round
  // on every store): numerics. The offload flags only move the same arithmetic: placement.
  ConfigCheckResult r = check_config(
      seed_with({{"--optimizer-offload-fraction 0.7 \\",
                  "--optimizer-offload-fraction 0.3 --exp-avg-dtype bf16 "
                  "--exp-avg-sq-dtype bf16 --main-grads-dtype fp32 \\"}}),
      seed());
  EXPECT_FALSE(r.passed);
  for (const char* s : {"--exp-avg-dtype", "--exp-avg-sq-dtype"}) {
    const SettingDiff* d = find(r, s);
    ASSERT_TRUE(d) << s << "\n" << r.to_json().dump(2);
    EXPECT_EQ(d->cls, SettingClass::Numerics) << s;
  }
  EXPECT_EQ(find(r, "--exp-avg-dtype")->candidate, "bf16");
  EXPECT_EQ(find(r, "--exp-avg-dtype")->reference, "fp32");  // Megatron's default, named in the flag table
  EXPECT_FALSE(find(r, "--main-grads-dtype"));               // fp32 given = the default: no difference
  const SettingDiff* f = find(r, "--optimizer-offload-fraction");
  ASSERT_TRUE(f) << r.to_json().dump(2);
  EXPECT_EQ(f->cls, SettingClass::Placement);

  // Offload alone (fraction, switch, overlap) passes.
  ConfigCheckResult p = check_config(
      seed_with({{"--optimizer-offload-fraction 0.7 \\", "--optimizer-offload-fraction 0.3 \\"}}), seed());
  EXPECT_TRUE(p.passed) << p.to_json().dump(2);
}

TEST(ConfigCheck, Fp8FlagsFailAsNumerics) {
  // FP8 GEMMs round their operands to E4M3: the function computed changes (docs/fp8.md).
  ConfigCheckResult r =
      check_config(seed_with({{"--lr 1e-5", "--lr 1e-5 --fp8-format e4m3 --fp8-recipe blockwise"}}), seed());
  EXPECT_FALSE(r.passed);
  for (const char* s : {"--fp8-format", "--fp8-recipe"}) {
    const SettingDiff* d = find(r, s);
    ASSERT_TRUE(d) << s << "\n" << r.to_json().dump(2);
    EXPECT_EQ(d->cls, SettingClass::Numerics) << s;
  }
  EXPECT_EQ(find(r, "--fp8-format")->candidate, "e4m3");
  EXPECT_EQ(find(r, "--fp8-recipe")->candidate, "blockwise");
}

TEST(ConfigCheck, SameValuesSpelledDifferentlyAreNoDifference) {
  ConfigCheckResult r = check_config(
      seed_with({{"--lr 1e-5", "--lr 0.00001 --adam-eps 1e-8 --clip-grad 1.0 --seed 1234"}}), seed());
  EXPECT_TRUE(r.passed) << r.to_json().dump(2);
  EXPECT_TRUE(r.differences.empty()) << r.to_json().dump(2);
}

TEST(ConfigCheck, UnknownFlagDifferenceFailsAsUnknown) {
  ConfigCheckResult r = check_config(seed_with({{"--megatron-to-hf-mode raw", "--megatron-to-hf-mode bridge"}}), seed());
  EXPECT_FALSE(r.passed);
  ASSERT_EQ(r.differences.size(), 1u);
  EXPECT_EQ(r.differences[0].setting, "--megatron-to-hf-mode");
  EXPECT_EQ(r.differences[0].cls, SettingClass::Unknown);

  ConfigCheckResult added = check_config(seed_with({{"--bf16 \\\n", "--bf16 --brand-new-knob 3 \\\n"}}), seed());
  EXPECT_FALSE(added.passed);
  const SettingDiff* d = find(added, "--brand-new-knob");
  ASSERT_TRUE(d) << added.to_json().dump(2);
  EXPECT_EQ(d->cls, SettingClass::Unknown);
  EXPECT_EQ(d->candidate, "3");
  EXPECT_FALSE(d->reference);
}

TEST(ConfigCheck, WorkloadModelAndUnknownFieldsAreClassed) {
  Recipe c = seed();
  c.workload.global_batch = 256;
  c.model = "Inkling";
  ConfigCheckResult r = check_config(c, seed());
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(find(r, "workload.global_batch")->cls, SettingClass::Numerics);
  EXPECT_EQ(find(r, "model")->cls, SettingClass::Numerics);

  ConfigCheckResult u = check_config(seed_with({{"  dispatcher: alltoall\n", "  dispatcher: alltoall\n  new_knob: 2\n"},
                                                {"  FI_PROVIDER: efa\n", "  FI_PROVIDER: efa\n  NVTE_SOMETHING: '1'\n"}}),
                                     seed());
  EXPECT_FALSE(u.passed);
  EXPECT_EQ(find(u, "layout.new_knob")->cls, SettingClass::Unknown);
  EXPECT_EQ(find(u, "env.NVTE_SOMETHING")->cls, SettingClass::Unknown);
}

TEST(ConfigCheck, ScriptExportsAreCompared) {
  ConfigCheckResult nccl = check_config(seed_with({{"export NCCL_NVLS_ENABLE=0", "export NCCL_NVLS_ENABLE=1"}}), seed());
  EXPECT_TRUE(nccl.passed) << nccl.to_json().dump(2);
  ASSERT_TRUE(find(nccl, "run.$NCCL_NVLS_ENABLE"));
  EXPECT_EQ(find(nccl, "run.$NCCL_NVLS_ENABLE")->cls, SettingClass::Placement);
  ConfigCheckResult other =
      check_config(seed_with({{"export FI_PROVIDER=efa\n", "export FI_PROVIDER=efa\n  export TE_KNOB=1\n"}}), seed());
  EXPECT_FALSE(other.passed);
  EXPECT_EQ(find(other, "run.$TE_KNOB")->cls, SettingClass::Unknown);
}

TEST(ConfigCheck, ExpandedModelArgsAreCompared) {
  ConfigCheckOptions o;
  o.set["MODEL_ARGS"] = "--num-layers 42";
  ConfigCheckResult same = check_config(seed(), seed(), o);
  EXPECT_TRUE(same.passed);
  Recipe c = seed_with({{"\"${MODEL_ARGS[@]}\"", "--num-layers 41"}});
  ConfigCheckResult r = check_config(c, seed(), o);
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(find(r, "--num-layers")->cls, SettingClass::Numerics);
}

}  // namespace
}  // namespace quill
