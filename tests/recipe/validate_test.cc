// Recipe validation: the seed is valid (with warnings for what its flags say that the layout does
// not, and for the flags the reader does not understand); each rule, broken in turn, names its field.
#include <gtest/gtest.h>

#include <algorithm>

#include "base/file_util.h"
#include "parallel/stage_split.h"
#include "recipe/recipe_keys.h"
#include "recipe/validate.h"
#include "recipe_test_util.h"

namespace quill {
namespace {

bool has_problem(const std::vector<Problem>& problems, const std::string& field) {
  return std::any_of(problems.begin(), problems.end(), [&](const Problem& p) { return p.field == field; });
}

std::string all(const std::vector<Problem>& problems) {
  std::string s;
  for (const Problem& p : problems) s += p.text() + "\n";
  return s;
}

bool has_warning(const RecipeCheck& c, const std::string& part) {
  return std::any_of(c.warnings.begin(), c.warnings.end(),
                     [&](const std::string& w) { return w.find(part) != std::string::npos; });
}

Recipe seed() { return read_recipe(test::seed_path()); }

TEST(Validate, SeedIsValidWithWarnings) {
  RecipeCheck c = check_recipe(seed());
  EXPECT_TRUE(c.problems.empty()) << all(c.problems);
  EXPECT_EQ(c.num_layers, 42);
  EXPECT_TRUE(has_warning(c, "layout.recompute: the recipe says none, the flags")) << c.warnings.front();
  EXPECT_TRUE(has_warning(c, "--megatron-to-hf-mode is not understood"));
  EXPECT_TRUE(has_warning(c, "--debug-train-only is not understood"));
  EXPECT_TRUE(has_warning(c, "--disable-compute-advantages-and-returns is not understood"));
  EXPECT_TRUE(has_warning(c, "\"${MODEL_ARGS[@]}\" is not expanded"));
  EXPECT_TRUE(has_warning(c, "HF_CKPT has no value"));
  // The layout's sizes agree with the flags: no warning about them.
  EXPECT_FALSE(has_warning(c, "layout.tp"));
  EXPECT_FALSE(has_warning(c, "layout.dp"));
  EXPECT_FALSE(has_warning(c, "layout.layer_split"));
  EXPECT_FALSE(has_warning(c, "layout.offload"));
  EXPECT_FALSE(has_warning(c, "workload.global_batch"));
  EXPECT_FALSE(has_warning(c, "result.steps_per_run"));
}

TEST(Validate, SeedLayerSplitIs12And10And10And10) {
  StageSplit s = split_layers(42, 4, 12, 10);
  EXPECT_TRUE(s.error.empty()) << s.error;
  EXPECT_EQ(s.layers, (std::vector<int64_t>{12, 10, 10, 10}));
  EXPECT_EQ(split_layers(42, 4, 12, std::nullopt).layers, (std::vector<int64_t>{12, 10, 10, 10}));
  EXPECT_EQ(split_layers(42, 1, std::nullopt, std::nullopt).layers, (std::vector<int64_t>{42}));
  EXPECT_EQ(split_layers(42, 2, 20, 22).layers, (std::vector<int64_t>{20, 22}));
  EXPECT_EQ(split_layers(42, 6, std::nullopt, std::nullopt).layers, (std::vector<int64_t>{7, 7, 7, 7, 7, 7}));
  EXPECT_FALSE(split_layers(42, 4, 11, 10).error.empty());  // 21 over 2 middle stages
  EXPECT_FALSE(split_layers(42, 2, 12, 10).error.empty());  // 22 != 42
  EXPECT_FALSE(split_layers(42, 4, 40, 10).error.empty());  // more than the model
}

TEST(Validate, EachRuleNamesItsField) {
  ValidateOptions o{42, 20};
  {
    Recipe r = seed();
    r.schema_version = 2;
    EXPECT_TRUE(has_problem(validate_recipe(r, o), "schema_version"));
  }
  {
    Recipe r = seed();
    r.gpu.count = 16;  // tp*pp*cp*dp = 32
    auto p = validate_recipe(r, o);
    EXPECT_TRUE(has_problem(p, "layout")) << all(p);
    EXPECT_NE(all(p).find("differs from gpu.count 16"), std::string::npos) << all(p);
  }
  {
    Recipe r = seed();
    r.layout.ep = 16;  // 16 does not divide tp*cp*dp = 8
    EXPECT_TRUE(has_problem(validate_recipe(r, o), "layout.ep"));
    r.layout.ep = 4;
    r.layout.etp = 2;  // 8 divides 8
    EXPECT_FALSE(has_problem(validate_recipe(r, o), "layout.ep"));
  }
  {
    Recipe r = seed();
    r.layout.layer_split->first = 11;  // 21 layers over 2 middle stages
    auto p = validate_recipe(r, o);
    EXPECT_TRUE(has_problem(p, "layout.layer_split")) << all(p);
    // Without the layer count the split cannot be checked.
    EXPECT_FALSE(has_problem(validate_recipe(r, {std::nullopt, 20}), "layout.layer_split"));
  }
  {
    Recipe r = seed();
    r.layout.layer_split->first = 14;  // 14 + 10 + 2 x 9 = 42: fine
    EXPECT_FALSE(has_problem(validate_recipe(r, o), "layout.layer_split"));
  }
  {
    Recipe r = seed();
    r.workload.precision = "bf15";
    EXPECT_TRUE(has_problem(validate_recipe(r, o), "workload.precision"));
  }
  {
    Recipe r = seed();
    r.workload.global_batch = 127;  // not a multiple of dp 2 x 1 row
    EXPECT_TRUE(has_problem(validate_recipe(r, o), "workload.global_batch"));
  }
  {
    Recipe r = seed();
    r.layout.rows_per_microbatch = 3;  // 128 % 6
    EXPECT_TRUE(has_problem(validate_recipe(r, o), "workload.global_batch"));
  }
  {
    Recipe r = seed();
    r.result->window = std::vector<int64_t>{5, 20};  // a 20-step run ends at step 19
    EXPECT_TRUE(has_problem(validate_recipe(r, o), "result.window"));
    r.result->window = std::vector<int64_t>{7, 3};
    EXPECT_TRUE(has_problem(validate_recipe(r, o), "result.window"));
  }
  {
    Recipe r = seed();
    r.result->window_tokens = 1000;
    EXPECT_TRUE(has_problem(validate_recipe(r, o), "result.window_tokens"));
  }
  {
    Recipe r = seed();
    r.result->window.reset();
    r.result->steps_per_run = 12;  // the default [5, 11] holds 7 steps
    EXPECT_TRUE(has_problem(validate_recipe(r, o), "result.window"));
    r.result->steps_per_run = 13;
    r.result->window_tokens.reset();
    EXPECT_FALSE(has_problem(validate_recipe(r, o), "result.window")) << all(validate_recipe(r, o));
  }
  {
    Recipe r = seed();
    r.layout.offload->optimizer_fraction = 1.5;
    EXPECT_TRUE(has_problem(validate_recipe(r, o), "layout.offload.optimizer_fraction"));
  }
  {
    Recipe r = seed();
    r.result->mfu = 4.18;  // a percentage where a fraction belongs
    EXPECT_TRUE(has_problem(validate_recipe(r, o), "result.mfu"));
  }
  {
    Recipe r = seed();
    r.layout.tp = 0;
    EXPECT_TRUE(has_problem(validate_recipe(r, o), "layout.tp"));
  }
}

TEST(Validate, LayoutDisagreeingWithTheFlagsIsAWarningNotAProblem) {
  std::string text = read_file(test::seed_path());
  test::replace_once(text, "--tensor-model-parallel-size 4", "--tensor-model-parallel-size 2");
  test::replace_once(text, "--optimizer-offload-fraction 0.7 \\", "--optimizer-offload-fraction 0.5 \\");
  test::replace_once(text, "--global-batch-size 128", "--global-batch-size 256");
  RecipeCheck c = check_recipe(parse_recipe(text));
  EXPECT_TRUE(c.problems.empty()) << all(c.problems);
  EXPECT_TRUE(has_warning(c, "layout.tp: the recipe says 4, the flags (--tensor-model-parallel-size) say 2"));
  EXPECT_TRUE(has_warning(c, "layout.offload.optimizer_fraction: the recipe says 0.7"));
  EXPECT_TRUE(has_warning(c, "workload.global_batch: the recipe says 128"));
  EXPECT_TRUE(has_warning(c, "layout.dp: the recipe says 2, the flags"));  // 32 / (2 x 4) = 4
  // 256 / 128 rollout samples: half a step per rollout.
  EXPECT_TRUE(has_warning(c, "is not a multiple of --global-batch-size"));
}

TEST(Validate, SettingTheModelArgsRemovesTheirWarnings) {
  Recipe r = seed();
  CheckOptions o;
  o.set["MODEL_ARGS"] = "--num-layers 42 --seq-length 8192 --moe-token-dispatcher-type alltoall";
  o.set["HF_CKPT"] = "/ckpt/hf";
  o.set["TORCH_DIST"] = "/ckpt/dist";
  o.set["SFT_DATA"] = "/data/rows.parquet";
  RecipeCheck c = check_recipe(r, o);
  EXPECT_TRUE(c.problems.empty()) << all(c.problems);
  EXPECT_FALSE(has_warning(c, "MODEL_ARGS"));
  EXPECT_FALSE(has_warning(c, "has no value"));
  EXPECT_FALSE(has_warning(c, "layout.dispatcher"));
  EXPECT_TRUE(has_warning(c, "layout.recompute"));
  EXPECT_EQ(c.definition.seq_length, 8192);
  EXPECT_EQ(c.definition.hf_checkpoint, "/ckpt/hf");
}

TEST(Validate, UnknownModelWarnsThatTheSplitIsUnchecked) {
  Recipe r = seed();
  r.model = "Some-Other-Model";
  RecipeCheck c = check_recipe(r);
  EXPECT_TRUE(has_warning(c, "layer count of 'Some-Other-Model' is not known"));
  CheckOptions o;
  o.num_layers = 31;  // 12 + 10 + 9 left for 2 stages
  RecipeCheck d = check_recipe(r, o);
  EXPECT_TRUE(has_problem(d.problems, "layout.layer_split")) << all(d.problems);
}

}  // namespace
}  // namespace quill

