// What a training run reports: the metrics.jsonl line and Megatron-style log line of each step, and
// the summary of the step times after warm-up (summary.json and the closing line of quill train).
#pragma once

#include <string>

#include "train/trainer.h"

namespace quill {

// One metrics.jsonl line.
std::string metrics_json_line(const StepMetrics& m);
// Megatron's familiar per-iteration log line, then tokens/s and the estimated time to the end.
std::string megatron_log_line(const StepMetrics& m, int64_t total_steps, int64_t global_batch, double eta_s);


// Step times after warm-up: steps >= warmup_steps, the profiled step left out (its event records
// cost host time); all steps when that leaves none.
struct StepSummary {
  int64_t measured_steps = 0;
  double median_s = 0, min_s = 0, max_s = 0, mean_s = 0;
  double spread_pct = 0;     // (max - min) / median, percent
  double cv_pct = 0;         // standard deviation / mean, percent
  double tokens_per_step = 0;
  double tokens_per_s = 0;   // tokens_per_step / median_s
  double tokens_per_s_per_gpu = 0;  // tokens_per_s / the layout's GPUs
  double mfu = 0;            // 6 * active_params * tokens_per_s_per_gpu / 989e12 (recipes-and-measurement.md)
  int64_t peak_gpu_bytes = -1;     // over every step, with a GPU probe
  int64_t peak_device_bytes = -1;  // the same with any probe (the CPU backend's allocator too)
};
StepSummary summarize_steps(const TrainResult& result);
// out_dir/summary.json's content: the summary, the definitions, every step's time and memory.
std::string summary_json(const TrainResult& result);
// One line for the end of `quill train`.
std::string summary_line(const TrainResult& result);

}  // namespace quill
