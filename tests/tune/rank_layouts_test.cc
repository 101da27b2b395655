// The ranking (tune/rank_layouts.h), the recipe it emits (tune/emit_recipe.h) and `quill tune` itself on
// tests/fixtures/configs/tiny-tp4.json over 8 GPUs: ranked best first; more offload is never faster; the
// expert groups' placement; measured compute in place of the modelled (--measure's projection) re-ranks;
// the emitted recipe validates and `quill run`'s planning maps it back to the same layout and optimizer
// memory; the command prints the table, the refusals and the pruning.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <unistd.h>

#include "base/error.h"
#include "base/file_util.h"
#include "model/params.h"
#include "model/recompute.h"
#include "plan/comm_model.h"
#include "recipe/run_recipe.h"
#include "recipe/validate.h"
#include "tune/emit_recipe.h"
#include "tune/ledger_model.h"
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

// A candidate's recompute is projected: each stage's backward carries the recomputed layers' forward (block 1:
// one layer per stage), the step is slower than without it, the forward and the MFU's 6N unchanged.
TEST(RankLayouts, RecomputeCandidateCarriesItsSecondForward) {
  const RankRequest q = tiny_request();
  LayoutSpec l;
  l.tp = 2, l.sequence_parallel = true, l.pp = 2, l.dp = 2, l.ep = 2, l.pp_layers = {1, 3};
  Candidate c = candidate(l, OptimizerMemory{});
  const RankedLayout plain = project_candidate(c, q);
  c.recompute = parse_recompute("full", "block", 1);
  const RankedLayout recomputed = project_candidate(c, q);
  EXPECT_EQ(recomputed.candidate.recompute.describe(), "full block 1");
  EXPECT_GT(recomputed.step_s, plain.step_s);
  ASSERT_EQ(recomputed.stage_compute.size(), 2u);
  for (size_t s = 0; s < 2; ++s) {
    const RankCompute& a = plain.stage_compute[s];
    const RankCompute& b = recomputed.stage_compute[s];
    EXPECT_DOUBLE_EQ(b.forward_s, a.forward_s);
    EXPECT_GT(b.backward_s, a.backward_s);
    EXPECT_LT(b.backward_s - a.backward_s, a.forward_s) << "one layer of the stage, not its whole forward";
    EXPECT_TRUE(std::any_of(b.parts.begin(), b.parts.end(),
                            [](const RankCompute::Part& p) { return p.what == "recompute (forward again)"; }));
  }
  EXPECT_LT(recomputed.mfu, plain.mfu) << "the same useful FLOPs in a longer step";
  EXPECT_NEAR(recomputed.mfu * recomputed.step_s, plain.mfu * plain.step_s, 1e-12);
}

