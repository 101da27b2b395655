#include "recipe/run_recipe.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <charconv>
#include <ctime>
#include <filesystem>

#include "base/error.h"
#include "base/file_util.h"
#include "data/rows.h"
#include "model/inkling_model.h"
#include "model/params.h"
#include "ops/fp8_options.h"
#include "parallel/stage_split.h"
#include "recipe/config_check.h"
#include "recipe/gpu_price.h"
#include "recipe/run_definition.h"
#include "train/run_plot.h"

#ifndef QUILL_GIT_COMMIT
#define QUILL_GIT_COMMIT "unknown"
#endif

namespace quill {

namespace fs = std::filesystem;

namespace {

bool has_weights(const std::string& dir) {
  return fs::exists(dir + "/model.safetensors") || fs::exists(dir + "/model.safetensors.index.json");
}

std::string flag_value(const RunFlags& flags, const char* name) {
  const ParsedFlag* f = flags.find(name);
  return f ? f->value() : std::string();
}

bool unresolved(const std::string& value) { return value.empty() || value.find('$') != std::string::npos; }

}  // namespace

LayoutSpec recipe_layout_spec(const RecipeLayout& l, int64_t num_layers) {
  LayoutSpec s;
  s.tp = static_cast<int>(l.tp);
  s.cp = static_cast<int>(l.cp);
  s.dp = static_cast<int>(l.dp);
  s.pp = static_cast<int>(l.pp);
  s.ep = static_cast<int>(l.ep);
  s.etp = static_cast<int>(l.etp);
  s.sequence_parallel = l.sequence_parallel;
  if (l.layer_split && num_layers > 0) {
    const StageSplit split = split_layers(num_layers, l.pp, l.layer_split->first, l.layer_split->last);
    QUILL_CHECK(split.error.empty(), "layout.layer_split: {}", split.error);
    s.pp_layers = split.layers;
  }
  return s;
}

RecipeRunPlan plan_recipe_run(const Recipe& recipe, const RecipeRunOptions& o) {
  RecipeRunPlan plan;
  CheckOptions check_options;
  check_options.set = o.set;
  check_options.extra_env = o.environment;
  const RecipeCheck check = check_recipe(recipe, check_options);
  if (!check.problems.empty()) {
    std::string text;
    for (const Problem& p : check.problems) text += "\n  " + p.field + ": " + p.message;
    QUILL_FAIL("the recipe does not validate:{}", text);
  }
  plan.warnings = check.warnings;
  resolve_gpu_price(o.usd_per_gpu_hour, recipe, "");  // a bad price stops here, before the training
  const RunDefinition& def = check.definition;
  const RecipeLayout& l = recipe.layout;

  // Layout: what quill does not run stops here, never a silent fallback.
  QUILL_CHECK(l.vpp == 1, "layout {}: virtual pipeline stages (vpp {}) are not implemented in quill",
              l.label.value_or("(unlabelled)"), l.vpp);
  plan.layout = recipe_layout_spec(l, 0);  // its pipeline split is resolved below, against the model
  try {
    InklingModel::check_layout(plan.layout);
  } catch (const Error& e) {
    QUILL_FAIL("layout {}: {}", l.label.value_or("(unlabelled)"), e.what());
  }
  // quill's expert exchange is Megatron's alltoall dispatcher (parallel/expert_dispatch.h); a recipe
  // that names another one would measure something else.
  for (const std::string& named : {l.dispatcher.value_or(""), flag_value(check.flags, "moe-token-dispatcher-type")})
    QUILL_CHECK(named.empty() || named == "alltoall",
                "layout {}: the {} token dispatcher is not implemented in quill (--moe-token-dispatcher-type alltoall "
                "is)", l.label.value_or("(unlabelled)"), named);
  QUILL_CHECK(l.rows_per_microbatch == 1, "layout.rows_per_microbatch {}: quill runs one row per micro-batch",
              l.rows_per_microbatch);
  // The run's flags that quill accepts but does not carry out (a logging service, a launcher's setting): all
  // named in one warning.
  std::vector<std::string> ignored;
  for (const ParsedFlag& f : check.flags.flags)
    if (f.spec && f.spec->train.use == TrainUse::Ignored) ignored.push_back("--" + std::string(f.spec->name));
  if (const std::string w = not_honoured_warning(ignored); !w.empty()) plan.warnings.push_back(w);
  // The run's flags that quill reads but does not carry out, each named (nothing silently ignored).
  QUILL_CHECK(def.optimizer == "adam", "--optimizer {}: quill implements adam (AdamW, decoupled weight decay)",
              def.optimizer);
  if (def.attention_dropout != 0 || def.hidden_dropout != 0)
    plan.warnings.push_back(fmt::format("--attention-dropout {} / --hidden-dropout {}: quill trains without dropout "
                                        "(Megatron's default is 0.1 when the flags are absent)",
                                        def.attention_dropout, def.hidden_dropout));
  if (check.flags.find("ref-load"))
    plan.warnings.push_back("--ref-load: not read (a Megatron torch_dist checkpoint); quill starts from the Hugging "
                            "Face checkpoint of --hf-checkpoint / --model-dir");
  if (check.flags.find("transformer-impl"))
    plan.notes.push_back("--transformer-impl " + flag_value(check.flags, "transformer-impl") +
                         ": quill runs its own kernels (the same arithmetic classes: bf16 GEMMs, fp32 softmax and norms)");
  if (check.flags.find("no-check-for-nan-in-loss-and-grad"))
    plan.notes.push_back("--no-check-for-nan-in-loss-and-grad: quill stops at a non-finite loss regardless, before "
                         "the weights change");

  // Model: the Hugging Face directory the run names (or --model-dir).
  std::string model_dir = o.model_dir.empty() ? def.hf_checkpoint.value_or("") : o.model_dir;
  QUILL_CHECK(!unresolved(model_dir),
              "the model directory is unknown: the run's --hf-checkpoint is '{}'; give --model-dir or --set NAME=VALUE",
              model_dir);
  plan.config = load_inkling_config(model_dir);
  plan.layout.pp_layers = recipe_layout_spec(l, plan.config.num_layers).pp_layers;
  plan.active_params = count_params(plan.config).active;
  if (has_weights(model_dir)) {
    plan.train.init_dir = model_dir;
  } else {
    plan.train.config_path = model_dir;
    plan.train.seed = static_cast<uint64_t>(def.seed);
    plan.notes.push_back(fmt::format("{} holds no weights: random initialisation with seed {}", model_dir, def.seed));
  }

  // Rows: a quill rows directory (quill data build) that the run names (or --rows).
  std::string rows_dir = o.rows_dir.empty() ? flag_value(check.flags, "prompt-data") : o.rows_dir;
  QUILL_CHECK(!unresolved(rows_dir), "the rows are unknown: the run's --prompt-data is '{}'; give --rows or --set",
              rows_dir);
  const RowsReader rows = RowsReader::open(rows_dir);
  const int64_t row_tokens = o.row_tokens.value_or(recipe.workload.row_tokens);
  QUILL_CHECK(rows.row_tokens() == row_tokens, "{}: rows of {} tokens, but {} says {}", rows_dir, rows.row_tokens(),
              o.row_tokens ? "--row-tokens" : "the recipe's workload.row_tokens", row_tokens);
  if (o.row_tokens && *o.row_tokens != recipe.workload.row_tokens)
    plan.notes.push_back(fmt::format("a reduced workload: rows of {} tokens instead of workload.row_tokens {} (--row-tokens)",
                                     row_tokens, recipe.workload.row_tokens));
  plan.train.rows_dir = rows_dir;
  plan.train.command = "quill run";
  plan.row_tokens = rows.row_tokens();

  // Batch, steps, optimizer and schedule from the flags (Megatron's defaults where silent).
  plan.train.global_batch = recipe.workload.global_batch;
  QUILL_CHECK(!def.global_batch_size || *def.global_batch_size == recipe.workload.global_batch,
              "workload.global_batch {} disagrees with the run's --global-batch-size {}", recipe.workload.global_batch,
              *def.global_batch_size);
  if (o.global_batch) {
    QUILL_CHECK(*o.global_batch > 0, "--global-batch {}: must be positive", *o.global_batch);
    if (*o.global_batch != plan.train.global_batch)
      plan.notes.push_back(fmt::format("a reduced workload: {} rows per step instead of workload.global_batch {} "
                                       "(--global-batch)", *o.global_batch, plan.train.global_batch));
    plan.train.global_batch = *o.global_batch;
  }
  plan.train.steps = o.steps ? *o.steps : def.train_steps.value_or(0);
  QUILL_CHECK(plan.train.steps > 0, "the run's length is unknown (no --train-iters or --num-rollout): give --steps");
  plan.train.lr = def.lr_schedule();
  plan.train.adam = def.adamw();
  // CPU optimizer offload: the recipe's layout.offload, else the run's Megatron flags (the two must
  // agree where both say: check_recipe compares them).
  OptimizerMemory& memory = plan.train.adam.memory;
  if (l.offload && l.offload->optimizer_fraction) {
    memory.cpu_offload = *l.offload->optimizer_fraction > 0;
    memory.offload_fraction = *l.offload->optimizer_fraction;
  }
  if (l.offload && l.offload->overlap_d2h_h2d) memory.overlap_d2h_h2d = *l.offload->overlap_d2h_h2d;
  for (const std::string& line : check_optimizer_memory(memory)) plan.notes.push_back(line);
  if (memory.effective_fraction() > 0 || memory.exp_avg != DType::F32 || memory.exp_avg_sq != DType::F32)
    plan.notes.push_back("optimizer memory: " + memory.describe());
  plan.train.freeze_patterns = miles_frozen_patterns();
  // miles trains over the padded vocabulary (recipes-and-measurement.md §3).
  plan.train.loss_over_padded_vocab = recipe.run.find("miles") != std::string::npos;
  plan.train.moe_shared_expert_overlap = static_cast<bool>(check.flags.find("moe-shared-expert-overlap"));
  plan.train.tp_comm_overlap = static_cast<bool>(check.flags.find("tp-comm-overlap"));
  plan.train.delay_wgrad_compute = static_cast<bool>(check.flags.find("delay-wgrad-compute"));
  plan.train.overlap_moe_ep_comm = static_cast<bool>(check.flags.find("overlap-moe-expert-parallel-comm"));
  // FP8 GEMMs: Megatron's --fp8-format / --fp8-recipe, read as quill train reads them (ops/fp8_options.h).
  plan.train.fp8 = ops::parse_fp8_options(def.fp8_format.value_or(""), def.fp8_recipe.value_or(""),
                                          static_cast<bool>(check.flags.find("no-fp8-wgrad")));
  if (plan.train.fp8.enabled()) plan.notes.push_back("FP8 GEMMs: " + plan.train.fp8.describe() + " (docs/fp8.md)");
  // Megatron's data-parallel overlaps and bucket size, as the run gave them (optim/ddp_config.h).
  DdpConfig& ddp = plan.train.adam.ddp;
  ddp.overlap_grad_reduce = static_cast<bool>(check.flags.find("overlap-grad-reduce"));
  ddp.overlap_param_gather = static_cast<bool>(check.flags.find("overlap-param-gather"));
  if (const std::string n = flag_value(check.flags, "ddp-bucket-size"); !n.empty()) {
    const auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), ddp.bucket_size);
    QUILL_CHECK(ec == std::errc() && end == n.data() + n.size() && ddp.bucket_size > 0,
                "--ddp-bucket-size {}: must be a positive number of elements", n);
  }
  // Activation recompute: the recipe's layout.recompute, what the run did. The seed's flags ask for it while
  // its layout says none (its Megatron tooling ignored the flags for Inkling): the layout wins, with a note.
  if (l.recompute) {
    // The recipe's layout names no modules (its schema has granularity, method and layer count): selective
    // takes them from the run's --recompute-modules.
    std::vector<std::string> modules;
    if (l.recompute->granularity == "selective")
      if (const ParsedFlag* f = check.flags.find("recompute-modules")) modules = f->values;
    plan.train.recompute = parse_recompute(l.recompute->granularity, l.recompute->method.value_or(""),
                                           l.recompute->num_layers.value_or(1), modules);
    plan.notes.push_back("activation recompute: " + plan.train.recompute.describe() + " (layout.recompute)");
  } else if (const std::string g = flag_value(check.flags, "recompute-granularity"); !g.empty() && g != "none") {
    plan.notes.push_back(fmt::format("the run's flags ask --recompute-granularity {} but layout.recompute is none: quill "
                                     "follows the layout and recomputes nothing (give layout.recompute to recompute)",
                                     g));
  }
  plan.train.out_dir = o.out_dir;
  // Megatron's --tensorboard-dir: a relative DIR goes under --out, so that the run's outputs stay together.
  if (const std::string tb = flag_value(check.flags, "tensorboard-dir"); unresolved(tb)) {
    if (!tb.empty())
      plan.notes.push_back(fmt::format("the run's --tensorboard-dir is '{}': unresolved, so no TensorBoard files "
                                       "(give --set NAME=VALUE)", tb));
  } else {
    plan.train.tensorboard_dir = fs::path(tb).is_absolute() ? tb : (fs::path(o.out_dir) / tb).string();
    plan.notes.push_back("TensorBoard event files into " + plan.train.tensorboard_dir + " (--tensorboard-dir)");
  }
  // A benchmark writes no training checkpoint unless asked: Megatron's --save-interval in the run
  // flags or on the command line (checkpoints then go to OUT/checkpoint; `--save` is OUT itself here).
  const std::optional<int64_t> save_interval = o.save_interval ? o.save_interval : def.save_interval;
  if (save_interval) {
    QUILL_CHECK(*save_interval > 0, "--save-interval {}: must be positive", *save_interval);
    plan.train.save_dir = o.out_dir + "/checkpoint";
    plan.train.save_interval = *save_interval;
    plan.train.async_save = o.async_save || def.async_save;
    plan.train.keep_last_checkpoints = o.keep_last_checkpoints;
    plan.notes.push_back(fmt::format(
        "training checkpoints every {} steps and at the end into {}/iter_NNNNNNN{}{} (quill run --load {} continues "
        "the run)",
        *save_interval, plan.train.save_dir, plan.train.async_save ? ", written in the background (--async-save)" : "",
        o.keep_last_checkpoints > 0 ? fmt::format(", the newest {} kept", o.keep_last_checkpoints) : "",
        plan.train.save_dir));
  } else {
    QUILL_CHECK(!o.async_save && o.keep_last_checkpoints == 0,
                "{} without --save-interval: quill run writes no training checkpoint unless the run flags or its "
                "command line give --save-interval N",
                o.async_save ? "--async-save" : "--keep-last-checkpoints");
  }
  // Continuing a stopped or requeued job: quill train's --load, checked there (train/option_checks.h).
  plan.train.resume_dir = o.load_dir;
  plan.train.ckpt_step = o.ckpt_step;
  plan.train.start_fresh_if_no_checkpoint = o.start_fresh_if_no_checkpoint;
  // Megatron's --eval-interval / --eval-iters, with validation rows (quill run's --valid-rows, else the run's
  // --valid-data-path): quill train's flags of the same names. Without validation rows nothing is evaluated,
  // and the note says so.
  const std::string valid_rows = o.valid_rows_dir.empty() ? flag_value(check.flags, "valid-data-path") : o.valid_rows_dir;
  if (!unresolved(valid_rows)) {
    plan.train.valid_rows_dir = valid_rows;
    // Megatron's defaults where the run is silent (flag_table.cc), as Megatron would have evaluated.
    plan.train.eval_interval = def.eval_interval.value_or(1000);
    plan.train.eval_iters = def.eval_iters.value_or(100);
    plan.notes.push_back(fmt::format("validation loss on {} ({} global batches) {}", valid_rows, plan.train.eval_iters,
                                     plan.train.eval_interval > 0
                                         ? fmt::format("every {} steps and after the last (--eval-interval)",
                                                       plan.train.eval_interval)
                                         : std::string("after the last step")));
  } else if (def.eval_interval || def.eval_iters) {
    plan.notes.push_back(fmt::format("the run's --eval-interval / --eval-iters: no validation rows{}, so no validation "
                                     "loss (give quill run --valid-rows DIR, or --valid-data-path in the run flags)",
                                     valid_rows.empty() ? "" : " ('" + valid_rows + "' is unresolved)"));
  }
  plan.train.distributed_timeout_minutes =
      o.distributed_timeout_minutes ? *o.distributed_timeout_minutes : def.distributed_timeout_minutes;
  plan.train.overwrite = o.overwrite;
  return plan;
}

