#include "train/trainer.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/file_util.h"
#include "base/timer.h"
#include "data/rows.h"
#include "data/rows_check.h"
#include "io/hf_checkpoint.h"
#include "io/hf_export.h"
#include "io/streamed_hf_export.h"
#include "io/hf_name_check.h"
#include "model/inkling_model.h"
#include "io/safetensors.h"
#include "model/stage_model.h"
#include "model/fp8_params.h"
#include "parallel/host_reduce.h"
#include "parallel/pipeline_schedule.h"
#include "train/pipeline_executor.h"
#include "model/offload_split.h"
#include "model/param_placement.h"
#include "ops/convert.h"
#include "train/metrics_file.h"
#include "train/option_checks.h"
#include "train/rank_agreement.h"
#include "train/run_plot.h"
#include "train/routing_replay.h"
#include "train/run_dir.h"
#include "train/expert_load.h"
#include "train/step_observers.h"
#include "train/step_report.h"
#include "train/tensorboard.h"
#include "train/checkpoint_history.h"
#include "train/checkpoint_saver.h"
#include "train/train_checkpoint.h"

namespace quill {

std::vector<int64_t> rows_for_step(int64_t step, int64_t global_batch, int64_t total_rows) {
  QUILL_CHECK(total_rows > 0, "rows_for_step: no rows to choose from");
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < global_batch; ++i) rows.push_back((step * global_batch + i) % total_rows);
  return rows;
}

bool is_eval_step(int64_t step, int64_t eval_interval, int64_t steps) {
  return (eval_interval > 0 && (step + 1) % eval_interval == 0) || step + 1 == steps;
}

InklingConfig resolve_config(const TrainOptions& o) {
  check_init_dir(o);  // before its config.json is read: a message naming the file that is missing
  if (!o.config_path.empty()) return load_inkling_config(o.config_path);
  QUILL_CHECK(!o.init_dir.empty(), "quill train: give --config, or --init with a checkpoint holding config.json");
  return load_inkling_config(o.init_dir);
}

namespace {

// A routing of routing_of_row on the context's device, as MicroBatch::replay_topk takes it.
std::vector<Tensor> upload_routing(const DeviceContext& ctx, const std::vector<Tensor>& host) {
  std::vector<Tensor> out(host.size());
  for (size_t i = 0; i < host.size(); ++i) {
    if (!host[i].defined()) continue;
    out[i] = Tensor::empty(host[i].shape(), DType::I32, *ctx.allocator);
    ops::transfer(ctx, host[i], out[i]);
  }
  return out;
}

// Token ids must lie in the real (unpadded) vocabulary: the padded rows of the tables are no tokens.
void check_rows_fit(const RowsReader& rows, const InklingConfig& config, bool verify) {
  RowsCheckOptions check;
  check.vocab_size = config.unpadded_vocab_size;
  check.vocab_note = config.unpadded_vocab_size == config.vocab_size
                         ? fmt::format("the model's vocabulary of {}", config.vocab_size)
                         : fmt::format("the model's vocabulary of {} (unpadded; its tables are padded to {})",
                                       config.unpadded_vocab_size, config.vocab_size);
  check.verify_sha256 = verify;
  check_rows_for_training(rows, check);
}

// The run picture's title (OUT/run.svg): the model as the command line named it, and the layout.
RunPlot run_plot_for(const TrainOptions& o, const Layout& layout, int64_t row_tokens) {
  std::filesystem::path model = std::filesystem::path(o.init_dir.empty() ? o.config_path : o.init_dir).lexically_normal();
  if (model.filename().empty()) model = model.parent_path();
  return RunPlot(fmt::format("quill train - {}", model.filename().string()),
                 fmt::format("{}, {} rows of {} tokens per step", layout.spec().describe(), o.global_batch, row_tokens));
}

// --valid-rows: checked as the training rows are (the model's vocabulary, masks, rows_sha256), and of
// their length, since an evaluation runs global batches of the training's shape; every message names
// the flag. The evaluation's batches must hold a supervised target (the loss is per target).
void check_valid_rows(const RowsReader& valid, const RowsReader& rows, const TrainOptions& o,
                      const InklingConfig& config) {
  try {
    check_rows_fit(valid, config, o.verify_rows);
  } catch (const Error& e) {
    QUILL_FAIL("--valid-rows {}: {}", o.valid_rows_dir, e.what());
  }
  QUILL_CHECK(valid.row_tokens() == rows.row_tokens(),
              "--valid-rows {}: its rows hold {} tokens, the training rows of --rows {} hold {}; build both with the "
              "same --row-tokens (quill data build --valid-fraction writes both)",
              o.valid_rows_dir, valid.row_tokens(), o.rows_dir, rows.row_tokens());
  int64_t supervised = 0;
  for (int64_t k = 0; k < o.eval_iters; ++k)
    for (int64_t r : rows_for_step(k, o.global_batch, valid.rows())) supervised += valid.supervised_targets(r);
  QUILL_CHECK(supervised > 0, "--valid-rows {}: the {} evaluation batches of --eval-iters {} hold no supervised target",
              o.valid_rows_dir, o.eval_iters, o.eval_iters);
}

// Lead only: a line on stderr (recoveries, dropped torn lines, a resume with nothing to do), named by the
// command that runs the trainer.
void note(const TrainOptions& o, bool lead, const std::string& text) {
  if (lead) std::fprintf(stderr, "%s: %s\n", o.command.c_str(), text.c_str());
}

}  // namespace

