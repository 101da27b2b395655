// `quill train`: train a model on rows, one process, CPU reference backend.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <cstdio>
#include <thread>

#include "base/error.h"
#include "base/stop_signal.h"
#include "comm/distributed.h"
#include "comm/error_report.h"
#include "cli/commands.h"
#include "cli/layout_flags.h"
#include "io/hf_export.h"
#include "model/params.h"
#include "tensor/tracking_allocator.h"
#include "train/step_report.h"
#include "train/trainer.h"
#include "cli/launch.h"
#include "cli/megatron_names.h"
#include "cli/ddp_flags.h"
#include "cli/memory_flags.h"
#include "cli/optimizer_flags.h"
#include "cli/projection_report.h"
#include "cli/fp8_flags.h"
#include "cli/recompute_flags.h"
#include "cli/stop_report.h"
#ifdef QUILL_HAVE_CUDA
#include <fmt/format.h>

#include <optional>

#include "base/file_util.h"
#include "ops/cuda/memory_stats.h"
#include "ops/cuda/profiling.h"
#endif

namespace quill::cli {

namespace {
// The CPU StepProbe: the run's tensors through a counting allocator (tensor/tracking_allocator.h), its
// peak reset at each step's start, so that metrics.jsonl and summary.json carry the peak that
// `quill plan --device cpu` predicts (peak_device_bytes, per rank in summary.json).
class CpuStepProbe final : public StepProbe {
 public:
  explicit CpuStepProbe(const DeviceContext& ctx) : counting_(*ctx.allocator), ctx_(ctx) { ctx_.allocator = &counting_; }
  DeviceContext context() const override { return ctx_; }
  void begin_step(int64_t, bool) override { counting_.reset_peak(); }
  StepMemory end_step(int64_t, bool, const std::string&) override {
    StepMemory m;
    m.gpu = false;
    m.peak_bytes = counting_.peak();
    m.in_use_bytes = counting_.in_use();
    return m;
  }
  void report(const std::string&, int, bool) override {}

 private:
  TrackingAllocator counting_;
  DeviceContext ctx_;
};

// Test-only, behind the hidden --stall-rank-at-step R,S: world rank R stops at the start of step S
// for ten times --distributed-timeout-minutes, as a hung rank would, so that a test can watch its
// peers end the job naming the group and the step they waited in (tests/cli/expert_parallel_test.cc).
class StallingProbe final : public StepProbe {
 public:
  StallingProbe(std::unique_ptr<StepProbe> inner, int rank, int64_t step, double stall_s)
      : inner_(std::move(inner)), rank_(rank), step_(step), stall_s_(stall_s) {}
  DeviceContext context() const override { return inner_->context(); }
  void begin_step(int64_t step, bool profile_ops) override {
    inner_->begin_step(step, profile_ops);
    if (step != step_ || mpi_world_rank() != rank_) return;
    std::fprintf(stderr, "quill train: --stall-rank-at-step: rank %d stalls at step %lld for %.0f s\n", rank_,
                 static_cast<long long>(step), stall_s_);
    std::this_thread::sleep_for(std::chrono::duration<double>(stall_s_));
  }
  StepMemory end_step(int64_t step, bool profile_ops, const std::string& out_dir) override {
    return inner_->end_step(step, profile_ops, out_dir);
  }
  void report(const std::string& out_dir, int rank, bool lead) override { inner_->report(out_dir, rank, lead); }

