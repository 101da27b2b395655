#include "train/step_report.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <nlohmann/json.hpp>
#include <vector>

namespace quill {

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
  if (m.combined_steps > 0) {
    j["combined_steps"] = m.combined_steps;
    j["combined_pass_switches"] = m.combined_switches;
  }
  if (m.valid_loss) {
    j["valid_loss"] = *m.valid_loss;
    j["valid_supervised_tokens"] = m.valid_supervised;
    j["valid_time_s"] = m.valid_time_s;
  }
  if (m.memory.peak_bytes >= 0) j["peak_device_bytes"] = m.memory.peak_bytes;
  if (m.memory.peak_bytes >= 0 && m.memory.gpu) {
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
  for (const StepMetrics& m : r.steps) {
    s.peak_device_bytes = std::max(s.peak_device_bytes, m.memory.peak_bytes);
    if (m.memory.gpu) s.peak_gpu_bytes = std::max(s.peak_gpu_bytes, m.memory.peak_bytes);
  }
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
  // Per GPU, as the recipe's metrics (docs/recipes-and-measurement.md): the job's tokens over its GPUs.
  s.tokens_per_s_per_gpu = s.tokens_per_s / std::max(1, r.world_size);
  s.mfu = 6.0 * static_cast<double>(r.active_params) * s.tokens_per_s_per_gpu / 989e12;
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
  j["world_size"] = r.world_size;
  j["recompute"] = r.recompute;
  j["fp8"] = r.fp8;
  j["attention_dq_order"] = r.attention_dq_order;
  j["grouped_gemm_kernel"] = r.grouped_gemm_kernel;
  j["grouped_wgrad_kernel"] = r.grouped_wgrad_kernel;
  j["grouped_wgrad_form"] = r.grouped_wgrad_form;
  j["attention_bias_rows"] = r.attention_bias_rows;
  j["attention_forward_form"] = r.attention_forward_form;
  j["attention_backward_form"] = r.attention_backward_form;
  j["overlap_grad_reduce"] = r.ddp.overlap_grad_reduce;
  j["overlap_param_gather"] = r.ddp.overlap_param_gather;
  j["tp_comm_overlap"] = r.tp_comm_overlap;
  j["moe_shared_expert_overlap"] = r.moe_shared_expert_overlap;
  j["delay_wgrad_compute"] = r.delay_wgrad_compute;
  j["moe_expert_wgrad_micro_batches"] = r.moe_expert_wgrad_micro_batches;
  j["overlap_moe_expert_parallel_comm"] = r.overlap_moe_ep_comm;
  j["ddp_bucket_size"] = r.ddp.bucket_size;
  j["ddp_buckets"] = r.ddp_buckets;
  j["active_params"] = r.active_params;
  if (r.simulated_rank >= 0) {
    // One rank's compute without its communication: no job rate (the projection gives it).
    j["tokens_per_s"] = j["tokens_per_s_per_gpu"] = j["mfu"] = nullptr;
  } else {
    j["tokens_per_s"] = s.tokens_per_s;
    j["tokens_per_s_per_gpu"] = s.tokens_per_s_per_gpu;
    j["mfu"] = s.mfu;
  }
  j["peak_gpu_bytes"] = s.peak_gpu_bytes;
  j["peak_device_bytes"] = s.peak_device_bytes;
  if (!r.peak_bytes_per_rank.empty()) j["peak_device_bytes_per_rank"] = r.peak_bytes_per_rank;
  if (r.simulated_rank >= 0) {
    j["simulated_rank"] = r.simulated_rank;
    j["loss_meaningful"] = false;
    j["simulated_comm_time"] = r.simulated_comm_time;
  }
  if (!r.steps.empty() && r.steps.back().memory.device_used_bytes >= 0) {
    j["device_used_bytes_end"] = r.steps.back().memory.device_used_bytes;
    j["device_total_bytes"] = r.steps.back().memory.device_total_bytes;
  }
  j["wall_time_s"] = r.wall_time_s;
  // The last evaluation of this invocation (the run's last step is always one: is_eval_step).
  for (auto m = r.steps.rbegin(); m != r.steps.rend(); ++m) {
    if (!m->valid_loss) continue;
    j["valid_loss"] = *m->valid_loss;
    j["valid_loss_step"] = m->step;
    break;
  }
  j["optimizer_state_bytes_rank0"] = {{"master_owned", r.master_owned_bytes},
                                      {"master_allocated", r.master_allocated_bytes},
                                      {"moments", r.moment_bytes},
                                      {"device", r.device_state_bytes},
                                      {"host", r.host_state_bytes}};
  j["definitions"] = {
      {"optimizer_state_bytes_rank0", "world rank 0's fp32 master weights (owned: its shards; allocated: apart from "
                                      "the compute copies, on the device) and Adam moments; device / host: of both, "
                                      "the bytes on the device (apart from the compute copies) and in pinned host "
                                      "memory (CPU offload)"},
      {"measured", "steps >= warmup_steps, the profiled step left out (all steps when that leaves none)"},
      {"step_time", "host clock around the whole optimizer step, the device synchronised at its end"},
      {"passes_time_s", "per step: of step_time_s, the forward and backward passes of the step's micro-batches, the "
                        "device synchronised at their end (the rest: loss and count sums, gradient reduction, norm, "
                        "update and weight all-gather)"},
      {"offload_wait_down_s", "per step, with CPU offload: host-clock seconds the optimizer waited for the offloaded "
                              "gradients' copy down (with --overlap-cpu-optimizer-d2h-h2d: for each stretch's, "
                              "the host updating the ones before meanwhile)"},
      {"offload_host_s", "per step, with CPU offload: host-clock seconds of the host AdamW (the copies up started "
                         "behind it)"},
      {"offload_wait_up_s", "per step, with CPU offload and no overlap: host-clock seconds waiting for the last "
                            "copies up before the device's part of the update"},
      {"spread_pct", "(max - min) / median of the measured steps"},
      {"valid_loss", "with --valid-rows: the last validation loss of this invocation (per supervised target over "
                     "--eval-iters global batches of the validation rows), measured after step valid_loss_step"},
      {"tokens_per_s", "tokens_per_step / median_step_s: the whole job's (null for a simulated rank)"},
      {"tokens_per_s_per_gpu", "tokens_per_s / world_size"},
      {"mfu", "6 * active_params * tokens_per_s_per_gpu / 989e12"},
      {"peak_gpu_bytes", "most bytes the device allocator held at once during a step (tensors; not the CUDA "
                         "context, cuBLASLt workspace or stream-ordered scratch), max over steps"},
      {"peak_device_bytes", "the same for any backend (the CPU reference's allocator too): what quill plan's "
                            "allocator peak predicts"},
      {"peak_device_bytes_per_rank", "peak_device_bytes of every world rank (index: rank)"},
      {"device_used_bytes_end", "cudaMemGetInfo total - free after the last step"},
      {"simulated_rank", "present for quill train --simulate-rank R: world rank R run alone, its collectives "
                         "served by a loopback communicator (docs/simulate-rank.md); step times are its compute "
                         "without communication time, memory and collective bytes (collectives.json) are the rank's; "
                         "the loss and gradient norm are not meaningful; peak_device_bytes_per_rank holds rank R's "
                         "entry only (the others 0), optimizer_state_bytes_rank0 is rank R's"},
      {"simulated_comm_time", "with simulated_rank: true when every collective also took the communication model's "
                              "time on a stand-in queue (--simulate-comm-time): the step times then include the "
                              "collectives and what of them ran under compute"}};
  nlohmann::json steps = nlohmann::json::array();
  for (const StepMetrics& m : r.steps)
    steps.push_back({{"step", m.step}, {"step_time_s", m.step_time_s}, {"passes_time_s", m.passes_time_s},
                     {"peak_gpu_bytes", m.memory.gpu ? m.memory.peak_bytes : int64_t{-1}},
                     {"peak_device_bytes", m.memory.peak_bytes}, {"device_used_bytes", m.memory.device_used_bytes},
                     {"offload_wait_down_s", m.offload_wait_down_s}, {"offload_host_s", m.offload_host_s},
                     {"offload_wait_up_s", m.offload_wait_up_s}});
  j["per_step"] = steps;
  return j.dump(1) + "\n";
}

std::string summary_line(const TrainResult& r) {
  const StepSummary s = summarize_steps(r);
  if (s.measured_steps == 0) return "no steps measured";
  std::string line = fmt::format(
      "steps >= {} ({} measured{}): median {:.1f} ms, min {:.1f}, max {:.1f} (spread {:.1f}%, cv {:.1f}%)",
      r.warmup_steps, s.measured_steps, r.profile_step >= 0 ? fmt::format(", step {} profiled and left out", r.profile_step) : "",
      1e3 * s.median_s, 1e3 * s.min_s, 1e3 * s.max_s, s.spread_pct, s.cv_pct);
  if (r.simulated_rank < 0) {
    line += fmt::format("; {:.0f} tokens/s", s.tokens_per_s);
    if (r.world_size > 1) line += fmt::format(" ({:.0f} per GPU of {})", s.tokens_per_s_per_gpu, r.world_size);
    line += fmt::format(", MFU {:.1f}% (N = {})", 100 * s.mfu, r.active_params);
  }
  if (s.peak_gpu_bytes >= 0) line += fmt::format("; peak GPU {:.2f} GiB", static_cast<double>(s.peak_gpu_bytes) / (1 << 30));
  else if (s.peak_device_bytes >= 0)
    line += fmt::format("; peak CPU allocator {:.3f} GiB", static_cast<double>(s.peak_device_bytes) / (1 << 30));
  if (!r.steps.empty() && r.steps.back().memory.device_used_bytes >= 0)
    line += fmt::format(" (device in use at the end {:.2f} of {:.2f} GiB)",
                        static_cast<double>(r.steps.back().memory.device_used_bytes) / (1 << 30),
                        static_cast<double>(r.steps.back().memory.device_total_bytes) / (1 << 30));
  if (r.simulated_rank >= 0)
    line += fmt::format("; simulated rank {}: {}; loss not meaningful", r.simulated_rank,
                        r.simulated_comm_time ? "compute and the collectives' modelled time (timed stand-ins)"
                                              : "compute only, no communication time");
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
      global_batch, m.loss, m.grad_norm, 0, 0, m.tokens / m.step_time_s, eta / 3600, eta / 60 % 60, eta % 60) +
         (m.valid_loss ? fmt::format(" valid loss {:.4f} |", *m.valid_loss) : std::string());
}

}  // namespace quill