namespace {

// Every MoE layer's expert counts, summed over the world: each rank fills its stage's layers (the
// others stay 0) and the data-parallel ranks of a stage add up.
std::vector<std::vector<int64_t>> all_stages_expert_tokens(const InklingConfig& config, const Layout& layout,
                                                           const std::vector<std::vector<int64_t>>& mine,
                                                           const DeviceContext& ctx) {
  std::vector<int64_t> moe_layers;
  for (int64_t i = 0; i < config.num_layers; ++i)
    if (config.is_moe(i)) moe_layers.push_back(i);
  const int64_t E = config.n_routed_experts, L = static_cast<int64_t>(moe_layers.size());
  Tensor counts = Tensor::zeros({std::max<int64_t>(1, L * E)}, DType::I64);
  size_t k = 0;
  for (int64_t l = 0; l < L; ++l) {
    if (moe_layers[l] < layout.first_layer() || moe_layers[l] >= layout.end_layer()) continue;
    QUILL_CHECK(k < mine.size(), "pipeline: stage is missing the expert counts of layer {}", moe_layers[l]);
    std::copy(mine[k].begin(), mine[k].end(), counts.data_as<int64_t>() + l * E);
    ++k;
  }
  all_reduce_host(layout.world(), ctx, counts);
  std::vector<std::vector<int64_t>> out;
  for (int64_t l = 0; l < L; ++l) out.emplace_back(counts.data_as<int64_t>() + l * E, counts.data_as<int64_t>() + (l + 1) * E);
  return out;
}

}  // namespace

