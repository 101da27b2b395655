#include "train/trainer.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/file_util.h"
#include "base/timer.h"
#include "data/rows.h"
#include "io/hf_checkpoint.h"
#include "model/inkling_model.h"
#include "io/safetensors.h"
#include "model/param_placement.h"
#include "ops/convert.h"
#include "train/train_checkpoint.h"

namespace quill {

std::vector<int64_t> rows_for_step(int64_t step, int64_t global_batch, int64_t total_rows) {
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < global_batch; ++i) rows.push_back((step * global_batch + i) % total_rows);
  return rows;
}

std::string metrics_json_line(const StepMetrics& m) {
  nlohmann::json j;
  j["step"] = m.step;
  j["loss"] = m.loss;
  j["grad_norm"] = m.grad_norm;
  j["lr"] = m.lr;
  j["tokens"] = m.tokens;
  j["supervised_tokens"] = m.supervised;
  j["step_time_s"] = m.step_time_s;
  j["expert_tokens"] = m.expert_tokens;
  if (m.memory.peak_bytes >= 0) {
    j["peak_gpu_bytes"] = m.memory.peak_bytes;
    j["gpu_in_use_bytes"] = m.memory.in_use_bytes;
    j["device_used_bytes"] = m.memory.device_used_bytes;
  }
  return j.dump();
}

StepSummary summarize_steps(const TrainResult& r) {
  StepSummary s;
  std::vector<double> times;
  for (const StepMetrics& m : r.steps)
    if (m.step >= r.warmup_steps && m.step != r.profile_step) times.push_back(m.step_time_s);
  if (times.empty())
    for (const StepMetrics& m : r.steps) times.push_back(m.step_time_s);
  for (const StepMetrics& m : r.steps) s.peak_gpu_bytes = std::max(s.peak_gpu_bytes, m.memory.peak_bytes);
  if (times.empty()) return s;
  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  s.measured_steps = static_cast<int64_t>(n);
  s.median_s = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  s.min_s = sorted.front();
  s.max_s = sorted.back();
  double sum = 0, sq = 0;
  for (double t : times) sum += t;
  s.mean_s = sum / static_cast<double>(n);
  for (double t : times) sq += (t - s.mean_s) * (t - s.mean_s);
  s.cv_pct = n > 1 && s.mean_s > 0 ? 100.0 * std::sqrt(sq / static_cast<double>(n - 1)) / s.mean_s : 0.0;
  s.spread_pct = s.median_s > 0 ? 100.0 * (s.max_s - s.min_s) / s.median_s : 0.0;
  s.tokens_per_step = r.steps.empty() ? 0.0 : static_cast<double>(r.steps.back().tokens);
  s.tokens_per_s = s.median_s > 0 ? s.tokens_per_step / s.median_s : 0.0;
  s.mfu = 6.0 * static_cast<double>(r.active_params) * s.tokens_per_s / 989e12;
  return s;
}

std::string summary_json(const TrainResult& r) {
  const StepSummary s = summarize_steps(r);
  nlohmann::json j;
  j["steps"] = r.steps.size();
  j["warmup_steps"] = r.warmup_steps;
  j["profile_step"] = r.profile_step;
  j["measured_steps"] = s.measured_steps;
  j["median_step_s"] = s.median_s;
  j["min_step_s"] = s.min_s;
  j["max_step_s"] = s.max_s;
  j["mean_step_s"] = s.mean_s;
  j["spread_pct"] = s.spread_pct;
  j["cv_pct"] = s.cv_pct;
  j["tokens_per_step"] = s.tokens_per_step;
  j["tokens_per_s"] = s.tokens_per_s;
  j["active_params"] = r.active_params;
  j["mfu"] = s.mfu;
  j["peak_gpu_bytes"] = s.peak_gpu_bytes;
  if (!r.steps.empty() && r.steps.back().memory.device_used_bytes >= 0) {
    j["device_used_bytes_end"] = r.steps.back().memory.device_used_bytes;
    j["device_total_bytes"] = r.steps.back().memory.device_total_bytes;
  }
  j["wall_time_s"] = r.wall_time_s;
  j["definitions"] = {
      {"measured", "steps >= warmup_steps, the profiled step left out (all steps when that leaves none)"},
      {"step_time", "host clock around the whole optimizer step, the device synchronised at its end"},
      {"spread_pct", "(max - min) / median of the measured steps"},
      {"mfu", "6 * active_params * tokens_per_s / 989e12"},
      {"peak_gpu_bytes", "most bytes the device allocator held at once during a step (tensors; not the CUDA "
                         "context, cuBLASLt workspace or stream-ordered scratch), max over steps"},
      {"device_used_bytes_end", "cudaMemGetInfo total - free after the last step"}};
  nlohmann::json steps = nlohmann::json::array();
  for (const StepMetrics& m : r.steps)
    steps.push_back({{"step", m.step}, {"step_time_s", m.step_time_s}, {"peak_gpu_bytes", m.memory.peak_bytes},
                     {"device_used_bytes", m.memory.device_used_bytes}});
  j["per_step"] = steps;
  return j.dump(1) + "\n";
}

