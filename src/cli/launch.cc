// Starting a training job on a device and a data-parallel layout: the one place that knows about
// launchers (mpirun/srun), GPUs and communicators, shared by `quill train` and `quill run`.
#include "cli/launch.h"

#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/host_memory.h"
#include "cli/collective_probe.h"
#include "cli/collectives_file.h"
#include "cli/simulated_routing.h"
#include "comm/counting_comm.h"
#include "comm/distributed.h"
#include "comm/loopback_comm.h"
#include "comm/mpi_comm.h"
#include "comm/standin_clock.h"
#include "comm/timed_comm.h"
#include "data/rows.h"
#include "model/inkling_model.h"
#include "model/params.h"
#include "parallel/layout.h"
#include "plan/memory_plan.h"
#include "plan/plan_report.h"
#include "plan/standin_timing.h"
#ifdef QUILL_HAVE_CUDA
#include "comm/cuda/loopback_cuda_mover.h"
#include "comm/cuda/staged_comm.h"
#include "comm/cuda/standin_clock_cuda.h"
#include "comm/nccl/nccl_comm.h"
#include "ops/cuda/cuda_context.h"
#include "ops/cuda/cuda_resources.h"
#include "ops/cuda/memory_stats.h"
#endif

namespace quill::cli {

namespace {

#ifdef QUILL_HAVE_CUDA
// QUILL_POISON_DEVICE_MEMORY=B (0-255, decimal or 0x hex): every device allocation filled with byte B
// (CudaBackendOptions::poison_byte). Two runs with different bytes that give the same bits read no
// memory that nothing wrote (docs/determinism.md).
CudaBackendOptions cuda_backend_options(const TrainOptions& o) {
  CudaBackendOptions options;
  options.attention_dq_arrival_order = o.attention_dq_arrival_order;
  options.grouped_gemm_kernel = o.grouped_gemm_kernel;
  options.grouped_wgrad_kernel = o.grouped_wgrad_kernel;
  options.grouped_wgrad_form = o.grouped_wgrad_form;
  options.attention_bias_rows = o.attention_bias_rows;
  options.attention_forward_form = o.attention_forward_form;
  options.attention_backward_form = o.attention_backward_form;
  const char* v = std::getenv("QUILL_POISON_DEVICE_MEMORY");
  if (v == nullptr || *v == '\0') return options;
  char* end = nullptr;
  const long byte = std::strtol(v, &end, 0);
  QUILL_CHECK(*end == '\0' && byte >= 0 && byte <= 255, "QUILL_POISON_DEVICE_MEMORY={}: not a byte (0-255, e.g. 0xff)", v);
  options.poison_byte = static_cast<int>(byte);
  return options;
}
#endif

// The memory plan of the run against `device_memory` bytes per device: refused when it cannot fit
// (every rank plans alike, so every rank stops with the same message); a note on the lead when it fits.
// `node_ranks`: the world ranks that run on this process's node (a GPU run also checks that they fit
// the node's host memory at startup: their pinned optimizer state and their weights' host copy).
void check_memory_plan(const TrainOptions& o, const InklingConfig& config, const LayoutSpec& spec,
                       const std::string& device, int64_t device_memory, bool lead, const std::vector<int>& node_ranks) {
  const bool host_check = device == "cuda";
  if (device_memory <= 0 && !host_check) return;
  const plan::MemoryPlan mp =
      plan::plan_memory(plan_request_for(o, config, spec, device, RowsReader::open(o.rows_dir).row_tokens()));
  if (host_check) {
    const plan::FitVerdict host = plan::check_host_fit(mp, node_ranks, static_cast<int64_t>(host_memory_bytes()));
    QUILL_CHECK(host.fits, "{} (quill plan prints the host bytes per node)", host.message);
  }
  if (device_memory <= 0) return;
  const plan::FitVerdict verdict = plan::check_fit(mp, device_memory);
  QUILL_CHECK(verdict.fits, "{} (quill plan prints the whole table)", verdict.message);
  if (lead) {
    const plan::StagePlan& s = mp.largest();
    std::fprintf(stderr, "note: memory plan: stage %d needs %s of %s per device (allocator peak %s)\n", s.stage,
                 plan::format_bytes(s.device_total()).c_str(), plan::format_bytes(device_memory).c_str(),
                 plan::format_bytes(s.allocator_peak()).c_str());
  }
}

// --simulate-rank R: what one rank's share of the layout can run. Throws naming the flag.
void check_simulation(const TrainOptions& o, const LayoutSpec& spec) {
  QUILL_CHECK(o.simulate_rank < spec.world(), "--simulate-rank {}: the layout ({}) has {} ranks (0..{})", o.simulate_rank,
              spec.describe(), spec.world(), spec.world() - 1);
  const char* refused = !o.save_dir.empty()      ? "--save"
                        : !o.resume_dir.empty()  ? "--load"
                        : o.save_hf              ? "--save-hf"
                        : o.dump_grads_step >= 0 ? "--dump-grads-step"
                                                 : nullptr;
  QUILL_CHECK(refused == nullptr,
              "--simulate-rank with {}: a simulated rank's weights are one share of a run whose other ranks never ran "
              "(its loss is not meaningful); nothing of it can be saved or resumed", refused ? refused : "");
}

// With a ledger: the run's probe (or none) wrapped so that the ledger knows each collective's step, and a
// simulated rank's loopback time per step and phase (`loopback`: its mover, else null). The probe maker holds the
// mover weakly: `o` outlives the device backend, and a CUDA mover must be destroyed before its stream is (the
// probe, made and destroyed inside the run, holds it meanwhile).
void count_steps(TrainOptions& o, const std::shared_ptr<CollectiveLedger>& ledger,
                 const std::shared_ptr<LoopbackMover>& loopback) {
  if (!ledger) return;
  auto inner = o.make_probe;
  const std::weak_ptr<LoopbackMover> mover = loopback;
  o.make_probe = [inner, ledger, mover](const DeviceContext& ctx) -> std::unique_ptr<StepProbe> {
    return std::make_unique<CollectiveStepProbe>(inner ? inner(ctx) : nullptr, ctx, ledger, mover.lock());
  };
}

// The communicator the layout splits: `world` (a loopback one when simulating, or one this run made),
// else the launcher's, counted into the ledger when there is one.
std::unique_ptr<Comm> counted_world(std::unique_ptr<Comm> world, Comm* launcher, const std::shared_ptr<CollectiveLedger>& ledger) {
  if (!ledger) return world;
  if (world) return std::make_unique<CountingComm>(std::move(world), ledger);
  return launcher ? std::make_unique<CountingComm>(*launcher, ledger) : nullptr;
}

// A simulated rank's world whose collectives take the model's time on `clock` (comm/timed_comm.h).
std::unique_ptr<Comm> timed_world(std::unique_ptr<Comm> loopback, int world_rank, const plan::CommModelParams& model,
                                  std::shared_ptr<StandInClock> clock) {
  std::vector<int> everyone(static_cast<size_t>(loopback->size()));
  std::iota(everyone.begin(), everyone.end(), 0);
  return std::make_unique<TimedComm>(std::move(loopback), std::move(everyone), world_rank, plan::comm_model_timing(model),
                                     std::move(clock));
}

}  // namespace

// Runs the training of `o` on `device` under `spec`: one process per rank, started by mpirun/srun;
// a one-rank layout without a launcher is the plain single-process run. The layout is validated
// against the world and the model (its config only) before anything else is loaded.
TrainResult train_with_layout(const TrainOptions& options, const std::string& device, const LayoutSpec& flags,
                              const MemoryCheck& check, bool count_collectives, const plan::CommModelParams& standin_model) {
  TrainOptions o = options;
  QUILL_CHECK(device == "cpu" || device == "cuda", "--device: '{}' is not cpu or cuda", device);
  // Contradictory choices first, on any device: a form of quill's kernel that the run would record and never run.
  QUILL_CHECK(o.grouped_wgrad_form == GroupedWgradForm::kHalf || o.grouped_wgrad_kernel != GroupedGemmKernel::kCublasLt,
              "--grouped-wgrad-form {} chooses the form of quill's weight-gradient kernel, which --grouped-wgrad-kernel "
              "cublaslt never runs: give --grouped-wgrad-kernel wgmma or auto, or leave the form at half",
              kernel_trial_name(o.grouped_wgrad_form));
  QUILL_CHECK(o.grouped_gemm_kernel == GroupedGemmKernel::kAuto || device == "cuda",
              "--grouped-gemm-kernel {}: a GPU kernel choice; the CPU backend has one grouped GEMM (give --device cuda)",
              grouped_gemm_kernel_name(o.grouped_gemm_kernel));
  QUILL_CHECK(!o.attention_dq_arrival_order || device == "cuda",
              "--attention-dq-order arrival: the CPU backend's sums have one order; this choice is for --device cuda");
  QUILL_CHECK(o.grouped_wgrad_kernel == GroupedGemmKernel::kAuto || device == "cuda",
              "--grouped-wgrad-kernel {}: a GPU kernel choice; the CPU backend has one weight gradient (give --device cuda)",
              grouped_gemm_kernel_name(o.grouped_wgrad_kernel));
  QUILL_CHECK(o.grouped_wgrad_form == GroupedWgradForm::kHalf || device == "cuda",
              "--grouped-wgrad-form {}: a GPU kernel on trial; the CPU backend has one weight gradient (give --device cuda)",
              kernel_trial_name(o.grouped_wgrad_form));
  QUILL_CHECK(o.attention_bias_rows == AttentionBiasRows::kCublasLt || device == "cuda",
              "--attention-bias-rows {}: a GPU kernel on trial; the CPU backend has one attention (give --device cuda)",
              kernel_trial_name(o.attention_bias_rows));
  QUILL_CHECK(o.attention_forward_form == AttentionForwardForm::kNarrow || device == "cuda",
              "--attention-forward-form {}: a GPU kernel on trial; the CPU backend has one attention (give --device cuda)",
              kernel_trial_name(o.attention_forward_form));
  QUILL_CHECK(o.attention_backward_form == AttentionBackwardForm::kConsumers || device == "cuda",
              "--attention-backward-form {}: a GPU kernel on trial; the CPU backend has one attention (give --device cuda)",
              kernel_trial_name(o.attention_backward_form));
  QUILL_CHECK(o.comm_backend == "auto" || o.comm_backend == "nccl" || o.comm_backend == "mpi",
              "--comm: '{}' is not auto, nccl or mpi", o.comm_backend);
  LayoutSpec spec = flags;
  const std::vector<std::string> notes = check_layout_flags(spec);
  plan::check_tp_comm_overlap(spec, o.tp_comm_overlap);
  plan::check_overlap_moe_ep_comm(spec, o.overlap_moe_ep_comm);
  const bool simulate = o.simulate_rank >= 0;
  if (simulate) check_simulation(o, spec);
  QUILL_CHECK(!o.simulate_comm_time || simulate,
              "--simulate-comm-time: only with --simulate-rank (a real run's collectives take their own time)");
  QUILL_CHECK(o.simulate_comm_ctas >= 1 && o.simulate_comm_ctas <= 132, "--simulate-comm-sms {}: must be 1..132",
              o.simulate_comm_ctas);
  QUILL_CHECK(o.simulate_routing.empty() || simulate,
              "--simulate-routing {}: only with --simulate-rank (a real run routes its own tokens)", o.simulate_routing);
  QUILL_CHECK(o.distributed_timeout_minutes > 0, "--distributed-timeout-minutes {}: must be positive",
              o.distributed_timeout_minutes);
  InklingModel::check_layout(spec);
  const InklingConfig config = resolve_config(o);
  check_model_split(config, spec);
  const int64_t num_layers = config.num_layers;
  // The simulated token exchange's routing (expert parallelism only), checked before anything loads.
  std::shared_ptr<LoopbackRouting> routing;
  if (simulate && spec.ep > 1)
    routing = simulated_routing(o.simulate_routing.empty() ? "balanced" : o.simulate_routing, config, spec,
                                o.simulate_rank, o.global_batch, RowsReader::open(o.rows_dir).row_tokens());
  // Megatron's --distributed-timeout-minutes bounds every collective (comm/comm.h: the watchdog).
  // Every communicator of the run (each group is split from the world and inherits its options)
  // names the step a timed-out collective hung in: the trainer moves the mark they share.
  CommOptions comm_options;
  comm_options.timeout_s = o.distributed_timeout_minutes * 60;
  o.step_mark = std::make_shared<StepMark>();
  comm_options.step_mark = o.step_mark;
  std::unique_ptr<Distributed> dist;
  if (simulate) {
    // One plain process (srun may still start it as a task of one).
    if (launched_by_mpi()) dist = init_distributed(nullptr, nullptr, comm_options);
    QUILL_CHECK(!dist || dist->size() == 1,
                "--simulate-rank runs the layout's rank {} alone in one process, but the launcher started {} (run it "
                "without mpirun, or with one task)", o.simulate_rank, dist ? dist->size() : 1);
  } else if (spec.world() > 1 || launched_by_mpi()) {
    dist = init_distributed(nullptr, nullptr, comm_options);
    QUILL_CHECK(dist->size() == spec.world(), "the layout ({}) needs {} ranks but the launcher started {} (mpirun -np {})",
                spec.describe(), spec.world(), dist->size(), spec.world());
  }
  const bool lead = simulate || !dist || dist->rank() == 0;
  if (lead)
    for (const std::string& n : notes) std::fprintf(stderr, "note: %s\n", n.c_str());
  if (simulate)
    std::fprintf(stderr,
                 "note: --simulate-rank %d: world rank %d of the layout's %d (%s) alone in this process, every "
                 "collective served by a loopback communicator; compute, memory and collective bytes are the rank's, "
                 "the loss is not meaningful (docs/simulate-rank.md)\n",
                 o.simulate_rank, o.simulate_rank, spec.world(), spec.describe().c_str());
  // The ledger of OUT/collectives.json: every parallel run's collectives, and a simulated rank's.
  std::shared_ptr<CollectiveLedger> ledger;
  if (count_collectives && (simulate || spec.world() > 1)) ledger = std::make_shared<CollectiveLedger>();
  Comm* launcher_world = dist && !simulate ? &dist->world() : nullptr;
  const int world_rank = simulate ? o.simulate_rank : dist ? dist->rank() : 0;
  // `clock`: the timed stand-ins' clock, when it records what of each group's time ran beside compute.
  auto write_ledger = [&](const TrainResult& r, const StandInClock* clock) {
    if (!ledger || r.steps.empty()) return;
    CollectivesRun run{spec, o.simulate_rank, o.global_batch, RowsReader::open(o.rows_dir).row_tokens(),
                       device_description(device), std::nullopt, {}, {}};
    if (o.simulate_comm_time) run.standin_comm = standin_model;
    if (clock) run.standin_overlap = plan::standin_overlap_by_group(clock->record());
    write_collectives_file(o.out_dir, *ledger, launcher_world, world_rank, run);
  };
  // The ranks on this node: the launcher places consecutive world ranks on a node (mpirun by slot, srun
  // block distribution); a simulated rank is alone.
  std::vector<int> node_ranks;
  if (simulate || !dist) {
    node_ranks.push_back(world_rank);
  } else {
    for (int i = 0; i < dist->local_size(); ++i) node_ranks.push_back(dist->rank() - dist->local_rank() + i);
  }
  if (device == "cpu") {
    check_memory_plan(o, config, spec, device, check.device_memory, lead, node_ranks);
    std::unique_ptr<Comm> loopback;
    std::shared_ptr<LoopbackMover> mover;
    std::shared_ptr<StandInClock> host_clock;
    if (simulate) {
      mover = make_host_loopback_mover();
      auto lb = std::make_unique<LoopbackComm>(spec.world(), o.simulate_rank, "world", mover);
      lb->set_routing(routing);
      loopback = std::move(lb);
      if (o.simulate_comm_time) {
        host_clock = make_host_standin_clock();
        loopback = timed_world(std::move(loopback), o.simulate_rank, standin_model, host_clock);
      }
    }
    count_steps(o, ledger, mover);
    const std::unique_ptr<Comm> world = counted_world(std::move(loopback), launcher_world, ledger);
    TrainResult r;
    {
      const Layout layout = Layout::create(spec, num_layers, world ? world.get() : launcher_world);
      r = run_training(o, DeviceContext::cpu(), layout);
    }
    write_ledger(r, host_clock.get());
    return r;
  }
#ifdef QUILL_HAVE_CUDA
  QUILL_CHECK(cuda_device_available(), "--device cuda: no GPU is visible to this process");
  const int gpu = dist ? select_cuda_device(dist->local_rank(), dist->local_size(), o.comm_backend != "nccl") : 0;
  CudaBackend backend(gpu, cuda_backend_options(o));
  const DeviceContext ctx = backend.context();
  int64_t device_memory = check.device_memory;
  if (device_memory <= 0) {
    CudaMemoryStats stats;
    if (cuda_memory_stats(ctx, stats)) device_memory = stats.device_total_bytes;
  }
  check_memory_plan(o, config, spec, device, device_memory, lead, node_ranks);
  std::unique_ptr<Comm> world_gpu;
  std::shared_ptr<LoopbackMover> mover;
  if (simulate) {
    mover = make_cuda_loopback_mover(stream_of(ctx));
    auto lb = std::make_unique<LoopbackComm>(spec.world(), o.simulate_rank, "world", mover);
    lb->set_routing(routing);
    world_gpu = std::move(lb);
    if (o.simulate_comm_time)
      world_gpu = timed_world(std::move(world_gpu), o.simulate_rank, standin_model,
                              make_cuda_standin_clock(stream_of(ctx), comm_stream_of(ctx), ctx.cuda->comm_timeline.get(),
                                                      StandInShape{o.simulate_comm_ctas, 512}));
  } else if (dist) {
    // NCCL runs one rank per GPU; ranks that share one exchange device tensors through host memory.
    const bool shared = ranks_share_a_gpu(dist->world());
    QUILL_CHECK(!(shared && o.comm_backend == "nccl"),
                "--comm nccl: ranks share a GPU (NCCL needs one GPU per rank); use --comm mpi or auto");
    if (o.comm_backend == "mpi" || shared) {
      std::vector<int> everyone(static_cast<size_t>(dist->size()));
      std::iota(everyone.begin(), everyone.end(), 0);
      world_gpu = std::make_unique<StagedComm>(dist->world().split(everyone, "world"), stream_of(ctx));
    } else {
      auto nccl = NcclComm::create(dist->world(), stream_of(ctx), comm_options, "world", comm_stream_of(ctx));
      nccl->set_timeline(ctx.cuda->comm_timeline);  // the profiler's view of the collectives (--profile-step)
      world_gpu = std::move(nccl);
    }
  }
  count_steps(o, ledger, mover);
  world_gpu = counted_world(std::move(world_gpu), nullptr, ledger);
  TrainResult r;
  {
    const Layout layout = Layout::create(spec, num_layers, world_gpu.get());
    r = run_training(o, ctx, layout);
  }
  write_ledger(r, nullptr);
  return r;
#else
  QUILL_FAIL("--device cuda: this quill was built without the CUDA backend");
#endif
}

std::string default_device() {
#ifdef QUILL_HAVE_CUDA
  if (cuda_device_available()) return "cuda";
#endif
  return "cpu";
}

std::string device_description(const std::string& device) {
#ifdef QUILL_HAVE_CUDA
  if (device == "cuda" && cuda_device_available()) return cuda_device_name(0);
#endif
  return device == "cuda" ? "CUDA (no GPU visible)" : "CPU (fp32 reference backend)";
}

}  // namespace quill::cli
