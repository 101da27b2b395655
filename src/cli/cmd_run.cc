// `quill run RECIPE.yaml`: run a recipe's workload with its layout, measure it by the recipe's
// definitions, check it against a reference, and write the completed recipe.
#include <unistd.h>

#include <cstdio>
#include <optional>

#include "base/error.h"
#include "base/file_util.h"
#include "base/stop_signal.h"
#include "base/timer.h"
#include "cli/commands.h"
#include "cli/launch.h"
#include "cli/stop_report.h"
#include "comm/error_report.h"
#include "recipe/recipe.h"
#include "recipe/run_flags.h"
#include "recipe/run_recipe.h"

namespace quill::cli {

void add_run_command(CLI::App& app, Runner& run, const std::vector<std::string>& args) {
  CLI::App* cmd = app.add_subcommand("run", "run a recipe, measure it, check it, write the completed recipe");
  static std::string recipe_path, device;
  static int64_t steps = 0;
  static double price = 0;
  static std::vector<std::string> sets;
  static RecipeRunOptions o;
  cmd->add_option("recipe", recipe_path, "the recipe YAML")->required();
  cmd->add_option("--steps", steps, "optimizer steps (default: the run's --train-iters / --num-rollout)");
  CLI::Option* price_option = cmd->add_option(
      "--price-per-gpu-hour", price,
      "USD per GPU-hour for $ per million tokens (default: the recipe's result.usd_per_gpu_hour, else quill's "
      "table: H200 $7.912, AWS p5en.48xlarge on demand)");
  cmd->add_option("--reference", o.reference, "reference loss curve: metrics.jsonl, a loss file, or a run directory");
  cmd->add_option("--model-dir", o.model_dir, "Hugging Face model directory (default: the run's --hf-checkpoint)");
  cmd->add_option("--rows", o.rows_dir, "rows directory (default: the run's --prompt-data)");
  cmd->add_option("--valid-rows", o.valid_rows_dir,
                  "validation rows for the run's --eval-interval / --eval-iters (default: the run's --valid-data-path)");
  cmd->add_option("--set", sets, "NAME=VALUE for a variable of the run script (repeatable)");
  static int64_t row_tokens = -1, global_batch = -1;  // -1: not given
  cmd->add_option("--row-tokens", row_tokens,
                  "a reduced workload: rows of this length replace workload.row_tokens (the completed recipe says so)");
  cmd->add_option("--global-batch", global_batch,
                  "a reduced workload: rows per step instead of workload.global_batch (the completed recipe says so)");
  cmd->add_option("--device", device, "cpu | cuda (default: cuda when a GPU is visible)");
  cmd->add_option("--out,--save", o.out_dir, "output directory")->required();
  cmd->add_flag("--overwrite", o.overwrite, "replace an earlier run's outputs in a non-empty --out");
  static int64_t save_interval = 0;
  static double timeout_minutes = 0;
  cmd->add_option("--save-interval", save_interval,
                  "training checkpoints every N steps and at the end, into OUT/checkpoint/iter_NNNNNNN (default: the "
                  "run flags'; "
                  "none when they have none)");
  cmd->add_flag("--async-save", o.async_save,
                "with checkpoints: written in the background while training goes on (default: the run flags')");
  cmd->add_option("--keep-last-checkpoints", o.keep_last_checkpoints,
                  "with checkpoints: keep only the newest N iterations in OUT/checkpoint (default: all)");
  cmd->add_option("--load,--resume", o.load_dir,
                  "continue a stopped or requeued run from its checkpoints, as quill train --load: OUT/checkpoint "
                  "(its latest iteration); refused when it holds none unless --start-fresh-if-no-checkpoint");
  cmd->add_option("--ckpt-step", o.ckpt_step, "with --load: continue iteration N instead of the latest");
  cmd->add_flag("--start-fresh-if-no-checkpoint", o.start_fresh_if_no_checkpoint,
                "with --load: start the run when no checkpoint exists yet (a job script's first start; a requeued "
                "start continues)");
  cmd->add_option("--distributed-timeout-minutes", timeout_minutes,
                  "a collective that waits longer stops every rank (default: the run flags', else 10)");
  static std::string device_memory;
  add_device_memory_flag(cmd, device_memory);
  // The recipe's own run script calls `quill run RECIPE --save DIR <the flags that define the run>`:
  // those flags are read from the recipe (recipe/run_flags.h), so on this command line they are
  // accepted and left to the recipe.
  cmd->allow_extras();
  cmd->callback([&run, price_option, &args] {
    run = [price_option, &args] {
      if (price_option->count() > 0) o.usd_per_gpu_hour = price;
      Timer wall;
      for (const std::string& s : sets) o.set.insert(parse_assignment(s));
      // $VARIABLES of the run script also come from this process's environment ($HF_CKPT, ...).
      for (char** e = environ; *e; ++e) {
        const std::string kv = *e;
        const size_t eq = kv.find('=');
        if (eq != std::string::npos) o.environment.emplace(kv.substr(0, eq), kv.substr(eq + 1));
      }
      if (steps > 0) o.steps = steps;
      QUILL_CHECK(row_tokens == -1 || row_tokens > 0, "--row-tokens {}: must be positive", row_tokens);
      QUILL_CHECK(global_batch == -1 || global_batch > 0, "--global-batch {}: must be positive", global_batch);
      if (row_tokens > 0) o.row_tokens = row_tokens;
      if (global_batch > 0) o.global_batch = global_batch;
      if (save_interval != 0) o.save_interval = save_interval;
      if (timeout_minutes != 0) o.distributed_timeout_minutes = timeout_minutes;
      const Recipe recipe = read_recipe(recipe_path);
      const RecipeRunPlan plan = plan_recipe_run(recipe, o);
      // Every rank plans alike: the launcher's rank 0 prints (MPI starts later).
      const bool first_rank = launcher_rank() == 0;
      if (first_rank) {
        for (const std::string& w : plan.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
        for (const std::string& n : plan.notes) std::fprintf(stderr, "note: %s\n", n.c_str());
      }
      const std::string dev = device.empty() ? default_device() : device;
      if (first_rank)
        std::printf("quill run: %s, %lld steps of %lld x %lld tokens on %d x %s\n", recipe_path.c_str(),
                  static_cast<long long>(plan.train.steps), static_cast<long long>(plan.train.global_batch),
                  static_cast<long long>(plan.row_tokens), plan.layout.world(), device_description(dev).c_str());
      MemoryCheck memory_check;
      memory_check.device_memory = parse_device_memory(device_memory);
      // SIGTERM and SIGINT (Slurm's time limit, a preemption) stop every rank at the next step boundary,
      // with a checkpoint when the run saves; the completed recipe is written only by a run that ends.
      const StopSignals stop_signals;
      TrainOptions train = plan.train;
      train.stop_signal = [] { return StopSignals::received(); };
      const TrainResult result = train_with_layout(train, dev, plan.layout, memory_check);
      if (const std::optional<int> status = finish_if_stopped(result, train, args)) return *status;
      if (!result.lead) return 0;  // data-parallel ranks other than 0: rank 0 reports
      // A --load of a run already at its last step (a job started again after it ended): the trainer said
      // there was nothing to do, and the completed recipe of the run stays as it was.
      if (result.steps.empty()) return 0;
      const RecipeRunReport report =
          complete_recipe(recipe, plan, result, o, device_description(dev), dev == "cuda", wall.seconds());
      std::printf("%s", recipe_run_summary(report, plan).c_str());
      std::printf("  wrote %s/recipe.yaml, %s/metrics.jsonl, %s/run.svg\n", o.out_dir.c_str(), o.out_dir.c_str(),
                  o.out_dir.c_str());
      return report.convergence && !report.convergence->passed ? 1 : 0;
    };
  });
}

}  // namespace quill::cli