std::string summary_line(const TrainResult& r) {
  const StepSummary s = summarize_steps(r);
  if (s.measured_steps == 0) return "no steps measured";
  std::string line = fmt::format(
      "steps >= {} ({} measured{}): median {:.1f} ms, min {:.1f}, max {:.1f} (spread {:.1f}%, cv {:.1f}%); {:.0f} "
      "tokens/s, MFU {:.1f}% (N = {})",
      r.warmup_steps, s.measured_steps, r.profile_step >= 0 ? fmt::format(", step {} profiled and left out", r.profile_step) : "",
      1e3 * s.median_s, 1e3 * s.min_s, 1e3 * s.max_s, s.spread_pct, s.cv_pct, s.tokens_per_s, 100 * s.mfu,
      r.active_params);
  if (s.peak_gpu_bytes >= 0) line += fmt::format("; peak GPU {:.2f} GiB", static_cast<double>(s.peak_gpu_bytes) / (1 << 30));
  if (!r.steps.empty() && r.steps.back().memory.device_used_bytes >= 0)
    line += fmt::format(" (device in use at the end {:.2f} of {:.2f} GiB)",
                        static_cast<double>(r.steps.back().memory.device_used_bytes) / (1 << 30),
                        static_cast<double>(r.steps.back().memory.device_total_bytes) / (1 << 30));
  return line;
}

std::string megatron_log_line(const StepMetrics& m, int64_t total_steps, int64_t global_batch, double eta_s) {
  std::time_t now = std::time(nullptr);
  const int64_t eta = static_cast<int64_t>(eta_s + 0.5);
  return fmt::format(
      " [{:%Y-%m-%d %H:%M:%S}] iteration {:>8}/{:>8} | consumed samples: {:>12} | elapsed time per iteration (ms): "
      "{:.1f} | learning rate: {:.6E} | global batch size: {:>5} | lm loss: {:.6E} | grad norm: {:.3f} | "
      "number of skipped iterations: {:>3} | number of nan iterations: {:>3} | tokens/s: {:.0f} | ETA {}:{:02}:{:02} |",
      fmt::localtime(now), m.step + 1, total_steps, (m.step + 1) * global_batch, m.step_time_s * 1000.0, m.lr,
      global_batch, m.loss, m.grad_norm, 0, 0, m.tokens / m.step_time_s, eta / 3600, eta / 60 % 60, eta % 60);
}

namespace {

InklingConfig resolve_config(const TrainOptions& o) {
  if (!o.config_path.empty()) return load_inkling_config(o.config_path);
  QUILL_CHECK(!o.init_dir.empty(), "quill train: give --config, or --init with a checkpoint holding config.json");
  return load_inkling_config(o.init_dir);
}

// Gradients before clipping, fp32, under checkpoint names and in checkpoint layout (gate/up rows
// interleaved), for tensor-by-tensor comparison with a reference implementation.
void dump_gradients(const std::string& path, const ParamTable& params, const DeviceContext& ctx) {
  std::vector<std::pair<std::string, Tensor>> grads;
  for (const Param& p : params.params()) {
    if (!p.trainable) continue;
    Tensor host = Tensor::empty(p.shape, DType::F32);
    ops::transfer(ctx, p.grad, host);
    grads.emplace_back(p.name, p.gate_up_interleaved ? interleave_gate_up(host) : host);
  }
  write_safetensors(path, grads);
}

// Row `row` of a routing file: per layer, its T x top_k slice (undefined for dense layers).
std::vector<Tensor> routing_of_row(const SafetensorsFile& file, const InklingConfig& config, int64_t row, int64_t T) {
  std::vector<Tensor> topk(static_cast<size_t>(config.num_layers));
  for (int64_t i = 0; i < config.num_layers; ++i) {
    if (!config.is_moe(i)) continue;
    const std::string name = fmt::format("model.llm.layers.{}.mlp.gate.topk", i);
    QUILL_CHECK(file.contains(name), "{}: tensor {} missing", file.path(), name);
    const Tensor all = file.tensor(name);
    QUILL_CHECK(all.dtype() == DType::I32 && all.ndim() == 2 && all.dim(0) >= (row + 1) * T,
                "{}: {} is {}, too small for row {} of {} tokens", file.path(), name, all.describe(), row, T);
    topk[static_cast<size_t>(i)] = all.rows(row * T, (row + 1) * T).clone();
  }
  return topk;
}

void check_rows_fit(const RowsReader& rows, const InklingConfig& config) {
  for (int64_t r = 0; r < rows.rows(); ++r) {
    const uint32_t* t = rows.tokens(r);
    for (int64_t i = 0; i < rows.row_tokens(); ++i)
      QUILL_CHECK(t[i] < static_cast<uint32_t>(config.vocab_size),
                  "rows: row {} position {} has token id {}, outside the model's vocabulary of {}", r, i, t[i],
                  config.vocab_size);
  }
}

}  // namespace

