// What a recipe's flags say about the run: optimizer, schedule, batch, steps, precision, loss and
// layout, with Megatron's defaults applied where the flags are silent (recipes-and-measurement.md
// §3), and where they disagree with the recipe's `layout` (the layout wins; the disagreement is
// reported).
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "recipe/recipe.h"
#include "recipe/run_flags.h"

namespace quill {

struct RunDefinition {
  // optimizer and schedule
  std::string optimizer = "adam";
  std::optional<double> lr;
  double min_lr = 0.0;
  std::string lr_decay_style = "linear";
  std::optional<double> lr_warmup_fraction;
  int64_t lr_warmup_iters = 0;
  std::optional<int64_t> lr_decay_iters;
  double weight_decay = 0.01, adam_beta1 = 0.9, adam_beta2 = 0.999, adam_eps = 1e-8, clip_grad = 1.0;
  // batch and steps
  std::optional<int64_t> global_batch_size, micro_batch_size;
  std::optional<int64_t> train_steps;  // --train-iters, or --num-rollout x steps per rollout
  std::optional<int64_t> num_rollout, rollout_batch_size;
  int64_t n_samples_per_prompt = 1;
  std::optional<int64_t> seq_length;
  int64_t seed = 1234;
  // checkpoints and the job's collectives
  std::optional<int64_t> save_interval;        // --save-interval (none: no training checkpoint)
  bool async_save = false;                     // --async-save (with checkpoints: written in the background)
  std::optional<int64_t> eval_interval;        // --eval-interval (with validation rows: quill train's)
  std::optional<int64_t> eval_iters;           // --eval-iters
  double distributed_timeout_minutes = 10;     // --distributed-timeout-minutes (Megatron's default 10)
  // numerics
  bool bf16 = false, fp16 = false;
  std::optional<std::string> fp8_format, fp8_recipe;  // --fp8-format, --fp8-recipe (unset: not given)
  double attention_dropout = 0.1, hidden_dropout = 0.1;
  bool calculate_per_token_loss = false;
  std::optional<std::string> loss_type, hf_checkpoint;
  // layout
  int64_t tp = 1, pp = 1, cp = 1, ep = 1, etp = 1, vpp = 1;
  bool sequence_parallel = false;
  std::optional<int64_t> first_stage_layers, last_stage_layers;
  std::optional<int64_t> world_size, gpus_per_node;  // miles: --actor-num-nodes x --actor-num-gpus-per-node
  std::optional<std::string> recompute_granularity, recompute_method;
  std::optional<int64_t> recompute_num_layers;
  bool optimizer_cpu_offload = false;
  double optimizer_offload_fraction = 1.0;
  bool overlap_cpu_optimizer_d2h_h2d = false;
  bool use_distributed_optimizer = false, use_precision_aware_optimizer = false;
  // Megatron's precision-aware optimizer: the Adam moments' and main gradients' dtypes (fp32 | bf16).
  std::string exp_avg_dtype = "fp32", exp_avg_sq_dtype = "fp32", main_grads_dtype = "fp32";
  std::string dispatcher = "allgather";

  std::map<std::string, std::string> origin;  // flag name -> "flag" | "default" | "unresolved"
  std::vector<std::string> problems;           // values that do not parse

  // The schedule and optimizer of quill's optim layer (decay steps: --lr-decay-iters or the train steps).
  LrSchedule lr_schedule() const;
  AdamWConfig adamw() const;
  nlohmann::json to_json() const;
};

RunDefinition run_definition(const RunFlags& flags);

// Every setting the flags define, name -> normalised value ("1e-5" and "0.00001" both "1.0e-05"):
// each flag given (unknown ones too, as written) and each table flag's default where absent.
std::map<std::string, std::string> effective_flags(const RunFlags& flags);

struct Disagreement {
  std::string field;         // the recipe field ("layout.recompute")
  std::string recipe_value;  // what the recipe says
  std::string flag_value;    // what the flags say
  std::string flags;         // which flags ("--recompute-granularity ...")
  std::string note;
};

// Layout, workload and steps of the recipe against its flags. `num_layers` (when known) lets the
// even split of unnamed pipeline stages be checked.
std::vector<Disagreement> compare_layout_with_flags(const Recipe& recipe, const RunFlags& flags,
                                                    const RunDefinition& def, std::optional<int64_t> num_layers);

}  // namespace quill