 private:
  std::unique_ptr<StepProbe> inner_;
  int rank_;
  int64_t step_;
  double stall_s_;
};
}  // namespace

#ifdef QUILL_HAVE_CUDA
namespace {
// The CUDA StepProbe: the allocator's per-step peak (memory_stats.h), a stream synchronisation at the
// end of each step (so the step's host time covers its device work) and, with --profile-step, the
// per-op event timing of ops/cuda/profiling.h (then the wrapping op table serves the whole run, and
// outside the profiled step each op pays one extra indirect call; without it the table is the backend's).
class CudaStepProbe final : public StepProbe {
 public:
  CudaStepProbe(const DeviceContext& ctx, const Ceilings& ceilings, bool time_ops) : ceilings_(ceilings) {
    if (time_ops) profiler_ = std::make_unique<OpProfiler>(ctx);
    ctx_ = profiler_ ? profiler_->context() : ctx;
  }
  DeviceContext context() const override { return ctx_; }
  void begin_step(int64_t step, bool profile_ops) override {
    cuda_reset_peak_memory(ctx_);
    if (profile_ops && profiler_) profiler_->begin(step);
  }
  // The step's passes are timed to their device end (one synchronisation per step; the optimizer's
  // first collective or kernel follows at once).
  void passes_done(int64_t) override { cuda_synchronize(ctx_); }
  StepMemory end_step(int64_t, bool profile_ops, const std::string&) override {
    if (profile_ops && profiler_) profile_ = profiler_->end();  // synchronises the stream
    cuda_synchronize(ctx_);
    CudaMemoryStats stats;
    StepMemory m;
    if (!cuda_memory_stats(ctx_, stats)) return m;
    m.peak_bytes = stats.peak_bytes;
    m.in_use_bytes = stats.in_use_bytes;
    if (stats.device_total_bytes >= 0) {
      m.device_used_bytes = stats.device_total_bytes - stats.device_free_bytes;
      m.device_total_bytes = stats.device_total_bytes;
    }
    return m;
  }
  void report(const std::string& out_dir, int rank, bool lead) override {
    if (!profile_) return;
    const std::string table = op_profile_table(*profile_, ceilings_);
    std::string base = fmt::format("{}/op_profile_step{}", out_dir, profile_->step);
    if (lead) {
      std::printf("%s", table.c_str());
      std::fflush(stdout);
      write_file_atomic(base + ".json", op_profile_json(*profile_, ceilings_));
      write_file_atomic(base + ".txt", table);
    } else {
      // Another node may not see the lead's directory: make it, and never end the run over a profile.
      base += fmt::format(".rank{}", rank);
      try {
        std::error_code ec;
        std::filesystem::create_directories(out_dir, ec);
        write_file_atomic(base + ".json", op_profile_json(*profile_, ceilings_));
        write_file_atomic(base + ".txt", table);
      } catch (const Error& e) {
        std::fprintf(stderr, "quill: rank %d: the op profile was not written: %s\n", rank, e.what());
      }
    }
    profile_.reset();
  }

