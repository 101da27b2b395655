// The training loop of `quill train`: a global batch of rows per optimizer step (one row per
// micro-batch, fp32 gradient accumulation), the per-token loss normalised over the whole global
// batch (recipes-and-measurement.md §3), AdamW with Megatron's schedule and clipping, a metrics
// line per step, training checkpoints and resume.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/parallel_context.h"
#include "model/params.h"
#include "ops/device_context.h"
#include "optim/adamw.h"
#include "train/train_options.h"

namespace quill {

struct StepMetrics {
  int64_t step = 0;
  double loss = 0;         // per supervised token over the global batch
  double grad_norm = 0;    // before clipping
  double lr = 0;
  int64_t tokens = 0;      // all tokens of the global batch
  int64_t supervised = 0;  // supervised targets of the global batch
  double step_time_s = 0;
  std::vector<std::vector<int64_t>> expert_tokens;  // per MoE layer, per expert
  StepMemory memory;  // with a StepProbe (CUDA): "peak_gpu_bytes" and friends in metrics.jsonl
};

struct TrainResult {
  std::vector<StepMetrics> steps;
  double wall_time_s = 0;
  bool lead = true;  // data-parallel rank 0, the one that writes outputs
  int64_t warmup_steps = 0;   // TrainOptions::warmup_steps
  int64_t profile_step = -1;  // TrainOptions::profile_step
  int64_t active_params = 0;  // N of the MFU formula (count_params(config).active)
};

// Step times after warm-up: steps >= warmup_steps, the profiled step left out (its event records
// cost host time); all steps when that leaves none.
struct StepSummary {
  int64_t measured_steps = 0;
  double median_s = 0, min_s = 0, max_s = 0, mean_s = 0;
  double spread_pct = 0;     // (max - min) / median, percent
  double cv_pct = 0;         // standard deviation / mean, percent
  double tokens_per_step = 0;
  double tokens_per_s = 0;   // tokens_per_step / median_s
  double mfu = 0;            // 6 * active_params * tokens_per_s / 989e12 (recipes-and-measurement.md)
  int64_t peak_gpu_bytes = -1;  // over every step
};
StepSummary summarize_steps(const TrainResult& result);
// out_dir/summary.json's content: the summary, the definitions, every step's time and memory.
std::string summary_json(const TrainResult& result);
// One line for the end of `quill train`.
std::string summary_line(const TrainResult& result);

// Runs the whole job described by `options`; writes out_dir/metrics.jsonl (and checkpoints).
// With a data-parallel communicator in `parallel`, every rank runs this with the same options: each
// takes its contiguous share of every global batch, gradients are reduced by the distributed
// optimizer, and rank 0 alone writes metrics, logs and Hugging Face exports.
TrainResult run_training(const TrainOptions& options, const DeviceContext& ctx = DeviceContext::cpu(),
                         const ParallelContext& parallel = ParallelContext::single_device());

// The row indices of optimizer step `step`: consecutive rows, wrapping over the rows file.
std::vector<int64_t> rows_for_step(int64_t step, int64_t global_batch, int64_t total_rows);

// One metrics.jsonl line.
std::string metrics_json_line(const StepMetrics& m);
// Megatron's familiar per-iteration log line.
// Megatron's familiar per-iteration log line, then tokens/s and the estimated time to the end.
std::string megatron_log_line(const StepMetrics& m, int64_t total_steps, int64_t global_batch, double eta_s);

}  // namespace quill