namespace {

// Sums host values over the data-parallel ranks (through device memory when the communicator
// is a GPU one).
void all_reduce_host(Comm* dp, const DeviceContext& ctx, const Tensor& host) {
  if (dp == nullptr || dp->size() == 1) return;
  Tensor t = dp->device() == Device::CPU ? host : Tensor::empty(host.shape(), host.dtype(), *ctx.allocator);
  ops::transfer(ctx, host, t);
  dp->all_reduce(t, ReduceOp::Sum);
  ops::transfer(ctx, t, host);
}

}  // namespace

TrainResult run_training(const TrainOptions& o, const DeviceContext& device_ctx, const ParallelContext& parallel) {
  Comm* dp = parallel.dp > 1 ? parallel.dp_comm : nullptr;
  QUILL_CHECK(parallel.dp == 1 || dp != nullptr, "data parallelism of {} needs a data-parallel communicator", parallel.dp);
  const int dp_size = dp ? dp->size() : 1, dp_rank = dp ? dp->rank() : 0;
  const bool lead = dp_rank == 0;
  Timer wall;
  QUILL_CHECK(o.steps > 0, "--steps must be positive, got {}", o.steps);
  QUILL_CHECK(o.global_batch > 0, "--global-batch must be positive, got {}", o.global_batch);
  QUILL_CHECK(!o.out_dir.empty(), "--out is required");
  QUILL_CHECK(o.global_batch % dp_size == 0, "--global-batch {} does not divide over {} data-parallel ranks",
              o.global_batch, dp_size);

  // Optional instrumentation (peak memory per step, the per-op table of one step): its context
  // wraps the device's op table, so everything below runs through it.
  std::unique_ptr<StepProbe> probe;
  if (o.make_probe) probe = o.make_probe(device_ctx);
  QUILL_CHECK(o.profile_step < 0 || probe != nullptr, "--profile-step {} needs --device cuda", o.profile_step);
  const DeviceContext ctx = probe ? probe->context() : device_ctx;

  const InklingConfig config = resolve_config(o);
  RowsReader rows = RowsReader::open(o.rows_dir);
  check_rows_fit(rows, config);

  ParamTable params = ParamTable::for_config(config);
  if (!o.init_dir.empty()) load_hf_checkpoint(o.init_dir, params, nullptr);
  else params.init_random(o.seed);
  params.freeze(o.freeze_patterns);
  place_params(params, ctx, dp_size);
  ModelOptions model_options;
  model_options.loss_over_padded_vocab = o.loss_over_padded_vocab;
  InklingModel model(config, params, ctx, ParallelContext::single_device(), model_options);
  AdamW optimizer(params, o.adam, ctx, dp);

  int64_t first_step = 0;
  if (!o.resume_dir.empty()) first_step = load_train_checkpoint(o.resume_dir, params, optimizer, ctx, dp);

  if (lead) make_dirs(o.out_dir);
  if (dp) dp->barrier();
  const std::string metrics_path = o.out_dir + "/metrics.jsonl";
  // A fresh run starts a fresh metrics file; a resumed run keeps the lines of the steps before it.
  std::string kept;
  if (first_step > 0 && path_exists(metrics_path)) {
    std::ifstream in(metrics_path);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      if (nlohmann::json::parse(line).at("step").get<int64_t>() < first_step) kept += line + "\n";
    }
  }
  std::FILE* metrics = nullptr;
  if (lead) {
    write_file_atomic(metrics_path, kept);
    metrics = std::fopen(metrics_path.c_str(), "a");
    QUILL_CHECK(metrics != nullptr, "{}: cannot open for appending", metrics_path);
  }

  TrainResult result;
  result.lead = lead;
  result.warmup_steps = o.warmup_steps;
  result.profile_step = o.profile_step;
  result.active_params = count_params(config).active;
  double run_time_s = 0;
  const int64_t T = rows.row_tokens();
  std::vector<int32_t> tokens(static_cast<size_t>(T));
  const int64_t last_step = o.stop_after >= 0 ? std::min(o.steps, first_step + o.stop_after) : o.steps;
  try {
    for (int64_t step = first_step; step < last_step; ++step) {
      Timer step_timer;
      const bool profile_ops = step == o.profile_step;
      if (probe) probe->begin_step(step, profile_ops);
      StepMetrics m;
      m.step = step;
      m.lr = o.lr.lr_at(step, o.steps);
      const std::vector<int64_t> batch = rows_for_step(step, o.global_batch, rows.rows());
      for (int64_t r : batch) m.supervised += rows.supervised_targets(r);
      QUILL_CHECK(m.supervised > 0, "step {}: the global batch has no supervised target", step);
      const double grad_scale = 1.0 / static_cast<double>(m.supervised);

      zero_grads(params, ctx);
      double loss_sum = 0;
      const int64_t share = o.global_batch / dp_size;
      const std::vector<int64_t> mine(batch.begin() + dp_rank * share, batch.begin() + (dp_rank + 1) * share);
      std::unique_ptr<SafetensorsFile> replay;
      if (step == o.dump_grads_step && !o.replay_routing_file.empty())
        replay = std::make_unique<SafetensorsFile>(SafetensorsFile::open(o.replay_routing_file));
      for (size_t j = 0; j < mine.size(); ++j) {
        const int64_t r = mine[j];
        if (replay) model.replay_routing(routing_of_row(*replay, config, dp_rank * share + j, T));
        const uint32_t* src = rows.tokens(r);
        for (int64_t i = 0; i < T; ++i) tokens[static_cast<size_t>(i)] = static_cast<int32_t>(src[i]);
        RowResult rr = model.train_row(tokens.data(), rows.mask(r), T, grad_scale);
        loss_sum += rr.loss_sum;
        if (m.expert_tokens.empty()) m.expert_tokens = rr.expert_tokens;
        else
          for (size_t l = 0; l < rr.expert_tokens.size(); ++l)
            for (size_t e = 0; e < rr.expert_tokens[l].size(); ++e) m.expert_tokens[l][e] += rr.expert_tokens[l][e];
      }
      model.set_routing(InklingModel::Routing::Free);
      m.tokens = T * o.global_batch;
      if (dp) {
        Tensor sums = Tensor::empty({1}, DType::F64);
        sums.data_as<double>()[0] = loss_sum;
        all_reduce_host(dp, ctx, sums);
        loss_sum = sums.data_as<double>()[0];
        for (auto& layer : m.expert_tokens) {
          Tensor counts = Tensor::empty({static_cast<int64_t>(layer.size())}, DType::I64);
          std::copy(layer.begin(), layer.end(), counts.data_as<int64_t>());
          all_reduce_host(dp, ctx, counts);
          std::copy(counts.data_as<int64_t>(), counts.data_as<int64_t>() + counts.numel(), layer.begin());
        }
      }
      m.loss = loss_sum / static_cast<double>(m.supervised);
      if (step == o.dump_grads_step) {
        QUILL_CHECK(dp == nullptr, "--dump-grads-step needs a single data-parallel rank");
        dump_gradients(o.out_dir + fmt::format("/grads_step{}.safetensors", step), params, ctx);
      }
      QUILL_CHECK(std::isfinite(m.loss), "step {}: loss is {}; stopping before the weights are corrupted", step, m.loss);
      m.grad_norm = optimizer.step(m.lr);
      if (probe) m.memory = probe->end_step(step, profile_ops, lead ? o.out_dir : std::string());
      m.step_time_s = step_timer.seconds();
      if (probe && profile_ops && lead) probe->report(o.out_dir);

      if (lead) {
        std::fprintf(metrics, "%s\n", metrics_json_line(m).c_str());
        std::fflush(metrics);
      }
      run_time_s += m.step_time_s;
      const double eta = run_time_s / static_cast<double>(step + 1 - first_step) * static_cast<double>(o.steps - step - 1);
      if (lead && !o.quiet) std::printf("%s\n", megatron_log_line(m, o.steps, o.global_batch, eta).c_str()), std::fflush(stdout);
      result.steps.push_back(m);

      const bool last = step + 1 == last_step;
      if ((o.save_every > 0 && (step + 1) % o.save_every == 0) || (last && o.final_checkpoint))
        save_train_checkpoint(o.out_dir + "/checkpoint", step + 1, params, optimizer, ctx, dp);
    }
  } catch (...) {
    if (metrics) std::fclose(metrics);
    throw;
  }
  if (metrics) std::fclose(metrics);
  if (o.save_hf && lead) {
    SaveOptions save;
    save.overwrite = true;
    save_hf_checkpoint(o.out_dir + "/hf", host_copy(params, ctx), o.init_dir, config_to_hf_json(config), save);
  }
  result.wall_time_s = wall.seconds();
  if (lead) write_file_atomic(o.out_dir + "/summary.json", summary_json(result));
  return result;
}

}  // namespace quill