// --measure's projection (cli/tune_measure.h gives it the runs' figures): the measured stages' compute in
// place of the modelled, the middle stage not run scaled by the measured middle stage's ratios, the
// communication unchanged; and the ranking by the measured figures, whatever the modelled order was.
TEST(RankLayouts, MeasuredComputeReplacesTheModelledAndReRanks) {
  const RankRequest q = tiny_request();
  LayoutSpec pp4;
  pp4.pp = 4, pp4.dp = 2;
  EXPECT_EQ(stages_to_measure(pp4), (std::vector<int>{0, 1, 3}));
  LayoutSpec dp8;
  dp8.dp = 8;
  EXPECT_EQ(stages_to_measure(dp8), (std::vector<int>{0}));
  LayoutSpec pp2 = pp4;
  pp2.pp = 2, pp2.dp = 4;
  EXPECT_EQ(stages_to_measure(pp2), (std::vector<int>{0, 1}));

  const OptimizerMemory none;
  const Candidate c = candidate(pp4, none);
  const RankedLayout modelled = project_candidate(c, q);
  EXPECT_FALSE(modelled.measured());
  std::vector<MeasuredStage> runs;
  for (int s : stages_to_measure(pp4)) {
    const StageComputeSource& m = modelled.compute_sources[static_cast<size_t>(s)];
    EXPECT_EQ(m.source, "modelled");
    runs.push_back({s, stage_rank(pp4, s), (s + 2) * m.modelled_passes_per_micro_batch_s, 3 * m.modelled_optimizer_s});
  }
  const RankedLayout measured = project_candidate(c, q, runs);
  EXPECT_TRUE(measured.measured());
  for (int s = 0; s < 4; ++s) {
    SCOPED_TRACE("stage " + std::to_string(s));
    const StageComputeSource& src = measured.compute_sources[static_cast<size_t>(s)];
    const StageComputeSource& mod = modelled.compute_sources[static_cast<size_t>(s)];
    const double passes_ratio = s == 2 ? 3.0 : s + 2.0;  // stage 2 takes stage 1's ratio
    EXPECT_EQ(src.source, s == 2 ? "scaled" : "measured");
    EXPECT_EQ(src.from_stage, s == 2 ? 1 : s);
    EXPECT_DOUBLE_EQ(src.modelled_passes_per_micro_batch_s, mod.modelled_passes_per_micro_batch_s);
    EXPECT_NEAR(src.passes_per_micro_batch_s, passes_ratio * mod.modelled_passes_per_micro_batch_s, 1e-15);
    EXPECT_NEAR(src.optimizer_s, 3 * mod.modelled_optimizer_s, 1e-15);
    const plan::StageProjection &a = measured.projection.stages[static_cast<size_t>(s)],
                                &b = modelled.projection.stages[static_cast<size_t>(s)];
    EXPECT_DOUBLE_EQ(a.passes_compute_s, src.passes_per_micro_batch_s);
    EXPECT_DOUBLE_EQ(a.optimizer_compute_s, src.optimizer_s);
    // The communication is the modelled one, untouched.
    EXPECT_DOUBLE_EQ(a.passes_comm_s, b.passes_comm_s);
    EXPECT_DOUBLE_EQ(a.optimizer_comm_s, b.optimizer_comm_s);
    EXPECT_DOUBLE_EQ(a.message_s, b.message_s);
    ASSERT_EQ(a.groups.size(), b.groups.size());
    for (size_t g = 0; g < a.groups.size(); ++g) EXPECT_DOUBLE_EQ(a.groups[g].seconds, b.groups[g].seconds);
    // The forward/backward split is the model's.
    EXPECT_NEAR(a.backward_s / (a.forward_s + a.backward_s), b.backward_s / (b.forward_s + b.backward_s), 1e-12);
  }
  EXPECT_GT(measured.step_s, modelled.step_s);
  EXPECT_NEAR(measured.tokens_per_s_per_gpu, 8.0 * 64 / measured.step_s / 8, 1e-9 * measured.tokens_per_s_per_gpu);
  // A run of another rank than the projection's for its stage is refused.
  std::vector<MeasuredStage> wrong = runs;
  wrong[0].rank = stage_rank(pp4, 0) + 1;
  EXPECT_THROW(project_candidate(c, q, wrong), Error);

  // The re-ranking follows the measured figures: the modelled best, measured ten times slower, drops below.
  const RankedLayout a = project_candidate(candidate(dp8, none), q), b = modelled;
  ASSERT_TRUE(ranks_before(a, b)) << a.tokens_per_s_per_gpu << " " << b.tokens_per_s_per_gpu;
  std::vector<MeasuredStage> slow = {{0, 0, 10 * a.compute_sources[0].modelled_passes_per_micro_batch_s,
                                      a.compute_sources[0].modelled_optimizer_s}};
  std::vector<MeasuredStage> same;
  for (int s : stages_to_measure(pp4))
    same.push_back({s, stage_rank(pp4, s), b.compute_sources[static_cast<size_t>(s)].modelled_passes_per_micro_batch_s,
                    b.compute_sources[static_cast<size_t>(s)].modelled_optimizer_s});
  std::vector<RankedLayout> remeasured = {project_candidate(a.candidate, q, slow), project_candidate(b.candidate, q, same)};
  EXPECT_NEAR(remeasured[1].step_s, b.step_s, 1e-12);  // measured as modelled: the same projection
  // What bounds a measured stage: its measured passes (a run has no parts by op kind).
  EXPECT_EQ(remeasured[0].bound, "compute of the passes (measured, stage 0)");
  std::stable_sort(remeasured.begin(), remeasured.end(), ranks_before);
  EXPECT_EQ(remeasured[0].candidate.layout.describe(), pp4.describe());
  EXPECT_EQ(remeasured[1].candidate.layout.describe(), dp8.describe());
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
  e.recipe_path = path;
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
  // The run block is an sbatch script (issue 44): 8 ranks on nodes of 4 GPUs are 2 nodes of 4 tasks, SIGTERM 300 s
  // before the time limit, requeue (appending to the log), and srun under PMIx wrapping quill run after a bare `--`.
  EXPECT_EQ(back.run.rfind("#SBATCH --job-name=quill --nodes=2 --ntasks-per-node=4 --gpus-per-node=4 --exclusive\n"
                           "#SBATCH --signal=TERM@300 --requeue --open-mode=append\n", 0), 0u) << back.run;
  // A requeued start runs the same script: it continues the latest checkpoint of $OUT/checkpoint (Megatron's
  // iter_NNNNNNN layout), and the first start, finding none, begins fresh.
  EXPECT_NE(back.run.find("srun --mpi=pmix --kill-on-bad-exit=1 -- \\\n  quill run " + path + " --save \"$OUT\" --load "
                          "\"$OUT/checkpoint\" --start-fresh-if-no-checkpoint \\\n"),
            std::string::npos)
      << back.run;
  EXPECT_NE(back.run.find(" --save-interval 10\n"), std::string::npos) << back.run;
  EXPECT_EQ(check.definition.save_interval, std::optional<int64_t>(10));
  for (const std::string& w : check.warnings) EXPECT_EQ(w.find("not understood"), std::string::npos) << w;
  EXPECT_EQ(plan.train.save_dir, o.out_dir + "/checkpoint");
  EXPECT_EQ(plan.train.save_interval, 10);
  // quill run's --load / --start-fresh-if-no-checkpoint reach the trainer as quill train's.
  RecipeRunOptions requeued = o;
  requeued.load_dir = o.out_dir + "/checkpoint";
  requeued.start_fresh_if_no_checkpoint = true;
  const RecipeRunPlan continued = plan_recipe_run(back, requeued);
  EXPECT_EQ(continued.train.resume_dir, o.out_dir + "/checkpoint");
  EXPECT_TRUE(continued.train.start_fresh_if_no_checkpoint);
  EXPECT_EQ(continued.train.ckpt_step, -1);
  // With mpirun: no directives, one process per GPU mapped 4 per node; quill run maps it to the same layout.
  e.launcher = Launcher::Mpirun;
  const std::string mpi_path = dir + "/tuned-mpirun.yaml";
  e.recipe_path = mpi_path;  // the job line runs the file it is in
  write_recipe(mpi_path, tuned_recipe(chosen, e));
  const Recipe mpi_back = read_recipe(mpi_path);
  EXPECT_EQ(mpi_back.run.find("#SBATCH"), std::string::npos) << mpi_back.run;
  EXPECT_NE(mpi_back.run.find("mpirun -np 8 --map-by ppr:4:node -x NCCL_NVLS_ENABLE -- \\\n  quill run " + mpi_path + " "),
            std::string::npos) << mpi_back.run;
  EXPECT_EQ(plan_recipe_run(mpi_back, o).layout.describe(), l.describe());
  e.launcher = Launcher::Slurm;

  // A recompute candidate (block 2, no offload): the layout block and the run's Megatron flags say so and agree
  // (check_recipe compares layout.recompute with the flags), the summary no longer says "no recompute".
  Candidate rc = candidate(l, OptimizerMemory{});
  rc.recompute = parse_recompute("full", "block", 2);
  const std::string rc_path = dir + "/tuned-recompute.yaml";
  write_recipe(rc_path, tuned_recipe(project_candidate(rc, q), e));
  const Recipe rc_back = read_recipe(rc_path);
  ASSERT_TRUE(rc_back.layout.recompute.has_value());
  EXPECT_EQ(*rc_back.layout.recompute, (Recompute{"full", std::string("block"), int64_t{2}}));
  EXPECT_FALSE(rc_back.layout.offload.has_value());
  EXPECT_NE(rc_back.run.find("--recompute-granularity full --recompute-method block --recompute-num-layers 2"),
            std::string::npos) << rc_back.run;
  EXPECT_EQ(rc_back.run.find("--optimizer-cpu-offload"), std::string::npos) << rc_back.run;
  EXPECT_EQ(rc_back.layout.summary->find("no recompute"), std::string::npos) << *rc_back.layout.summary;
  EXPECT_NE(rc_back.layout.summary->find("full recompute of the first 2 layers of each stage"), std::string::npos)
      << *rc_back.layout.summary;
  const RecipeCheck rc_check = check_recipe(rc_back, CheckOptions{});
  for (const Problem& p : rc_check.problems) ADD_FAILURE() << p.field << ": " << p.message;
  for (const Disagreement& d : rc_check.disagreements)
    EXPECT_NE(d.field, "layout.recompute") << d.recipe_value << " against " << d.flag_value;
  EXPECT_EQ(rc_check.definition.recompute_granularity, std::optional<std::string>("full"));
  EXPECT_EQ(rc_check.definition.recompute_method, std::optional<std::string>("block"));
  EXPECT_EQ(rc_check.definition.recompute_num_layers, std::optional<int64_t>(2));
  const test::CommandResult rv = test::run_command(kQuill + " recipe validate " + rc_path);
  EXPECT_EQ(rv.status, 0) << rv.output;
  // quill run trains with it (the layout's recompute, not only the flags).
  const RecipeRunPlan rc_plan = plan_recipe_run(rc_back, o);
  EXPECT_EQ(rc_plan.train.recompute.describe(), "full block 2");
  EXPECT_FALSE(rc_plan.train.adam.memory.cpu_offload);
  fs::remove_all(dir);
}