namespace {

// What a step reads and changes of its run: references into run_training's state.
struct StepInputs {
  const TrainOptions& o;
  const DeviceContext& ctx;
  const Layout& layout;
  const InklingConfig& config;
  const RowsReader& rows;
  const RowsReader* valid_rows;  // --valid-rows; null without it
  ParamTable& params;
  const StageModel& stage;
  AdamW& optimizer;
  const std::vector<std::unique_ptr<StepObserver>>& observers;
};

// Routing replay at the dumped step: each micro-batch's expert choice from the file, on the device (empty:
// route freely).
std::vector<std::vector<Tensor>> step_routing(const StepInputs& in, int64_t step, int64_t first_row, size_t rows) {
  std::vector<std::vector<Tensor>> replays;
  if (step != in.o.dump_grads_step || in.o.replay_routing_file.empty()) return replays;
  const SafetensorsFile file = SafetensorsFile::open(in.o.replay_routing_file);
  for (size_t j = 0; j < rows; ++j)
    replays.push_back(upload_routing(in.ctx, routing_of_row(file, in.config, first_row + static_cast<int64_t>(j),
                                                            in.rows.row_tokens())));
  return replays;
}

// This data-parallel rank's contiguous share of a global batch: its first index and its length.
std::pair<int64_t, int64_t> data_parallel_share(const Layout& layout, int64_t global_batch) {
  const int64_t share = global_batch / layout.spec().dp;
  return {layout.coords().dp * share, share};
}

// The passes of this data-parallel rank's rows `mine` of `rows`, one micro-batch per row, through the
// stage: by the 1F1B table (gradients accumulate with grad_scale), or forward only (evaluation: no
// gradient is touched). Training and evaluation share it, so both score rows the same way.
PipelineStepResult run_micro_batches(const StepInputs& in, const RowsReader& rows, const std::vector<int64_t>& mine,
                                     double grad_scale, const std::vector<std::vector<Tensor>>& replays,
                                     bool forward_only) {
  const int64_t T = rows.row_tokens();
  std::vector<std::vector<int32_t>> ids(mine.size());
  std::vector<MicroBatch> mbs;
  for (size_t j = 0; j < mine.size(); ++j) {
    const uint32_t* src = rows.tokens(mine[j]);
    ids[j].assign(src, src + T);
    mbs.push_back({ids[j].data(), rows.mask(mine[j]), T, grad_scale, replays.empty() ? nullptr : &replays[j]});
  }
  const int pp = in.layout.spec().pp, micro = static_cast<int>(mbs.size());
  // The combined 1F1B where the stage model can run it (--overlap-moe-expert-parallel-comm under expert
  // parallelism, one stage: the flag's checks); plain 1F1B otherwise.
  const PipeSchedule schedule = forward_only                   ? forward_only_schedule(pp, micro)
                                : in.stage.pass_baton() != nullptr ? combined_one_f_one_b(pp, micro)
                                                                   : one_f_one_b(pp, micro);
  return run_pipeline_step(in.stage, schedule, in.layout.coords().pp, in.layout.comm(GroupKind::PP), mbs, in.ctx,
                           in.config.hidden_size, in.optimizer.pass_hooks());
}

// A loss sum over the world: it lives on the last stage, the same on each of its tensor-parallel
// ranks, so those of tensor-parallel rank 0 add up over the data-parallel ranks.
double world_loss_sum(const Layout& layout, const DeviceContext& ctx, double mine) {
  if (!layout.world()) return mine;
  Tensor sums = Tensor::empty({1}, DType::F64);
  sums.data_as<double>()[0] = layout.last_stage() && layout.coords().tp == 0 ? mine : 0.0;
  all_reduce_host(layout.world(), ctx, sums);
  return sums.data_as<double>()[0];
}

// One optimizer step: this data-parallel rank's rows as micro-batches through the stage by the 1F1B table,
// the loss and expert counts summed over the world, the optimizer; the observers at their points.
StepMetrics run_step(const StepInputs& in, int64_t step) {
  const TrainOptions& o = in.o;
  const Layout& layout = in.layout;
  const int64_t T = in.rows.row_tokens();
  Timer step_timer;
  for (const auto& observer : in.observers) observer->step_begins(step);
  StepMetrics m;
  m.step = step;
  m.lr = o.lr.lr_at(step, o.steps);
  const std::vector<int64_t> batch = rows_for_step(step, o.global_batch, in.rows.rows());
  for (int64_t r : batch) m.supervised += in.rows.supervised_targets(r);
  QUILL_CHECK(m.supervised > 0, "step {}: the global batch has no supervised target", step);
  const double grad_scale = 1.0 / static_cast<double>(m.supervised);

  zero_grads(in.params, in.ctx);
  const auto [first_row, share] = data_parallel_share(layout, o.global_batch);
  const std::vector<int64_t> mine(batch.begin() + first_row, batch.begin() + first_row + share);
  const std::vector<std::vector<Tensor>> replays = step_routing(in, step, first_row, mine.size());
  const PipelineStepResult pr = run_micro_batches(in, in.rows, mine, grad_scale, replays, /*forward_only=*/false);
  m.expert_tokens = pr.expert_tokens;
  m.combined_steps = pr.combined_steps;
  m.combined_switches = pr.combined_switches;
  settle_grads(in.params, in.ctx);
  in.optimizer.passes_done();
  for (const auto& observer : in.observers) observer->passes_done(step);
  m.passes_time_s = step_timer.seconds();
  m.tokens = T * o.global_batch;
  // Each (stage, tensor-parallel, data-parallel) rank counts the tokens its MoE layers routed: summed
  // over the world, every MoE layer in its place.
  if (layout.world()) m.expert_tokens = all_stages_expert_tokens(in.config, layout, m.expert_tokens, in.ctx);
  m.loss = world_loss_sum(layout, in.ctx, pr.loss_sum) / static_cast<double>(m.supervised);
  for (const auto& observer : in.observers) observer->gradients_final(step);
  QUILL_CHECK(std::isfinite(m.loss), "step {}: loss is {}; stopping before the weights are corrupted", step, m.loss);
  m.grad_norm = in.optimizer.step(m.lr);
  m.offload_wait_down_s = in.optimizer.offload_times().wait_down_s;
  m.offload_host_s = in.optimizer.offload_times().host_s;
  m.offload_wait_up_s = in.optimizer.offload_times().wait_up_s;
  for (auto it = in.observers.rbegin(); it != in.observers.rend(); ++it) (*it)->step_ends(step, m);
  m.step_time_s = step_timer.seconds();
  return m;
}

// The evaluation after a step (is_eval_step): batches 0 .. eval_iters-1 of the validation rows (the same
// rows at every evaluation, so that evaluations compare), each of the training's global batch shape and
// split over the data-parallel ranks alike, forward only. The loss per supervised target over all of
// them: the K batches' loss sums over their targets, as Megatron sums numerators and denominators over
// its eval iterations. No gradient, optimizer state, expert count or observer is touched.
void evaluate(const StepInputs& in, StepMetrics& m) {
  const TrainOptions& o = in.o;
  const RowsReader& valid = *in.valid_rows;
  Timer timer;
  double loss_sum = 0;
  int64_t supervised = 0;
  const auto [first_row, share] = data_parallel_share(in.layout, o.global_batch);
  for (int64_t k = 0; k < o.eval_iters; ++k) {
    const std::vector<int64_t> batch = rows_for_step(k, o.global_batch, valid.rows());
    int64_t batch_supervised = 0;
    for (int64_t r : batch) batch_supervised += valid.supervised_targets(r);
    supervised += batch_supervised;
    if (batch_supervised == 0) continue;  // nothing to score (check_valid_rows made sure some batch has)
    const std::vector<int64_t> mine(batch.begin() + first_row, batch.begin() + first_row + share);
    loss_sum += run_micro_batches(in, valid, mine, 1.0 / static_cast<double>(batch_supervised), {},
                                  /*forward_only=*/true)
                    .loss_sum;
  }
  m.valid_loss = world_loss_sum(in.layout, in.ctx, loss_sum) / static_cast<double>(supervised);
  m.valid_supervised = supervised;
  m.valid_time_s = timer.seconds();
}

}  // namespace