 private:
  Ceilings ceilings_;
  std::unique_ptr<OpProfiler> profiler_;
  DeviceContext ctx_;
  std::optional<OpProfile> profile_;
};
}  // namespace
#endif

void add_train_command(CLI::App& app, Runner& run, const std::vector<std::string>& args) {
  CLI::App* cmd = app.add_subcommand("train", "train on a rows directory; writes OUT/metrics.jsonl and checkpoints");
  static TrainOptions o;
  static std::string freeze_preset = "miles";
  static std::string loss_vocab = "unpadded";
  static std::vector<std::string> freeze;
  static std::string device = "cpu";
  static LayoutSpec layout;
  static std::vector<double> ceilings;
  static std::string hf_format, hf_dtype = "bf16";
  static OptimizerFlagNames optimizer_names;
  // Megatron's defaults where its flags are silent (recipes-and-measurement.md §3).
  o.lr.max_lr = 1e-5;
  o.adam.weight_decay = 0.01;
  o.adam.beta2 = 0.999;
  cmd->add_option("--config", o.config_path, "config.json (or a directory holding it); default: --init's");
  cmd->add_option("--rows", o.rows_dir, "rows directory (rows.bin + manifest.json)")->required();
  cmd->add_option("--valid-rows", o.valid_rows_dir,
                  "validation rows (quill data build --valid-fraction writes them to ROWS/valid): their loss per "
                  "supervised token after every --eval-interval steps and after the last step, in metrics.jsonl "
                  "(valid_loss), the log line and TensorBoard");
  cmd->add_option("--eval-interval", o.eval_interval,
                  "with --valid-rows: evaluate after every N steps (Megatron's flag; 0 or absent: after the last step "
                  "only)");
  auto* eval_iters = cmd->add_option("--eval-iters", o.eval_iters,
                                     "with --valid-rows: global batches of validation rows per evaluation (Megatron's "
                                     "flag; default 1)");
  auto* init = cmd->add_option("--init", o.init_dir, "start from this Hugging Face checkpoint directory");
  cmd->add_option("--seed", o.seed, "random initialisation seed (when no --init)")->excludes(init);
  cmd->add_option("--steps", o.steps, "optimizer steps")->required();
  cmd->add_option("--global-batch", o.global_batch, "rows per optimizer step (one row per micro-batch)")->required();
  cmd->add_option("--lr", o.lr.max_lr, "peak learning rate");
  cmd->add_option("--min-lr", o.lr.min_lr, "final learning rate of the decay");
  cmd->add_option("--warmup-fraction", o.lr.warmup_fraction, "fraction of decay steps spent warming up");
  cmd->add_option("--lr-decay-style", o.lr.style, "cosine | linear | constant");
  cmd->add_option("--lr-decay-steps", o.lr.decay_steps, "decay steps (default: --steps)");
  cmd->add_option("--weight-decay", o.adam.weight_decay, "AdamW decoupled weight decay (not on 1-D parameters)");
  cmd->add_option("--beta1", o.adam.beta1, "Adam beta1");
  cmd->add_option("--beta2", o.adam.beta2, "Adam beta2");
  cmd->add_option("--adam-eps", o.adam.eps, "Adam epsilon");
  cmd->add_option("--clip-grad", o.adam.clip_grad, "clip gradients to this global L2 norm (0: off)");
  // Megatron's CPU offload and precision-aware optimizer flags (optim/optimizer_memory.h).
  add_optimizer_flags(cmd, o.adam.memory, optimizer_names);
  // Megatron's --overlap-grad-reduce, --overlap-param-gather and --ddp-bucket-size (optim/ddp_config.h).
  add_ddp_flags(cmd, o.adam.ddp);
  cmd->add_option("--freeze", freeze, "freeze parameters matching this glob (repeatable)");
  cmd->add_option("--freeze-preset", freeze_preset, "miles (relative-bias tables and global scales) | none");
  cmd->add_option("--loss-vocab", loss_vocab, "unpadded (transformers) | padded (miles)");
  cmd->add_option("--out", o.out_dir, "output directory (refused when it holds an earlier run, unless --resume or --overwrite)")
      ->required();
  cmd->add_flag("--overwrite", o.overwrite, "replace the earlier run's outputs in a non-empty --out");
  cmd->add_option("--save", o.save_dir,
                  "write training checkpoints (fp32 weights and Adam moments) as DIR/iter_NNNNNNN at the end, and "
                  "every --save-interval steps, each named in DIR/latest_checkpointed_iteration.txt once complete "
                  "(Megatron's layout); none without it");
  cmd->add_option("--save-interval", o.save_interval, "with --save: also a checkpoint every N steps");
  cmd->add_option("--keep-last-checkpoints", o.keep_last_checkpoints,
                  "with --save: after each save keep only the newest N iterations in DIR (the latest always; "
                  "default 0: keep all)");
  cmd->add_flag("--async-save", o.async_save,
                "with --save: copy the state to host memory at the step boundary and write it in the background "
                "while training goes on (Megatron's flag)");
  cmd->add_option("--test-async-save-delay", o.test_async_save_delay_s,
                  "tests only: the background writer sleeps S seconds first")
      ->group("");
  cmd->add_option("--load,--resume", o.resume_dir,
                  "resume from the --save DIR of an earlier run (the iteration its latest_checkpointed_iteration.txt "
                  "names), or from one checkpoint directory; refused when DIR holds none unless "
                  "--start-fresh-if-no-checkpoint");
  cmd->add_option("--ckpt-step", o.ckpt_step, "with --load: resume iteration N of DIR instead of the latest (Megatron's flag)");
  cmd->add_flag("--start-fresh-if-no-checkpoint", o.start_fresh_if_no_checkpoint,
                "with --load: when DIR holds no checkpoint yet, start a fresh run instead of refusing (the first "
                "start of a job script that always passes --load)");
  static bool exit_on_missing = false;
  cmd->add_flag("--exit-on-missing-checkpoint", exit_on_missing,
                "Megatron's flag; quill always refuses a --load without a checkpoint (unless "
                "--start-fresh-if-no-checkpoint)");
  cmd->add_option("--stop-after", o.stop_after, "stop after N steps of this invocation (with a checkpoint when --save)");
  cmd->add_flag("!--no-verify-rows", o.verify_rows, "skip checking rows.bin against the manifest's rows_sha256");
  cmd->add_flag("!--no-verify-checkpoint", o.verify_checkpoint,
                "with --resume: skip checking the checkpoint's state.json and shards against their recorded SHA-256");
  cmd->add_flag("!--no-verify-checkpoint-rows", o.verify_checkpoint_rows,
                "with --resume: continue a checkpoint trained on other rows (another rows_sha256) on these --rows");
  cmd->add_option("--comm", o.comm_backend,
                  "GPU communicators: auto | nccl | mpi (device tensors staged through host memory, for ranks "
                  "sharing a GPU; auto picks it when they do)");
  cmd->add_option("--distributed-timeout-minutes", o.distributed_timeout_minutes,
                  "a collective that waits longer than this stops every rank (Megatron's flag; default 10)");
  static std::vector<int64_t> stall;  // hidden, for tests: see StallingProbe
  cmd->add_option("--stall-rank-at-step", stall, "R,S: world rank R hangs at step S (tests of the timeout)")
      ->expected(2)
      ->delimiter(',')
      ->group("");
  cmd->add_option("--dump-grads-step", o.dump_grads_step, "write step K's gradients to OUT/grads_stepK.safetensors");
  cmd->add_flag("--moe-shared-expert-overlap", o.moe_shared_expert_overlap,
                "under expert parallelism, compute the shared experts while the routed rows are exchanged (Megatron's flag)");
  cmd->add_flag("--tp-comm-overlap", o.tp_comm_overlap,
                "with --sequence-parallel: run the tensor-parallel reduce-scatters and all-gathers that an independent "
                "GEMM can hide beside it (Megatron's flag; docs/decisions/tp-comm-overlap.md says which); the same bits");
  cmd->add_flag("--delay-wgrad-compute", o.delay_wgrad_compute,
                "under expert parallelism, compute the routed experts' weight gradients while the backward's input "
                "gradients are exchanged back (Megatron's flag; docs/decisions/delay-wgrad.md); the same bits");
  cmd->add_option("--moe-expert-wgrad-micro-batches", o.moe_expert_wgrad_micro_batches,
                  "1 or 2: with 2, the routed experts' weight gradients of two consecutive micro-batches in one grouped "
                  "GEMM per matrix (half the passes over their fp32 gradients; one micro-batch's expert rows held per "
                  "MoE layer; fp32 sums in another order: docs/decisions/expert-wgrad-pairs.md)")
      ->check(CLI::IsMember({1, 2}));
  cmd->add_flag("--overlap-moe-expert-parallel-comm", o.overlap_moe_ep_comm,
                "under expert parallelism without a pipeline (--pp 1): the combined 1F1B step, each micro-batch's "
                "forward interleaved with the previous one's backward so that each one's token exchanges run under "
                "the other's compute (Megatron's flag; docs/decisions/combined-1f1b.md); the same bits, one more "
                "micro-batch's activations");
  static RecomputeFlags recompute;
  add_recompute_flags(cmd, recompute);
  static Fp8Flags fp8;
  add_fp8_flags(cmd, fp8);
  static std::string grouped_gemm_kernel = "auto";
  cmd->add_option("--grouped-gemm-kernel", grouped_gemm_kernel,
                  "the routed experts' forward and input-gradient GEMMs on the GPU: auto (default: by each call's rows "
                  "per expert, as measured), cublaslt (one GEMM per expert) or wgmma (one launch for all experts; "
                  "with FP8 also the dense layers' forward and input-gradient GEMMs, which auto leaves to cuBLASLt); "
                  "docs/decisions/grouped-gemm-wgmma.md")
      ->check(CLI::IsMember({"auto", "cublaslt", "wgmma"}));
  static std::string dq_order = "fixed";
  cmd->add_option("--attention-dq-order", dq_order,
                  "fixed (default: the same bits every run) or arrival (GPU only, not reproducible: the noise floor "
                  "of float-sum order when two runs are compared)")
      ->check(CLI::IsMember({"fixed", "arrival"}));
  static std::string wgrad_kernel = "auto";
  cmd->add_option("--grouped-wgrad-kernel", wgrad_kernel,
                  "the routed experts' weight gradient on the GPU: auto (default: by each call's shape, as measured; "
                  "docs/decisions/grouped-wgrad.md), cublaslt (one GEMM per expert) or wgmma (one launch for all "
                  "experts)")
      ->check(CLI::IsMember({"auto", "cublaslt", "wgmma"}));
  static std::string wgrad_form = "half";
  cmd->add_option("--grouped-wgrad-form", wgrad_form,
                  "on trial (GPU only): the form of quill's weight-gradient kernel where it runs: half (default, "
                  "measured), quarter or pingpong (experiments; docs/decisions/grouped-wgrad.md)")
      ->check(CLI::IsMember({"half", "quarter", "pingpong"}));
  static std::string bias_rows = "cublaslt";
  cmd->add_option("--attention-bias-rows", bias_rows,
                  "on trial (GPU only): the attention's bias rows and their gradient by cublaslt (default, measured) "
                  "or kernels (an experiment; docs/decisions/attention-wgmma.md)")
      ->check(CLI::IsMember({"cublaslt", "kernels"}));
  static std::string forward_form = "narrow";
  cmd->add_option("--attention-forward-form", forward_form,
                  "on trial (GPU only): the Hopper attention forward's key tiles, narrow (64 keys, default, measured) "
                  "or wide (128 keys, an experiment; docs/decisions/attention-wgmma.md)")
      ->check(CLI::IsMember({"narrow", "wide"}));
  static std::string backward_form = "consumers";
  cmd->add_option("--attention-backward-form", backward_form,
                  "on trial (GPU only): who loads and adds dQ in the Hopper attention backward, consumers (default, "
                  "measured) or a producer warpgroup (an experiment; docs/decisions/attention-wgmma.md)")
      ->check(CLI::IsMember({"consumers", "producer"}));
  cmd->add_option("--moe-idle-expert-warning-steps", o.moe_idle_expert_warning_steps,
                  "warn when an expert of a MoE layer receives no token for N steps in a row (default 10; 0: never)");
  cmd->add_option("--replay-routing", o.replay_routing_file,
                  "at --dump-grads-step, use this expert choice (a reference's routing_stepK.safetensors)");
  auto* save_hf = cmd->add_flag("--save-hf", o.save_hf, "export a Hugging Face checkpoint to OUT/hf at the end");
  cmd->add_option("--hf-format", hf_format,
                  "the export's form: release (the release's names and multimodal config.json, for "
                  "InklingForConditionalGeneration) | transformers (InklingForCausalLM's names and text config); "
                  "default: --init's form, transformers from a random init")
      ->needs(save_hf);
  cmd->add_option("--save-hf-dtype", hf_dtype, "the export's dtype: bf16 (default, as released) | fp32")->needs(save_hf);
  cmd->add_flag("--quiet", o.quiet, "no per-step log lines and no progress lines (warnings, errors and the closing lines stay)");
  cmd->add_option("--tensorboard-dir", o.tensorboard_dir,
                  "write each step's loss, learning rate, grad norm, tokens/s, time, memory, MFU and expert load "
                  "as TensorBoard scalars into DIR (created when missing; Megatron's flag)");
  cmd->add_option("--device", device, "cpu (fp32 reference) | cuda (bf16; one GPU per rank)");
  // The layout (Megatron's flag names, with short forms); world = tp x cp x dp x pp ranks, launched
  // with mpirun -np WORLD or srun. What the model cannot run yet is refused before anything loads.
  add_layout_flags(cmd, layout);
  cmd->add_option("--warmup-steps", o.warmup_steps,
                  "steps left out of the closing summary's median and spread (OUT/summary.json)");
  cmd->add_option("--profile-step", o.profile_step,
                  "time every op of step K with CUDA events: table to stdout, OUT/op_profile_stepK.{json,txt} "
                  "(rank 0; other ranks OUT/op_profile_stepK.rankR.*), the NCCL collectives' own time and the part "
                  "hidden under compute included (--device cuda)");
  cmd->add_option("--profile-ceilings", ceilings,
                  "measured ceilings for the profile's % columns: GEMM_TFLOPS COPY_GBPS [FP8_GEMM_TFLOPS] (default 794 "
                  "4240, FP8 twice the GEMM figure)")
      ->expected(2, 3);
  // Checked in the callback (CLI11's range check printed the largest double as the bound).
  static CLI::Option* simulate_rank = cmd->add_option(
      "--simulate-rank", o.simulate_rank,
      "run only world rank R of the layout, in this one process (no mpirun), its collectives served by a "
      "loopback communicator: its compute time, peak memory and collective bytes (OUT/collectives.json); "
      "the loss is not meaningful (docs/simulate-rank.md)");
  cmd->add_flag("--simulate-comm-time", o.simulate_comm_time,
                "with --simulate-rank: every collective also takes the communication model's time (the projection's "
                "model and flags: its bytes over the modelled bus bandwidth plus latency) on a queue of its own, the "
                "GPU's holding --simulate-comm-sms blocks: the step time includes the collectives and their overlap "
                "with compute (docs/simulate-rank.md)");
  static CLI::Option* simulate_comm_sms = cmd->add_option("--simulate-comm-sms", o.simulate_comm_ctas,
                  "with --simulate-comm-time on a GPU: the blocks (one per SM) each timed stand-in holds, as NCCL's "
                  "kernel holds one per channel (default 16)");
  cmd->add_option("--simulate-routing", o.simulate_routing,
                  "with --simulate-rank and expert parallelism: what the peers route to this rank's experts, balanced "
                  "(default) or the per-expert counts of a run's metrics.jsonl (docs/simulate-rank.md)");
  static std::string device_memory;
  add_device_memory_flag(cmd, device_memory);
  // With --simulate-rank: the layout's projected step from this rank's run (docs/comm-model.md).
  static ProjectionFlags projection;
  add_projection_flags(cmd, projection, /*workload=*/false);
  // Megatron's names for these flags, read through quill run's flag table; registered last, so that a
  // name quill train has itself stays its own.
  static MegatronNames megatron;
  megatron.add_to(cmd);
  cmd->callback([&run, &args, eval_iters] {
    run = [&args, eval_iters] {
      // Every rank reads the same flags: their notes are printed by the launcher's rank 0 alone (MPI starts later).
      const bool first_rank = launcher_rank() == 0;
      const auto note = [first_rank](const std::string& line) {
        if (first_rank) std::fprintf(stderr, "note: %s\n", line.c_str());
      };
      const MegatronNames::Resolved megatron_flags = megatron.resolve(device);
      for (const std::string& line : megatron_flags.notes) note(line);
      if (first_rank && !megatron_flags.not_honoured.empty())
        std::fprintf(stderr, "warning: %s\n", megatron_flags.not_honoured.c_str());
      // (--eval-interval without --valid-rows is refused in check_train_options, for every caller.)
      QUILL_CHECK(eval_iters->count() == 0 || !o.valid_rows_dir.empty(),
                  "--eval-iters {} needs --valid-rows DIR (the held-out rows to evaluate on: quill data build "
                  "--valid-fraction writes them)", o.eval_iters);
      o.freeze_patterns = freeze;
      if (freeze_preset == "miles") {
        for (const std::string& p : miles_frozen_patterns()) o.freeze_patterns.push_back(p);
      } else {
        QUILL_CHECK(freeze_preset == "none", "--freeze-preset: unknown preset '{}' (miles or none)", freeze_preset);
      }
      QUILL_CHECK(loss_vocab == "unpadded" || loss_vocab == "padded", "--loss-vocab: '{}' is not unpadded or padded",
                  loss_vocab);
      o.loss_over_padded_vocab = loss_vocab == "padded";
      if (!hf_format.empty()) o.hf_export.format = parse_hf_format(hf_format, "--hf-format");
      o.hf_export.dtype = parse_hf_export_dtype(hf_dtype, "--save-hf-dtype");
      QUILL_CHECK(o.profile_step < 0 || device == "cuda", "--profile-step needs --device cuda");
      QUILL_CHECK(simulate_rank->count() == 0 || o.simulate_rank >= 0,
                  "--simulate-rank must be 0 or more (a world rank of the layout), got {}", o.simulate_rank);
      QUILL_CHECK(simulate_comm_sms->count() == 0 || o.simulate_comm_time,
                  "--simulate-comm-sms {}: only with --simulate-comm-time (the stand-ins' blocks)", o.simulate_comm_ctas);
      for (double c : ceilings) QUILL_CHECK(c > 0, "--profile-ceilings must be positive, got {}", c);
      for (const std::string& line : finish_optimizer_flags(o.adam.memory, optimizer_names)) note(line);
      QUILL_CHECK(!exit_on_missing || !o.start_fresh_if_no_checkpoint,
                  "--exit-on-missing-checkpoint and --start-fresh-if-no-checkpoint ask for opposite things: give one");
      o.recompute = recompute.resolve();
      o.fp8 = fp8.resolve();
      o.attention_dq_arrival_order = dq_order == "arrival";
      parse_grouped_gemm_kernel(grouped_gemm_kernel, o.grouped_gemm_kernel);  // (checked by IsMember above)
      parse_grouped_gemm_kernel(wgrad_kernel, o.grouped_wgrad_kernel);  // (checked by IsMember above)
      parse_kernel_trial(wgrad_form, o.grouped_wgrad_form);             // (likewise)
      parse_kernel_trial(bias_rows, o.attention_bias_rows);
      parse_kernel_trial(forward_form, o.attention_forward_form);
      parse_kernel_trial(backward_form, o.attention_backward_form);
      QUILL_CHECK(o.moe_idle_expert_warning_steps >= 0, "--moe-idle-expert-warning-steps {}: give 0 (never warn) or a number "
                  "of steps", o.moe_idle_expert_warning_steps);
      // A recorded routing hands out the peers' counts call by call; the recompute's exchanges would take
      // the next layer's.
      QUILL_CHECK(!o.recompute.active() || o.simulate_routing.empty() || o.simulate_routing == "balanced",
                  "--simulate-routing {} with --recompute-granularity full: a recorded routing follows the forward's "
                  "count exchanges in order, and the recompute adds its own; use --simulate-routing balanced",
                  o.simulate_routing);
      if (o.delay_wgrad_compute && layout.ep == 1)
        note("--delay-wgrad-compute has no effect without expert parallelism (--ep 1): there is no token exchange to "
             "overlap");
      if (o.overlap_moe_ep_comm && layout.ep == 1)
        note("--overlap-moe-expert-parallel-comm has no effect without expert parallelism (--ep 1): there is no "
             "token exchange to overlap");
      if (o.moe_expert_wgrad_micro_batches == 2 && o.global_batch / std::max(1, layout.dp) < 2)
        note(fmt::format("--moe-expert-wgrad-micro-batches 2 has no effect with one micro-batch per step on each "
                         "pipeline (--global-batch {} over {} data-parallel ranks): there is no second micro-batch to "
                         "pair with", o.global_batch, layout.dp));
      if (o.moe_shared_expert_overlap && layout.ep == 1)
        note("--moe-shared-expert-overlap has no effect without expert parallelism (--ep 1): there is no token "
             "exchange to overlap");
      MemoryCheck memory_check;
      memory_check.device_memory = parse_device_memory(device_memory);
      if (device == "cpu")
        o.make_probe = [](const DeviceContext& ctx) -> std::unique_ptr<StepProbe> {
          return std::make_unique<CpuStepProbe>(ctx);
        };
#ifdef QUILL_HAVE_CUDA
      if (device == "cuda") {
        Ceilings c;
        if (ceilings.size() >= 2) {
          c.matmul_tflops = ceilings[0], c.copy_gbps = ceilings[1];
          c.fp8_matmul_tflops = ceilings.size() == 3 ? ceilings[2] : 2 * ceilings[0];
        }
        const bool time_ops = o.profile_step >= 0;
        o.make_probe = [c, time_ops](const DeviceContext& ctx) -> std::unique_ptr<StepProbe> {
          return std::make_unique<CudaStepProbe>(ctx, c, time_ops);
        };
      }
#endif
      if (!stall.empty()) {
        QUILL_CHECK(o.make_probe != nullptr, "--stall-rank-at-step: no step probe on --device {}", device);
        auto inner = o.make_probe;
        const int rank = static_cast<int>(stall[0]);
        const int64_t step = stall[1];
        const double stall_s = 10 * 60 * o.distributed_timeout_minutes;
        o.make_probe = [inner, rank, step, stall_s](const DeviceContext& ctx) -> std::unique_ptr<StepProbe> {
          return std::make_unique<StallingProbe>(inner(ctx), rank, step, stall_s);
        };
      }
      // SIGTERM and SIGINT stop every rank at the next step boundary, with a checkpoint when --save is given.
      const StopSignals stop_signals;
      o.stop_signal = [] { return StopSignals::received(); };
      TrainResult r = train_with_layout(o, device, layout, memory_check, /*count_collectives=*/true, comm_params(projection));
      if (const std::optional<int> status = finish_if_stopped(r, o, args)) return *status;
      if (!r.lead) return 0;  // the run's closing lines are the lead rank's
      if (!r.steps.empty())
        std::printf("trained %zu steps in %.1f s: loss %.4f -> %.4f%s; metrics in %s/metrics.jsonl\n", r.steps.size(),
                    r.wall_time_s, r.steps.front().loss, r.steps.back().loss,
                    r.simulated_rank >= 0 ? " (simulated rank: not meaningful)" : "", o.out_dir.c_str());
      if (!r.steps.empty()) std::printf("%s; %s/summary.json\n", summary_line(r).c_str(), o.out_dir.c_str());
      if (!r.steps.empty() && r.steps.back().valid_loss)
        std::printf("validation loss after step %lld: %.4f over %lld supervised tokens of %s\n",
                    static_cast<long long>(r.steps.back().step), *r.steps.back().valid_loss,
                    static_cast<long long>(r.steps.back().valid_supervised), o.valid_rows_dir.c_str());
      if (!r.steps.empty() && r.simulated_rank >= 0) {
        // Every stage not simulated takes this one's figures (noted); quill project combines several runs.
        const ProjectionReport rep = project_runs({o.out_dir}, projection);
        write_projection(o.out_dir, rep);
        std::printf("%sprojection in %s/projection.json\n", rep.text.c_str(), o.out_dir.c_str());
      }
      return 0;
    };
  });
}

}  // namespace quill::cli