TEST(TuneCommand, EmitRecipeTargetIsCheckedBeforeTheSearch) {
  // Issue 44: --emit-recipe FILE replaced an existing FILE without a word, and --emit-recipe . (a
  // directory) failed only after the search, which can take minutes.
  const std::string dir = temp("emit");
  fs::create_directories(dir);
  const std::string base = kQuill + " tune --model " + kTiny + " --gpus 8 --gpus-per-node 4 --row-tokens 64 --global-batch 4";
  const std::string existing = dir + "/best.yaml";
  write_file_atomic(existing, "kept\n");
  for (const auto& [target, said] : std::vector<std::pair<std::string, std::string>>{
           {existing, "--emit-recipe " + existing + ": exists; give --overwrite to replace it"},
           {dir, "--emit-recipe " + dir + ": is a directory; give a file name"},
           {"/proc/quill-nope.yaml", "--emit-recipe /proc/quill-nope.yaml: cannot create a file in /proc"},
           {dir + "/new.yaml --launcher torchrun", "--launcher torchrun: not a launcher; give srun (Slurm, the default) or mpirun"}}) {
    const test::CommandResult r = test::run_command(base + " --emit-recipe " + target);
    EXPECT_EQ(r.status, 1) << r.output;
    EXPECT_NE(r.output.find("quill: error: " + said), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("rank  layout"), std::string::npos) << "refused after the search:\n" << r.output;
  }
  EXPECT_EQ(read_file(existing), "kept\n");
  const test::CommandResult r = test::run_command(base + " --overwrite --emit-recipe " + existing);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(read_file(existing), "kept\n");
  EXPECT_EQ(test::run_command(kQuill + " recipe validate " + existing).status, 0);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1) << "a temporary file was left";
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
  // Nothing fits: the report still comes, and the exit status says so.
  r = test::run_command(base + " --device-memory 1MiB");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("refused:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("quill tune: no layout fits 8 GPUs"), std::string::npos) << r.output;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace quill::tune
