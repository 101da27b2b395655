// The ranking (tune/rank_layouts.h), the recipe it emits (tune/emit_recipe.h) and `quill tune` itself on
// tests/fixtures/configs/tiny-tp4.json over 8 GPUs: ranked best first; more offload is never faster; the
// expert groups' placement; the emitted recipe validates and `quill run`'s planning maps it back to the
// same layout and optimizer memory; the command prints the table, the refusals and the pruning.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "model/params.h"
#include "plan/comm_model.h"
#include "recipe/run_recipe.h"
#include "recipe/validate.h"
#include "tune/emit_recipe.h"
#include "tune/rank_layouts.h"
#include "util/command.h"

namespace quill::tune {
namespace {

namespace fs = std::filesystem;
const std::string kSrc = QUILL_SOURCE_DIR, kQuill = QUILL_BINARY;
const std::string kTiny = kSrc + "/tests/fixtures/configs/tiny-tp4.json";

std::string temp(const std::string& name) {
  std::string d = (fs::temp_directory_path() / ("quill-tune-" + std::to_string(::getpid()) + "-" + name)).string();
  fs::remove_all(d);
  return d;
}

RankRequest tiny_request() {
  RankRequest q;
  q.config = load_inkling_config(kTiny);
  q.row_tokens = 64;
  q.global_batch = 8;
  q.freeze = miles_frozen_patterns();
  q.comm = plan::h200_comm_params();
  q.comm.gpus_per_node = 4;
  q.rates = h200_compute_rates();
  q.price_per_gpu_hour = 2.0;
  return q;
}

Candidate candidate(const LayoutSpec& spec, const OptimizerMemory& opt) {
  Candidate c;
  c.layout = spec;
  c.optimizer = opt;
  c.split = spec.pp_layers.empty() ? "even" : "first/last";
  for (int s = 0; s < spec.pp; ++s) c.stage_device_bytes.push_back(1 << 20), c.stage_roles.push_back("stage");
  return c;
}

TEST(RankLayouts, BestFirstAndOffloadNeverFaster) {
  const RankRequest q = tiny_request();
  SearchRequest s;
  s.config = q.config;
  s.gpus = 8, s.gpus_per_node = 4, s.row_tokens = 64, s.global_batch = 8, s.device_memory = int64_t{1} << 40;
  s.freeze = q.freeze;
  const SearchResult found = search_layouts(s);
  const std::vector<RankedLayout> ranked = rank_layouts(found.fitting, q);
  ASSERT_EQ(ranked.size(), found.fitting.size());
  for (size_t i = 1; i < ranked.size(); ++i) EXPECT_GE(ranked[i - 1].tokens_per_s_per_gpu, ranked[i].tokens_per_s_per_gpu);
  for (const RankedLayout& r : ranked) {
    EXPECT_NEAR(r.tokens_per_s_per_gpu, 8.0 * 64 / r.step_s / 8, 1e-9 * r.tokens_per_s_per_gpu);
    EXPECT_NEAR(*r.usd_per_million_tokens, 2.0 / (r.tokens_per_s_per_gpu * 3600) * 1e6, 1e-9);
    EXPECT_FALSE(r.bound.empty());
    EXPECT_GT(r.bound_s, 0);
    EXPECT_LE(r.bound_s, r.step_s);
  }
  LayoutSpec l;
  l.tp = 2, l.sequence_parallel = true, l.pp = 2, l.dp = 2, l.ep = 2, l.pp_layers = {1, 3};
  OptimizerMemory none, some;
  some.cpu_offload = true, some.offload_fraction = 0.5, some.overlap_d2h_h2d = true;
  const RankedLayout a = project_candidate(candidate(l, none), q), b = project_candidate(candidate(l, some), q);
  EXPECT_LT(a.step_s, b.step_s);
  EXPECT_EQ(a.projection.stages.size(), 2u);
}

TEST(RankLayouts, ExpertGroupsInsideANode) {
  LayoutSpec l;
  l.dp = 8, l.ep = 4;
  EXPECT_TRUE(expert_groups_inside_nodes(l, 4));
  l.ep = 8;
  EXPECT_FALSE(expert_groups_inside_nodes(l, 4));
  EXPECT_TRUE(expert_groups_inside_nodes(l, 8));
}

TEST(EmitRecipe, ValidatesAndQuillRunMapsItBackToTheSameLayout) {
  const RankRequest q = tiny_request();
  LayoutSpec l;
  l.tp = 2, l.sequence_parallel = true, l.pp = 2, l.dp = 2, l.ep = 2, l.pp_layers = {1, 3};
  OptimizerMemory opt;
  opt.cpu_offload = true, opt.offload_fraction = 0.3, opt.overlap_d2h_h2d = true;
  opt.exp_avg = opt.exp_avg_sq = DType::BF16;
  const RankedLayout chosen = project_candidate(candidate(l, opt), q);
  EmitRequest e;
  e.model = "tiny-tp4", e.gpus_per_node = 4, e.row_tokens = 64, e.global_batch = 8;
  const std::string dir = temp("emit");
  fs::create_directories(dir);
  const std::string path = dir + "/tuned.yaml";
  write_recipe(path, tuned_recipe(chosen, e));
  const Recipe back = read_recipe(path);
  const RecipeCheck check = check_recipe(back, CheckOptions{});
  for (const Problem& p : check.problems) ADD_FAILURE() << p.field << ": " << p.message;
  // quill run's planning (the recipe's layout and run flags) on rows of 64 tokens.
  const std::string rows = dir + "/rows";
  ASSERT_EQ(test::run_command(kQuill + " data synth --conversations 40 --row-tokens 64 --max-rows 16 --out " + rows).status, 0);
  RecipeRunOptions o;
  o.model_dir = kTiny;
  o.rows_dir = rows;
  o.out_dir = dir + "/run";
  const RecipeRunPlan plan = plan_recipe_run(back, o);
  EXPECT_EQ(plan.layout.describe(), l.describe());
  EXPECT_EQ(plan.layout.pp_layers, l.pp_layers);
  EXPECT_EQ(plan.train.global_batch, 8);
  EXPECT_TRUE(plan.train.adam.memory.cpu_offload);
  EXPECT_DOUBLE_EQ(plan.train.adam.memory.offload_fraction, 0.3);
  EXPECT_TRUE(plan.train.adam.memory.overlap_d2h_h2d);
  EXPECT_EQ(plan.train.adam.memory.exp_avg, DType::BF16);
  EXPECT_EQ(plan.train.adam.memory.exp_avg_sq, DType::BF16);
  // quill recipe validate accepts it.
  const test::CommandResult v = test::run_command(kQuill + " recipe validate " + path);
  EXPECT_EQ(v.status, 0) << v.output;
  fs::remove_all(dir);
}

TEST(TuneCommand, PrintsTheRankingRefusalsAndPruningAndEmitsTheBestLayout) {
  const std::string dir = temp("cli");
  fs::create_directories(dir);
  const std::string base = kQuill + " tune --model " + kTiny + " --gpus 8 --gpus-per-node 4 --row-tokens 64 --global-batch 4";
  test::CommandResult r = test::run_command(base + " --top 3 --emit-recipe " + dir + "/best.yaml");
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* want : {"layouts fit and are ranked", "MODELLED", "tok/s/GPU", "bounded by", "refused:",
                           "global batch not divisible by data parallelism", "pruning:", "recipe of rank 1 in"})
    EXPECT_NE(r.output.find(want), std::string::npos) << want << "\n" << r.output;
  EXPECT_EQ(test::run_command(kQuill + " recipe validate " + dir + "/best.yaml").status, 0);
  r = test::run_command(base + " --json");
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j.at("format"), "quill-tune-1");
  ASSERT_FALSE(j.at("ranked").empty());
  EXPECT_EQ(j.at("ranked")[0].at("rank"), 1);
  EXPECT_GT(j.at("refused").at("global batch not divisible by data parallelism").at("count").get<int>(), 0);
  // Refusals name the flag.
  // An --emit-recipe into a missing directory is refused before the search, naming the flag.
  r = test::run_command(base + " --emit-recipe " + dir + "/missing/best.yaml");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--emit-recipe"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("rank  layout"), std::string::npos) << "refused after the search:\n" << r.output;
  r = test::run_command(base + " --gpu a100");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--gpu a100"), std::string::npos) << r.output;
  r = test::run_command(base + " --gpu cpu --device-memory 1GiB");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--compute-rates"), std::string::npos) << r.output;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace quill::tune