namespace quill {
namespace {

// Issue 15, defect 9: a misspelt key validated with 0 problems and `quill run` then used a default.
TEST(Validate, UnknownKeysAreProblemsNamingTheNearestKnownOne) {
  std::string text = read_file(test::seed_path());
  text += "layuot:\n  tp: 8\n";
  test::replace_once(text, "layout:\n  label:", "layout:\n  tpp: 2\n  label:");
  const Recipe r = parse_recipe(text, "typo.yaml");
  const std::vector<Problem> p = validate_recipe(r, {42, 20});
  ASSERT_TRUE(has_problem(p, "layuot")) << all(p);
  ASSERT_TRUE(has_problem(p, "layout.tpp")) << all(p);
  EXPECT_NE(all(p).find("layuot: unknown key (did you mean 'layout'?)"), std::string::npos) << all(p);
  EXPECT_NE(all(p).find("layout.tpp: unknown key (did you mean 'tp'?)"), std::string::npos) << all(p);
}

TEST(Validate, FreeFormSectionsTakeAnyKey) {
  std::string text = read_file(test::seed_path());
  test::replace_once(text, "\nenv:\n", "\nenv:\n  ANY_NAME: value\n");
  test::replace_once(text, "  recompute: null", "  recompute_typo: 1\n  recompute: null");
  const std::vector<Problem> p = validate_recipe(parse_recipe(text, "env.yaml"), {42, 20});
  EXPECT_FALSE(has_problem(p, "env.ANY_NAME")) << all(p);
  EXPECT_TRUE(has_problem(p, "layout.recompute_typo")) << all(p);
}

TEST(Validate, EditDistanceCountsSingleEdits) {
  EXPECT_EQ(edit_distance("layuot", "layout"), 2u);
  EXPECT_EQ(edit_distance("tpp", "tp"), 1u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("same", "same"), 0u);
}

}  // namespace
}  // namespace quill
