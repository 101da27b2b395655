// The training loop of `quill train`: a global batch of rows per optimizer step (one row per
// micro-batch, fp32 gradient accumulation), the per-token loss normalised over the whole global
// batch (recipes-and-measurement.md §3), AdamW with Megatron's schedule and clipping, a metrics
// line per step, training checkpoints and resume.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/params.h"
#include "ops/device_context.h"
#include "optim/adamw.h"
#include "parallel/layout.h"
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
  // Of step_time_s, the forward and backward passes of the step's micro-batches (with a StepProbe the
  // device is synchronised at their end; without one on a GPU it is the host's share only).
  double passes_time_s = 0;
  // With CPU offload, of the rest: host-clock seconds waiting for the gradients' copy down, in the host
  // AdamW, and waiting for the last copies up (AdamW::OffloadTimes); zero without offload.
  double offload_wait_down_s = 0, offload_host_s = 0, offload_wait_up_s = 0;
  std::vector<std::vector<int64_t>> expert_tokens;  // per MoE layer, per expert
  // --overlap-moe-expert-parallel-comm: this rank's combined steps and the hand-overs between their two
  // passes (at the token exchanges; none would mean nothing overlapped). Zero without the flag.
  int64_t combined_steps = 0, combined_switches = 0;
  StepMemory memory;  // with a StepProbe: "peak_device_bytes" (and on a GPU "peak_gpu_bytes" and friends)
  // After an evaluation step (is_eval_step): the validation rows' loss per supervised token over the
  // --eval-iters global batches, the targets it averaged over, and the evaluation's own time (not in
  // step_time_s). Empty on other steps.
  std::optional<double> valid_loss;
  int64_t valid_supervised = 0;
  double valid_time_s = 0;
};

struct TrainResult {
  std::vector<StepMetrics> steps;
  double wall_time_s = 0;
  bool lead = true;  // world rank 0, the one that writes outputs
  // This rank's optimizer state: fp32 master weights owned (its shards) and allocated apart from
  // the compute copies, and the Adam moments.
  int64_t master_owned_bytes = 0, master_allocated_bytes = 0, moment_bytes = 0;
  int64_t host_state_bytes = 0;    // of the masters and moments, those in host memory (CPU offload)
  int64_t device_state_bytes = 0;  // and those on the device, apart from the compute copies
  int64_t warmup_steps = 0;   // TrainOptions::warmup_steps
  int64_t profile_step = -1;  // TrainOptions::profile_step
  int64_t active_params = 0;  // N of the MFU formula (count_params(config).active)
  // With a StepProbe: every world rank's most allocator bytes over the steps (index: world rank), for
  // comparing each pipeline stage with its memory plan; empty without one.
  std::vector<int64_t> peak_bytes_per_rank;
  int simulated_rank = -1;  // TrainOptions::simulate_rank: the loss and norms are not meaningful
  bool simulated_comm_time = false;  // TrainOptions::simulate_comm_time: the step times include timed stand-ins
  int world_size = 1;       // the layout's GPUs (ranks): tokens/s and MFU per GPU divide by it
  std::string fp8 = "off";          // TrainOptions::fp8, described (ops::Fp8Options::describe)
  std::string recompute = "none";  // TrainOptions::recompute, described (RecomputeOptions::describe)
  std::string attention_dq_order = "fixed";  // TrainOptions::attention_dq_arrival_order: "fixed" or "arrival"
  std::string grouped_gemm_kernel = "auto";  // TrainOptions::grouped_gemm_kernel: "auto", "cublaslt" or "wgmma"
  std::string grouped_wgrad_kernel = "auto";  // TrainOptions::grouped_wgrad_kernel: "auto", "cublaslt" or "wgmma"
  std::string grouped_wgrad_form = "half";        // TrainOptions::grouped_wgrad_form (ops/kernel_trials.h)
  std::string attention_bias_rows = "cublaslt";   // TrainOptions::attention_bias_rows
  std::string attention_forward_form = "narrow";  // TrainOptions::attention_forward_form
  std::string attention_backward_form = "consumers";  // TrainOptions::attention_backward_form
  DdpConfig ddp;  // the overlap flags, and the bucket size in elements as used (the default resolved)
  bool tp_comm_overlap = false, moe_shared_expert_overlap = false, delay_wgrad_compute = false;  // as run
  bool overlap_moe_ep_comm = false;
  int moe_expert_wgrad_micro_batches = 1;  // TrainOptions::moe_expert_wgrad_micro_batches
  int64_t ddp_buckets = 0;  // this rank's gradient buckets
  // A run stopped early by a signal (TrainOptions::stop_signal): its number (0: it ran to its end), the
  // step the next run starts at, and the checkpoint written for it ("" when none: no --save, or no step
  // trained since the one resumed).
  int stop_signal = 0;
  int64_t next_step = 0;
  std::string saved_checkpoint;
};

// Runs the whole job described by `options`; writes out_dir/metrics.jsonl (and checkpoints).
// Every rank of `layout` runs this with the same options: each data-parallel rank takes its
// contiguous share of every global batch, gradients are reduced by the distributed optimizer, and
// world rank 0 alone writes metrics, logs and Hugging Face exports. `layout` is made for the
// model's layer count (resolve_config(options).num_layers).
TrainResult run_training(const TrainOptions& options, const DeviceContext& ctx, const Layout& layout);
// One device, one rank.
TrainResult run_training(const TrainOptions& options, const DeviceContext& ctx = DeviceContext::cpu());

// The model config a run trains: --config, else the --init checkpoint's.
InklingConfig resolve_config(const TrainOptions& options);

// The row indices of optimizer step `step`: consecutive rows, wrapping over the rows file. Also the
// rows of an evaluation's batch k (0 .. eval_iters - 1) in the validation rows.
std::vector<int64_t> rows_for_step(int64_t step, int64_t global_batch, int64_t total_rows);

// Whether a run with validation rows measures the validation loss after `step` (0-based): after every
// eval_interval-th step (Megatron's iteration % eval_interval == 0, its iterations counted from 1; none
// when eval_interval is 0) and after the run's last step (Megatron evaluates again at the end of
// training; here, when the last step is also an interval's, it is evaluated once).
bool is_eval_step(int64_t step, int64_t eval_interval, int64_t steps);

}  // namespace quill
