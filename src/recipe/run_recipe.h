// `quill run`: from a recipe to a completed recipe. plan_recipe_run turns the recipe (its model,
// workload, layout and the run flags that define the optimizer and schedule) into one training job,
// refusing with a clear message what quill cannot run yet; complete_recipe measures the finished
// run by the recipe's definitions (recipes-and-measurement.md §2), checks it against a reference
// (§4, §5) and fills the result and correctness sections.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "recipe/convergence.h"
#include "recipe/metrics.h"
#include "recipe/recipe.h"
#include "recipe/validate.h"
#include "parallel/layout_spec.h"
#include "train/trainer.h"

namespace quill {

struct RecipeRunOptions {
  std::optional<int64_t> steps;           // overrides the recipe's
  std::optional<double> usd_per_gpu_hour;  // --price-per-gpu-hour; else the recipe's, else gpu_price.h's table
  std::string reference;                  // a metrics.jsonl, a loss file, or a run directory
  std::string model_dir, rows_dir;        // override what the run flags name
  std::string valid_rows_dir;             // validation rows; default: the run's --valid-data-path
  VarMap set;                             // --set NAME=VALUE for the run script
  VarMap environment;                     // the caller's environment (below the recipe's env)
  std::string out_dir;
  bool overwrite = false;                 // replace an earlier run's outputs in out_dir
  std::optional<int64_t> save_interval;   // overrides the run flags' --save-interval (checkpoints: none without)
  bool async_save = false;                // --async-save (also taken from the run flags)
  int64_t keep_last_checkpoints = 0;      // --keep-last-checkpoints N (0: keep all)
  // Continuing a stopped or requeued job, as quill train takes them: --load DIR (a --save directory of
  // iterations, OUT/checkpoint for quill run), --ckpt-step N, --start-fresh-if-no-checkpoint.
  std::string load_dir;
  int64_t ckpt_step = -1;
  bool start_fresh_if_no_checkpoint = false;
  std::optional<double> distributed_timeout_minutes;  // overrides the run flags'
  // A reduced form of the workload (a small model on short rows, as the seed's layout is checked on
  // CPU ranks): the rows' length and the rows per step replace workload.row_tokens / global_batch and
  // the run's --seq-length / --global-batch-size; the completed recipe records what ran, with a note.
  std::optional<int64_t> row_tokens, global_batch;
};

struct RecipeRunPlan {
  TrainOptions train;
  LayoutSpec layout;  // the recipe's layout, as quill runs it
  InklingConfig config;
  int64_t active_params = 0;
  int64_t row_tokens = 0;
  std::vector<std::string> notes;     // what a person should know about how it will run
  std::vector<std::string> warnings;  // the recipe check's warnings
};

RecipeRunPlan plan_recipe_run(const Recipe& recipe, const RecipeRunOptions& options);

// The recipe's layout as quill runs it, its layer_split resolved for a model of num_layers layers
// (pp_layers left empty when the recipe has none, or num_layers is 0). Used by `quill run` and `quill plan`.
LayoutSpec recipe_layout_spec(const RecipeLayout& layout, int64_t num_layers);

struct RecipeRunReport {
  Recipe completed;
  std::optional<RunMetrics> metrics;
  std::optional<ConvergenceResult> convergence;
  std::vector<std::string> notes;
};

// `device` describes what ran it ("NVIDIA H200", "CPU (fp32 reference backend)"); wall_time_s is
// the whole command, start-up included (the recipe's GPU-hours). Writes OUT/recipe.yaml and
// OUT/run.svg.
RecipeRunReport complete_recipe(const Recipe& recipe, const RecipeRunPlan& plan, const TrainResult& run,
                                const RecipeRunOptions& options, const std::string& device, bool on_gpu,
                                double wall_time_s);

// The one-screen summary in the seed's terms.
std::string recipe_run_summary(const RecipeRunReport& report, const RecipeRunPlan& plan);

}  // namespace quill