namespace {

std::string today() { return fmt::format("{:%Y-%m-%d}", fmt::localtime(std::time(nullptr))); }

YAML::Node stack_node(const std::string& device, bool on_gpu) {
  YAML::Node n;
  n["framework"] = std::string("quill (commit ") + QUILL_GIT_COMMIT + ")";
  n["backend"] = on_gpu ? "CUDA, bf16 compute with fp32 master weights (sm_90a)" : "CPU fp32 reference backend";
  n["device"] = device;
  n["source"] = "written by quill run";
  return n;
}

std::optional<Recipe> reference_recipe(const std::string& reference) {
  if (reference.empty()) return std::nullopt;
  const fs::path p(reference);
  const fs::path candidate = fs::is_directory(p) ? p / "recipe.yaml" : p.parent_path() / "recipe.yaml";
  if (!fs::exists(candidate)) return std::nullopt;
  return read_recipe(candidate.string());
}

std::string reference_curve_path(const std::string& reference) {
  return fs::is_directory(reference) ? reference + "/metrics.jsonl" : reference;
}

}  // namespace

RecipeRunReport complete_recipe(const Recipe& recipe, const RecipeRunPlan& plan, const TrainResult& run,
                                const RecipeRunOptions& o, const std::string& device, bool on_gpu, double wall_s) {
  RecipeRunReport report;
  report.completed = recipe;
  Recipe& out = report.completed;
  const int64_t steps = static_cast<int64_t>(run.steps.size());

  // Measurement (§2), when the run is long enough for the window.
  MetricsInput in;
  for (const StepMetrics& s : run.steps) in.step_times_s.push_back(s.step_time_s);
  in.global_batch = plan.train.global_batch;
  in.row_tokens = plan.row_tokens;
  in.num_gpus = plan.layout.world();
  in.active_params = plan.active_params;
  const std::optional<GpuPrice> price = resolve_gpu_price(o.usd_per_gpu_hour, recipe, device);
  in.usd_per_gpu_hour.reset();
  if (price) in.usd_per_gpu_hour = price->usd_per_gpu_hour;
  in.wall_time_s = wall_s;
  if (recipe.result && recipe.result->window && recipe.result->window->size() == 2 &&
      (*recipe.result->window)[1] < steps)
    in.window = std::array<int64_t, 2>{(*recipe.result->window)[0], (*recipe.result->window)[1]};
  // A start that continued a checkpoint (--load) times only its own steps; metrics.jsonl holds them all.
  if (!run.steps.empty() && run.steps.front().step > 0)
    report.notes.push_back(fmt::format("continued from step {} (--load): the result measures the {} steps of this "
                                       "start, {} to {}",
                                       run.steps.front().step, steps, run.steps.front().step, run.steps.back().step));
  try {
    report.metrics = compute_metrics(in);
  } catch (const Error& e) {
    report.notes.push_back(std::string("no result metrics: ") + e.what());
  }
  out.status = "measured";
  out.workload.row_tokens = plan.row_tokens;
  out.workload.global_batch = plan.train.global_batch;
  out.gpu = Gpu{};
  out.gpu.type = device;
  out.gpu.count = plan.layout.world();
  out.gpu.per_node = plan.layout.world();
  out.stack = RawYaml{stack_node(device, on_gpu)};
  if (report.metrics) {
    fill_result(out, *report.metrics, steps, plan.active_params);
    out.result->measured = today();
    out.result->runs = 1;
    out.result->profiler = false;
    out.result->gpu_hours_note = "GPUs x wall time of the quill run command, start-up included";
    if (price) {
      out.result->usd_per_gpu_hour = price->usd_per_gpu_hour;
      out.result->usd_per_gpu_hour_source = price->source;
    } else {
      out.result->usd_per_gpu_hour.reset();
      out.result->usd_per_gpu_hour_source =
          "none: quill's table prices no " + device + " hour and none was given (--price-per-gpu-hour)";
      report.notes.push_back("no price per GPU-hour for " + device +
                             ": usd_per_million_tokens left null (give --price-per-gpu-hour)");
    }
    out.result->mfu_note = on_gpu ? std::optional<std::string>()
                                  : std::optional<std::string>("CPU reference backend: MFU against the 989 TFLOP/s "
                                                               "GPU peak, not a GPU figure");
  } else {
    out.result.reset();
  }

  // Correctness (§4, §5) against the reference, when given.
  Correctness c;
  if (!o.reference.empty()) {
    const LossCurve candidate = read_loss_curve(o.out_dir + "/metrics.jsonl");
    const LossCurve reference = read_loss_curve(reference_curve_path(o.reference));
    report.convergence = check_convergence(candidate, reference);
    const ConvergenceResult& r = *report.convergence;
    ConvergenceRecord rec;
    rec.steps = steps;
    rec.result = r.passed ? "pass" : "fail";
    rec.correlation = r.correlation;
    rec.final_loss_difference = r.final_loss_difference;
    rec.pointwise_failures = static_cast<int64_t>(r.pointwise_failures.size());
    rec.note = fmt::format("strict max relative loss difference {:.3g} at step {}; reference: {}",
                           r.max_relative_difference, r.max_relative_difference_step, o.reference);
    c.convergence = rec;
    c.reference = o.reference;
    bool configuration_pass = true;
    if (const auto ref = reference_recipe(o.reference)) {
      // The recipe as it ran (a reduced workload's rows and batch, the ranks used) against the
      // reference's completed recipe, which records the same of its own run.
      const ConfigCheckResult cc = check_config(out, *ref);
      configuration_pass = cc.passed;
      c.configuration = cc.passed ? "pass" : "fail";
    } else {
      c.configuration = "not checked (no reference recipe)";
    }
    c.result = r.passed && configuration_pass ? "pass" : "fail";
    c.summary = r.passed ? "convergence check passed" : "convergence check failed: " + fmt::format("{}", fmt::join(r.failed, ", "));
    c.rules = "20-step check by Megatron-Bridge validate_convergence with its pipeline thresholds "
              "(recipes-and-measurement.md §4); argument classes of §5";
  } else {
    c.result = "not checked";
    c.summary = "no reference was given (quill run --reference)";
  }
  out.correctness = c;

  write_recipe(o.out_dir + "/recipe.yaml", out);
  // The trainer's picture again, with the reference's loss and the measured window.
  RunPlot plot(fmt::format("{} - {} on {} x {}", recipe.model, recipe.layout.label.value_or("layout"), plan.layout.world(),
                           device),
               fmt::format("{} rows of {} tokens per step", plan.train.global_batch, plan.row_tokens));
  plot.read_new_records(o.out_dir + "/metrics.jsonl");
  if (!o.reference.empty()) plot.set_reference_loss(read_loss_curve(reference_curve_path(o.reference)).loss);
  if (report.metrics) plot.set_window(report.metrics->window[0], report.metrics->window[1]);
  plot.write(o.out_dir + "/run.svg");
  return report;
}

