// Everything that defines a training run of `quill train` (numerics) and how it is carried out.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ops/grouped_gemm_kernel.h"
#include "ops/kernel_trials.h"
#include "comm/step_mark.h"
#include "io/hf_export.h"
#include "model/recompute.h"
#include "ops/device_context.h"
#include "ops/fp8_options.h"

#include "optim/adamw.h"
#include "optim/lr_schedule.h"

namespace quill {

// Device instrumentation of a run, optional (the CLI makes one for CUDA: per-step peak memory and a
// per-op timing table of one step; and for the CPU: the per-step peak of its allocator). The trainer trains with context() and brackets each step.
struct StepMemory {
  bool gpu = true;                  // a GPU's allocator (else the CPU backend's, tensor/tracking_allocator.h)
  int64_t peak_bytes = -1;          // most bytes the device allocator held during the step
  int64_t in_use_bytes = -1;        // held at the end of the step
  int64_t device_used_bytes = -1;   // cudaMemGetInfo: total - free, at the end of the step
  int64_t device_total_bytes = -1;
};
class StepProbe {
 public:
  virtual ~StepProbe() = default;
  virtual DeviceContext context() const = 0;
  virtual void begin_step(int64_t step, bool profile_ops) = 0;
  // After the step's forward and backward passes (every micro-batch), before the loss and count sums and
  // the optimizer: a GPU probe synchronises the device, so that the trainer's clock splits the step into
  // its passes and the rest (StepMetrics::passes_time_s; the projection of docs/comm-model.md needs both).
  virtual void passes_done(int64_t step) { (void)step; }
  // After the step's last op: synchronises the device, so that the step's host time is complete.
  virtual StepMemory end_step(int64_t step, bool profile_ops, const std::string& out_dir) = 0;
  // After the profiled step's time was taken, on every rank: the lead prints the op table and writes
  // out_dir/op_profile_step{step}.json (and .txt); every other rank writes its own as
  // op_profile_step{step}.rank{rank}.json (and .txt), so that each pipeline stage's profile is kept.
  virtual void report(const std::string& out_dir, int rank, bool lead) = 0;
};

struct TrainOptions {
  std::string config_path;   // config.json (file or directory); defaults to init_dir's
  std::string rows_dir;      // rows produced by the data layer
  // Megatron's --eval-interval N --eval-iters K with `quill train --valid-rows DIR`: after every N-th
  // step and after the run's last one, K global batches of the validation rows, forward only, give
  // StepMetrics::valid_loss (docs/run-directory.md, "Validation loss"). eval_interval 0: after the last
  // step only. Without valid_rows_dir there is no evaluation (and eval_interval must stay 0).
  std::string valid_rows_dir;
  int64_t eval_interval = 0;
  int64_t eval_iters = 1;
  std::string init_dir;      // Hugging Face checkpoint to start from ("" = random init from seed)
  uint64_t seed = 1234;
  int64_t steps = 10;
  int64_t global_batch = 1;  // rows per optimizer step, one row per micro-batch
  LrSchedule lr;
  AdamWConfig adam;
  std::vector<std::string> freeze_patterns;  // '*' globs over parameter names
  bool loss_over_padded_vocab = false;
  std::string out_dir;
  bool overwrite = false;    // replace the outputs of an earlier run in a non-empty out_dir
  // Training checkpoints only when asked, as Megatron's --save DIR --save-interval N: into save_dir
  // at the end and every save_interval steps (0: only at the end); none when save_dir is empty.
  std::string save_dir;
  int64_t save_interval = 0;
  // --load DIR (Megatron's; --resume DIR is the same option): a --save directory of iterations, resumed
  // from the one its latest_checkpointed_iteration.txt names or ckpt_step's, or one checkpoint directory
  // (train/checkpoint_history.h). Without a checkpoint there the run is refused unless
  // start_fresh_if_no_checkpoint (Megatron would start fresh silently).
  std::string resume_dir;
  int64_t ckpt_step = -1;    // Megatron's --ckpt-step N: that iteration instead of the latest (-1: the latest)
  bool start_fresh_if_no_checkpoint = false;
  // --keep-last-checkpoints N: after each save, only the newest N iterations stay in save_dir (the
  // latest always among them; 0: all stay).
  int64_t keep_last_checkpoints = 0;
  // Megatron's --async-save: the state is copied to host memory at the step boundary and written by a
  // background thread while training goes on (train/checkpoint_saver.h).
  bool async_save = false;
  // Tests only (hidden --test-async-save-delay S): the background writer sleeps S seconds first, so that a
  // test can kill the run while a save is in flight.
  double test_async_save_delay_s = 0;
  bool verify_rows = true;   // check rows.bin against the manifest's rows_sha256 before training
  // On --resume (train/checkpoint_identity.h): check state.json's and every shard's SHA-256, and that the
  // checkpoint was trained on these rows (--no-verify-checkpoint, --no-verify-checkpoint-rows skip them).
  bool verify_checkpoint = true;
  bool verify_checkpoint_rows = true;
  // Megatron's --distributed-timeout-minutes: a collective that waits longer stops the job.
  double distributed_timeout_minutes = 10;
  // The job's step mark, shared with its communicators (CommOptions::step_mark): moved at each step's
  // start and end, so that a collective that times out names its step. Null: none.
  std::shared_ptr<StepMark> step_mark;
  // GPU communicators: "nccl"; "mpi" (device tensors staged through host memory, for ranks that
  // share a GPU: comm/cuda/staged_comm.h); "auto": mpi when ranks share a GPU, else nccl.
  std::string comm_backend = "auto";
  bool save_hf = false;      // export a Hugging Face checkpoint at the end (out_dir/hf)
  HfExportOptions hf_export; // its form and dtype (io/hf_export.h)
  bool quiet = false;        // no per-step log lines
  std::string command = "quill train";  // what the trainer's own lines on stderr start with ("quill run" there)
  // Megatron's --tensorboard-dir: the lead rank writes each step's scalars there (train/tensorboard.h); "": none.
  std::string tensorboard_dir;
  int64_t stop_after = -1;   // stop after this many steps of this invocation (tests of resume); -1: no limit
  int64_t dump_grads_step = -1;  // write that step's gradients to out_dir/grads_step{K}.safetensors
  // At dump_grads_step, replay this routing (safetensors: "model.llm.layers.{i}.mlp.gate.topk" I32
  // [rows * T, top_k], the step's rows in order), so that gradients compare under one expert choice.
  std::string replay_routing_file;
  // Megatron's --moe-shared-expert-overlap: under expert parallelism the shared experts compute while
  // the routed rows' exchange is in flight (forward and backward); the same results bit for bit.
  bool moe_shared_expert_overlap = false;
  // Megatron's --tp-comm-overlap (sequence parallelism only): the tensor-parallel reductions and gathers
  // that an independent GEMM can hide run beside it (parallel/tensor_parallel.h); the same bits.
  bool tp_comm_overlap = false;
  // Megatron's --delay-wgrad-compute: under expert parallelism the routed experts' weight gradients run
  // beside the backward's return exchange (parallel/expert_dispatch.h); the same bits.
  bool delay_wgrad_compute = false;
  // --moe-expert-wgrad-micro-batches (1 or 2): with 2, the routed experts' weight gradients of two consecutive
  // micro-batches in one grouped GEMM per matrix (model/expert_wgrad_pairs.h); a numerics option (fp32 sums in
  // another order), one micro-batch's expert rows held per MoE layer.
  int moe_expert_wgrad_micro_batches = 1;
  // Megatron's --overlap-moe-expert-parallel-comm: the combined 1F1B step (docs/decisions/combined-1f1b.md),
  // the forward of micro-batch i+1 interleaved with the backward of i at their token exchanges; one stage
  // (--pp 1) under expert parallelism; the same bits.
  bool overlap_moe_ep_comm = false;
  // Megatron's --recompute-granularity full --recompute-method --recompute-num-layers (model/recompute.h):
  // the same results bit for bit, less activation memory, one more forward of the recomputed layers.
  RecomputeOptions recompute;
  // Megatron's --fp8-format e4m3 --fp8-recipe blockwise (docs/fp8.md): the linear layers of attention, MLP
  // and experts in FP8 E4M3 with blockwise scales; off by default.
  ops::Fp8Options fp8;
  // --attention-dq-order arrival (GPU only): the attention backward adds into dQ in arrival order, not
  // bit-reproducible (CudaBackendOptions::attention_dq_arrival_order): the noise floor of two runs' comparison.
  bool attention_dq_arrival_order = false;
  // --grouped-gemm-kernel: the routed experts' forward and input-gradient GEMMs on the GPU by cuBLASLt, by quill's
  // wgmma kernel (with FP8 the dense layers' too), or auto (by each call's shape, as measured);
  // CudaBackendOptions::grouped_gemm_kernel.
  GroupedGemmKernel grouped_gemm_kernel = GroupedGemmKernel::kAuto;
  // --grouped-wgrad-kernel: the routed experts' weight gradient on the GPU by cuBLASLt, by quill's wgmma kernel, or
  // auto (by each call's shape, as measured; the default); CudaBackendOptions::grouped_wgrad_kernel.
  GroupedGemmKernel grouped_wgrad_kernel = GroupedGemmKernel::kAuto;
  // Kernels on trial (ops/kernel_trials.h), GPU only: --grouped-wgrad-form, --attention-bias-rows,
  // --attention-forward-form and --attention-backward-form.
  GroupedWgradForm grouped_wgrad_form = GroupedWgradForm::kHalf;
  AttentionBiasRows attention_bias_rows = AttentionBiasRows::kCublasLt;
  AttentionForwardForm attention_forward_form = AttentionForwardForm::kNarrow;
  AttentionBackwardForm attention_backward_form = AttentionBackwardForm::kConsumers;
  // A warning when an expert of a MoE layer receives no token for this many steps in a row (0: never).
  int64_t moe_idle_expert_warning_steps = 10;
  // Measurement (bench/slice): steps before warmup_steps are left out of the summary's median and
  // spread (out_dir/summary.json); profile_step's ops are timed one by one (needs make_probe).
  int64_t warmup_steps = 0;
  int64_t profile_step = -1;
  // `quill train --simulate-rank R` (docs/simulate-rank.md): the layout's world rank R alone, its
  // collectives served by a loopback communicator. This process then writes the outputs (as rank 0
  // does in a real run) and its log lines say that the loss is not meaningful. -1: a real run.
  int simulate_rank = -1;
  // With simulate_rank and expert parallelism: the routing model of the token exchange, "balanced" or a
  // metrics.jsonl path (comm/loopback_routing.h); empty: not given (balanced).
  std::string simulate_routing;
  // With simulate_rank: each collective also takes the communication model's time on a queue of its own
  // (`--simulate-comm-time`, comm/standin_clock.h), so the step's wall time includes the collectives and what
  // of them runs under compute; on a GPU each stand-in holds simulate_comm_ctas blocks (`--simulate-comm-sms`).
  bool simulate_comm_time = false;
  int simulate_comm_ctas = 16;
  // Makes the run's StepProbe for a device context (null or returning null: none).
  std::function<std::unique_ptr<StepProbe>(const DeviceContext&)> make_probe;
  // The stop signal this rank received (SIGTERM, SIGINT; 0: none), asked at every step boundary: the
  // ranks agree on it, stop there together, save to save_dir and report it (TrainResult::stop_signal).
  // `quill train` gives base/stop_signal.h's; null: never asked (the same on every rank).
  std::function<int()> stop_signal;
};

}  // namespace quill