TrainResult run_training(const TrainOptions& o, const DeviceContext& ctx) {
  const Layout single = Layout::single(resolve_config(o).num_layers);
  return run_training(o, ctx, single);
}

TrainResult run_training(const TrainOptions& o, const DeviceContext& device_ctx, const Layout& layout) {
  const int dp_size = layout.spec().dp;
  // The simulated rank is the only process of its run: it writes what rank 0 writes in a real one.
  const bool simulated = o.simulate_rank >= 0;
  const bool lead = simulated || layout.rank() == 0;
  QUILL_CHECK(!simulated || layout.rank() == o.simulate_rank, "--simulate-rank {}: the layout was made for rank {}",
              o.simulate_rank, layout.rank());
  InklingModel::check_layout(layout.spec());
  Timer wall;
  // Everything is checked before anything is loaded or written.
  check_train_options(o);
  check_adamw_config(o.adam);
  QUILL_CHECK(o.global_batch % dp_size == 0, "--global-batch {} does not divide over {} data-parallel ranks",
              o.global_batch, dp_size);
  check_run_dir(o);
  // --load DIR without a checkpoint there (unless a fresh start was chosen), or --ckpt-step of an iteration
  // it lacks: refused now, before anything is loaded or written.
  if (!o.resume_dir.empty()) choose_checkpoint(o.resume_dir, o.ckpt_step, o.start_fresh_if_no_checkpoint, "--load");
  TrainResult result;
  result.lead = lead;
  result.simulated_rank = o.simulate_rank;
  result.simulated_comm_time = simulated && o.simulate_comm_time;
  result.world_size = layout.spec().world();
  result.recompute = o.recompute.describe();
  result.fp8 = o.fp8.describe();
  result.attention_dq_order = o.attention_dq_arrival_order ? "arrival" : "fixed";
  result.grouped_gemm_kernel = grouped_gemm_kernel_name(o.grouped_gemm_kernel);
  result.grouped_wgrad_kernel = grouped_gemm_kernel_name(o.grouped_wgrad_kernel);
  result.grouped_wgrad_form = kernel_trial_name(o.grouped_wgrad_form);
  result.attention_bias_rows = kernel_trial_name(o.attention_bias_rows);
  result.attention_forward_form = kernel_trial_name(o.attention_forward_form);
  result.attention_backward_form = kernel_trial_name(o.attention_backward_form);
  result.ddp = o.adam.ddp;
  result.tp_comm_overlap = o.tp_comm_overlap;
  result.moe_shared_expert_overlap = o.moe_shared_expert_overlap;
  result.delay_wgrad_compute = o.delay_wgrad_compute;
  result.moe_expert_wgrad_micro_batches = o.moe_expert_wgrad_micro_batches;
  result.overlap_moe_ep_comm = o.overlap_moe_ep_comm;
  result.ddp.bucket_size = o.adam.ddp.bucket_elements(dp_size);
  if (o.stop_after == 0) {
    note(o, lead, "nothing to do: --stop-after 0; nothing was written");
    return result;
  }

  // Optional instrumentation (peak memory per step, the per-op table of one step): its context
  // wraps the device's op table, so everything below runs through it.
  std::unique_ptr<StepProbe> probe;
  if (o.make_probe) probe = o.make_probe(device_ctx);
  QUILL_CHECK(o.profile_step < 0 || probe != nullptr, "--profile-step {} needs --device cuda", o.profile_step);
  const DeviceContext ctx = probe ? probe->context() : device_ctx;

  const InklingConfig config = resolve_config(o);
  if (!o.init_dir.empty()) check_no_unknown_text_tensors(o.init_dir, config);
  RowsReader rows = RowsReader::open(o.rows_dir);
  check_rows_fit(rows, config, o.verify_rows);
  const int tp = layout.spec().tp;
  QUILL_CHECK(tp == 1 || rows.row_tokens() % tp == 0,
              "--tensor-model-parallel-size {}: the rows of {} hold {} tokens each, which do not split into {} equal "
              "sequence chunks (the routed experts and sequence parallelism work on each rank's chunk)",
              tp, o.rows_dir, rows.row_tokens(), tp);
  std::optional<RowsReader> valid_rows;
  if (!o.valid_rows_dir.empty()) {
    try {
      valid_rows.emplace(RowsReader::open(o.valid_rows_dir));
    } catch (const Error& e) {
      QUILL_FAIL("--valid-rows {}: {}", o.valid_rows_dir, e.what());
    }
    check_valid_rows(*valid_rows, rows, o, config);
  }
  if (layout.world())
    check_ranks_agree(*layout.world(), ctx, agreement_fields(o, config, rows, valid_rows ? &*valid_rows : nullptr));
  if (layout.world()) check_ranks_share_outputs(*layout.world(), ctx, o);
  if (!o.replay_routing_file.empty()) check_routing_file(o.replay_routing_file, config, o.global_batch, rows.row_tokens());

  // The export is planned before the first step, so that one that cannot be made stops the run now.
  // Every rank plans it: each writes its own share of the files (io/streamed_hf_export.h).
  std::optional<HfExportPlan> hf_export;
  if (o.save_hf) {
    hf_export = plan_hf_export(config, o.init_dir, o.config_path, o.hf_export);
    if (lead)
      for (const std::string& note : hf_export->notes) std::fprintf(stderr, "note: --save-hf: %s\n", note.c_str());
  }
  if (lead) check_outputs_writable(o);  // --out, --save, --tensorboard-dir: refused before --out is touched

  // Where the start-up goes (a cold run's first minutes are what a user waits through): noted below.
  Timer phase;
  std::vector<std::pair<const char*, double>> startup;
  const auto lap = [&](const char* what) {
    startup.emplace_back(what, phase.seconds());
    phase.reset();
  };
  lap("checks");
  ParamTable params = ParamTable::for_config(config, layout);  // this rank's share only
  check_freeze_patterns(params, o.freeze_patterns);
  // Progress lines (loads, saves, the export): the lead's, unless --quiet.
  const bool show_progress = lead && !o.quiet;
  if (!o.init_dir.empty()) load_hf_checkpoint(o.init_dir, params, nullptr, show_progress);
  else params.init_random(o.seed, config.initializer_range);
  params.freeze(o.freeze_patterns);
  lap(o.init_dir.empty() ? "random weights (host)" : "checkpoint read");
  ModelOptions model_options;
  model_options.loss_over_padded_vocab = o.loss_over_padded_vocab;
  model_options.shared_expert_overlap = o.moe_shared_expert_overlap;
  model_options.tp_comm_overlap = o.tp_comm_overlap;
  model_options.delay_wgrad_compute = o.delay_wgrad_compute;
  model_options.expert_wgrad_micro_batches = o.moe_expert_wgrad_micro_batches;
  model_options.overlap_moe_ep_comm = o.overlap_moe_ep_comm;
  model_options.recompute = o.recompute;
  model_options.fp8 = o.fp8;
  // FP8 matrices marked before placement: on a GPU their bf16 copies are transient (model/transient_compute.h).
  if (o.fp8.enabled()) mark_fp8_params(params, ctx.device, o.fp8.fp8_wgrad());
  // Under CPU offload the head of each bucket's shard keeps its master in pinned host memory.
  place_params(params, ctx, layout, o.adam.memory.effective_fraction(), o.adam.ddp.bucket_elements(dp_size));
  lap("placement on the device");
  if (o.adam.memory.effective_fraction() > 0 && lead)
    for (const std::string& line : describe_offload(params)) note(o, lead, line);
  // This rank's stage (one stage: the whole model), run by the 1F1B table: with one stage F0 B0 F1 B1 ...,
  // a row's forward and backward at a time.
  // The gradient dump (and the routing replay it comes with) runs on one rank or under data and expert
  // parallelism: the gradients are summed and gathered onto rank 0. Tensor parallelism routes each
  // rank's chunk of a row, pipelining runs micro-batches through stages; neither replays a row's routing yet.
  QUILL_CHECK(o.dump_grads_step < 0 || (layout.spec().tp == 1 && layout.spec().cp == 1 && layout.spec().pp == 1),
              "--dump-grads-step (and --replay-routing) under {}: only data and expert parallelism are supported "
              "(give --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1)", layout.spec().describe());
  const StageModel stage_model(config, params, ctx, layout, model_options);
  lap("model");
  AdamW optimizer(params, o.adam, ctx, layout.world());
  lap("optimizer state");

  // What every checkpoint of this run records and a resume must match.
  const CheckpointIdentity identity{config_to_hf_json(config), rows.manifest().value("rows_sha256", "")};
  int64_t first_step = 0;
  bool resumed = false;
  if (!o.resume_dir.empty()) {
    // An interrupted swap of DIR itself or of one of its iterations put back, a killed save's leftovers removed.
    if (lead)
      for (const std::string& line : recover_checkpoint(o.resume_dir)) note(o, lead, line);
    if (layout.world()) layout.world()->barrier();
    // Every rank reads the same latest file (no save runs yet), so all load the same iteration.
    const CheckpointChoice choice =
        choose_checkpoint(o.resume_dir, o.ckpt_step, o.start_fresh_if_no_checkpoint, "--load");
    if (!choice.note.empty()) note(o, lead, choice.note);
    if (!choice.dir.empty()) {
      first_step = load_train_checkpoint(choice.dir, identity, {o.verify_checkpoint, o.verify_checkpoint_rows}, params,
                                         optimizer, ctx, layout, show_progress);
      resumed = true;
    }
  }
  const int64_t last_step = o.stop_after >= 0 ? std::min(o.steps, first_step + o.stop_after) : o.steps;
  if (first_step >= last_step) {
    note(o, lead, fmt::format("nothing to do: {} is at step {} and --steps is {}; nothing was changed", o.resume_dir,
                           first_step, o.steps));
    return result;
  }

  // A fresh run starts a fresh metrics file; a resumed run keeps the lines of the steps before it.
  const std::string metrics_path = o.out_dir + "/metrics.jsonl";
  KeptMetrics kept;
  PreparedRunDir prepared;
  std::unique_ptr<MetricsFile> metrics;
  // OUT/run.svg, drawn by the lead from metrics.jsonl at each checkpoint and at the end (a killed run keeps
  // the picture of its last checkpoint).
  std::unique_ptr<RunPlot> plot;
  const auto draw_plot = [&] {
    if (!plot) return;
    plot->read_new_records(metrics_path);
    plot->write(o.out_dir + "/run.svg");
  };
  if (lead) {
    kept = metrics_before_step(metrics_path, first_step);
    prepared = prepare_run_dir(o);
    for (const std::string& line : prepared.notes) note(o, lead, line);
    for (const std::string& line : kept.warnings) note(o, lead, line);
    write_file_atomic(metrics_path, kept.text);
    metrics = std::make_unique<MetricsFile>(metrics_path);
    plot = std::make_unique<RunPlot>(run_plot_for(o, layout, rows.row_tokens()));
  }
  if (layout.world()) layout.world()->barrier();
  lap("run directory");
  if (!o.quiet) {
    std::string parts;
    double total = 0;
    for (const auto& [what, seconds] : startup) {
      parts += fmt::format("{}{} {:.1f} s", parts.empty() ? "" : ", ", what, seconds);
      total += seconds;
    }
    note(o, lead, fmt::format("start-up {:.1f} s before the first step: {}", total, parts));
  }

  const MasterBytes master = master_bytes(params);
  result.master_owned_bytes = master.owned;
  result.ddp_buckets = static_cast<int64_t>(params.buckets().size());
  result.master_allocated_bytes = master.allocated;
  result.moment_bytes = optimizer.moment_bytes();
  result.host_state_bytes = master.host + optimizer.host_moment_bytes();
  result.device_state_bytes = master.allocated + optimizer.moment_bytes() - optimizer.host_moment_bytes();
  result.warmup_steps = o.warmup_steps;
  result.profile_step = o.profile_step;
  result.active_params = count_params(config).active;
  // The optional concerns, in the order their step brackets open (train/step_observer.h).
  std::vector<std::unique_ptr<StepObserver>> observers;
  if (probe) observers.push_back(probe_observer(*probe, o.profile_step, o.out_dir, layout.rank(), lead));
  if (o.step_mark) observers.push_back(step_mark_observer(*o.step_mark));
  if (o.dump_grads_step >= 0)
    observers.push_back(gradient_dump_observer(o.dump_grads_step, o.out_dir, params, ctx, layout, config, lead));
  const StepInputs inputs{o,      ctx,         layout,    config,   rows, valid_rows ? &*valid_rows : nullptr,
                          params, stage_model, optimizer, observers};
  std::vector<int64_t> moe_layers;
  for (int64_t i = 0; i < config.num_layers; ++i)
    if (config.is_moe(i)) moe_layers.push_back(i);
  IdleExpertWatch idle_experts(moe_layers, simulated ? 0 : o.moe_idle_expert_warning_steps);
  std::unique_ptr<TensorBoardLog> tensorboard;
  // --save DIR: DIR/iter_NNNNNNN and its latest file, kept and written as asked (train/checkpoint_saver.h).
  std::unique_ptr<CheckpointSaver> saver;
  if (!o.save_dir.empty())
    saver = std::make_unique<CheckpointSaver>(
        SaverSettings{o.save_dir, o.keep_last_checkpoints, o.async_save, o.test_async_save_delay_s, lead, o.quiet,
                      o.command},
        identity, params, optimizer, ctx, layout);
  double run_time_s = 0;
  try {
    // Inside the try: a directory that cannot be made after all cleans the run up like any failure.
    if (lead && !o.tensorboard_dir.empty())
      tensorboard = std::make_unique<TensorBoardLog>(
          o.tensorboard_dir, TensorBoardRun{moe_layers, result.active_params, result.world_size, simulated});
    int64_t end_step = last_step, saved_step = -1;
    for (int64_t step = first_step; step < last_step; ++step) {
      // A stop signal (base/stop_signal.h): every rank learns at this boundary whether any rank got one.
      if (o.stop_signal && (result.stop_signal = agreed_stop_signal(layout.world(), ctx, o.stop_signal())) != 0) {
        end_step = step;
        break;
      }
      StepMetrics m = run_step(inputs, step);
      for (const auto& observer : observers) observer->step_timed(step);
      if (valid_rows && is_eval_step(step, o.eval_interval, o.steps)) evaluate(inputs, m);

      if (lead) metrics->append(metrics_json_line(m));
      if (tensorboard) tensorboard->append(m);
      run_time_s += m.step_time_s + m.valid_time_s;
      const double eta = run_time_s / static_cast<double>(step + 1 - first_step) * static_cast<double>(o.steps - step - 1);
      if (lead && !o.quiet) {
        std::string line = megatron_log_line(m, o.steps, o.global_batch, eta);
        if (const ExpertImbalance w = worst_imbalance(m.expert_tokens, moe_layers); w.layer >= 0)
          line += fmt::format(" expert load max/mean: {:.2f} (layer {}) |", w.max_over_mean, w.layer);
        if (simulated) line += fmt::format(" simulated rank {} of {}: loss and grad norm not meaningful |", o.simulate_rank,
                                           layout.grid().world());
        std::printf("%s\n", line.c_str()), std::fflush(stdout);
      }
      if (lead)
        for (const std::string& warning : idle_experts.observe(step, m.expert_tokens))
          std::fprintf(stderr, "warning: %s\n", warning.c_str());
      result.steps.push_back(m);

      // A background save finishes (sealed, named latest) at the first boundary where every rank wrote it.
      if (saver) saver->poll();
      // Megatron's --save DIR --save-interval N: at every N-th step, and at the end (below).
      const bool last = step + 1 == last_step;
      if (saver && !last && o.save_interval > 0 && (step + 1) % o.save_interval == 0) {
        saver->save(step + 1);
        saved_step = step + 1;
        draw_plot();
      }
    }
    result.next_step = end_step;
    // --overlap-param-gather left the last update's all-gathers to a forward that will not come.
    optimizer.finish_param_gather();
    if (metrics) metrics->close();
    // Stopped by a signal: the checkpoint comes first (the scheduler's SIGKILL follows), and the export,
    // an output of a complete run, not at all.
    if (result.stop_signal != 0) {
      if (saver && end_step > first_step) {
        if (saved_step != end_step) saver->save(end_step);
        result.saved_checkpoint = iteration_dir(o.save_dir, end_step);
      }
      if (saver) saver->wait();  // a save in flight is finished before the process ends
      result.wall_time_s = wall.seconds();
      if (lead && !result.steps.empty()) write_file_atomic(o.out_dir + "/summary.json", summary_json(result));
      if (!result.steps.empty()) draw_plot();  // the steps that ran
      // Stopped before a fresh run's first step: nothing of it is left, so that the same command starts it again.
      if (lead && result.steps.empty() && !resumed) clean_failed_run(o, prepared, 0);
      return result;
    }
    if (hf_export) {
      // Collective: every rank writes the masters it owns into the files; nothing is gathered.
      const SaveReport saved =
          export_hf_streamed(*hf_export, o.out_dir + "/hf", params, config, ctx, layout, show_progress);
      if (lead) {
        std::fprintf(stderr, "note: --save-hf: %s\n", export_memory_note(saved).c_str());
        if (!saved.dropped.empty()) {
          const HfFormat other = hf_export->format == HfFormat::Release ? HfFormat::Transformers : HfFormat::Release;
          std::fprintf(stderr,
                       "note: --save-hf: %zu tensors of %s outside quill's model (MTP, vision, audio; first %s) are in "
                       "the %s form's names and are not written to the %s form (--hf-format %s keeps them)\n",
                       saved.dropped.size(), o.init_dir.c_str(), saved.dropped.front().c_str(), hf_format_name(other),
                       hf_format_name(hf_export->format), hf_format_name(other));
        }
      }
    }
    result.wall_time_s = wall.seconds();
    if (probe) {  // every rank's peak, onto every rank (a sum of one-hot vectors: collective over the world)
      const int world = layout.world() ? layout.world()->size() : 1;
      Tensor peaks = Tensor::zeros({world}, DType::I64);
      for (const StepMetrics& m : result.steps)
        peaks.data_as<int64_t>()[layout.rank()] = std::max(peaks.data_as<int64_t>()[layout.rank()], m.memory.peak_bytes);
      all_reduce_host(layout.world(), ctx, peaks);
      result.peak_bytes_per_rank.assign(peaks.data_as<int64_t>(), peaks.data_as<int64_t>() + world);
    }
    if (lead) write_file_atomic(o.out_dir + "/summary.json", summary_json(result));
    draw_plot();
    // The final checkpoint last: one at the run's last step means every output is complete, so a run
    // killed before it resumes from the interval before and writes them again.
    if (saver) {
      saver->save(last_step);
      saver->wait();  // the run ends with its last checkpoint complete and named latest
    }
  } catch (...) {
    saver.reset();  // a writer still running finishes first: its temporary directory is tidied below
    metrics.reset();
    if (!result.steps.empty()) {
      try {
        draw_plot();  // the steps that ran, for a person to see where it went wrong
      } catch (const std::exception&) {
        // Never hide the error that stopped the run.
      }
    }
    if (lead) clean_failed_run(o, prepared, static_cast<int64_t>(result.steps.size()));
    throw;
  }
  return result;
}

}  // namespace quill