std::string recipe_run_summary(const RecipeRunReport& r, const RecipeRunPlan& plan) {
  std::string s = fmt::format("\n{} — {}\n", r.completed.model, r.completed.layout.label.value_or("layout"));
  s += fmt::format("  GPUs            {} x {}\n", r.completed.gpu.count, r.completed.gpu.type);
  if (r.metrics) {
    const RunMetrics& m = *r.metrics;
    s += fmt::format("  tokens/s/GPU    {:.2f}   (window steps {}-{}, {} tokens)\n", m.tokens_per_s_per_gpu, m.window[0],
                     m.window[1], m.window_tokens);
    s += fmt::format("  MFU             {:.4f}   (N = {} active parameters)\n", m.mfu, plan.active_params);
    if (m.usd_per_million_tokens) {
      const Result& res = *r.completed.result;
      s += fmt::format("  $ / 1M tokens   {:.2f}   (at ${:.3f} per GPU-hour, from {})\n", *m.usd_per_million_tokens,
                       *m.usd_per_gpu_hour, res.usd_per_gpu_hour_source.value_or("?"));
    } else {
      s += "  $ / 1M tokens   none     (no price per GPU-hour: give --price-per-gpu-hour)\n";
    }
    s += fmt::format("  step-time CV    {:.2f}%\n", m.step_time_cv_percent);
    if (m.gpu_hours) s += fmt::format("  GPU-hours       {:.4f}\n", *m.gpu_hours);
  }
  if (r.convergence) {
    const ConvergenceResult& c = *r.convergence;
    s += fmt::format("  convergence     {}: correlation {:.6f}, final loss difference {:.3g}, {} point-wise failures\n",
                     c.passed ? "pass" : "FAIL", c.correlation.value_or(NAN), c.final_loss_difference,
                     c.pointwise_failures.size());
  } else {
    s += "  convergence     not checked (no --reference)\n";
  }
  for (const std::string& n : r.notes) s += "  note: " + n + "\n";
  for (const std::string& n : plan.notes) s += "  note: " + n + "\n";
  return s;
}

}  // namespace quill
