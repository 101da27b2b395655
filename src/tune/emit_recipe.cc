#include "tune/emit_recipe.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>

#include "base/error.h"
#include "optim/optimizer_memory.h"

namespace quill::tune {

namespace {

// The run block's checkpoint interval: the seed's 20-step workload saves halfway and at the end; a
// SIGTERM saves wherever it stops, so the interval bounds only what a hard failure loses.
constexpr int64_t kSaveInterval = 10;

std::string label_of(const LayoutSpec& s) {
  std::string l = fmt::format("TP{}", s.tp);
  if (s.sequence_parallel && s.tp > 1) l += " SP";
  l += fmt::format(" PP{}", s.pp);
  if (!s.pp_layers.empty()) {
    std::string split;
    for (int64_t n : s.pp_layers) split += (split.empty() ? "" : "/") + std::to_string(n);
    l += " " + split;
  }
  return l + fmt::format(" EP{} DP{}", s.ep, s.dp);
}

// The summary's words for the candidate's recompute.
std::string recompute_prose(const RecomputeOptions& r) {
  if (r.selective())
    return fmt::format("selective recompute of {}", r.moe_act && r.layernorm ? "the experts' activations and the norms"
                                                    : r.moe_act                ? "the experts' activations"
                                                                               : "the norms");
  if (!r.active()) return "no recompute";
  if (r.method == RecomputeOptions::Method::Block)
    return fmt::format("full recompute of the first {} layer{} of each stage (block)", r.num_layers,
                       r.num_layers == 1 ? "" : "s");
  return fmt::format("full recompute of every layer in groups of {} (uniform)", r.num_layers);
}

}  // namespace

Launcher parse_launcher(const std::string& flag, const std::string& name) {
  if (name == "srun") return Launcher::Slurm;
  if (name == "mpirun") return Launcher::Mpirun;
  throw Error(fmt::format("{} {}: not a launcher; give srun (Slurm, the default) or mpirun", flag, name));
}

LaunchLines launch_lines(Launcher launcher, int world, int gpus_per_node) {
  QUILL_CHECK(world > 0 && gpus_per_node > 0, "launch_lines: world {} and gpus_per_node {} must be positive", world,
              gpus_per_node);
  const int per_node = std::min(world, gpus_per_node);
  const int nodes = (world + per_node - 1) / per_node;
  if (launcher == Launcher::Mpirun)
    return {"", fmt::format("mpirun -np {} --map-by ppr:{}:node -x NCCL_NVLS_ENABLE -- \\\n", world, per_node)};
  // Slurm: SIGTERM reaches every rank 300 s before the time limit (quill stops at the next step boundary
  // together and saves; docs/multi-node.md), a requeued job starts the same script, which continues from
  // the latest checkpoint, and its output is appended to the first start's log instead of replacing it.
  return {fmt::format("#SBATCH --job-name=quill --nodes={} --ntasks-per-node={} --gpus-per-node={} --exclusive\n"
                      "#SBATCH --signal=TERM@300 --requeue --open-mode=append\n",
                      nodes, per_node, per_node),
          "srun --mpi=pmix --kill-on-bad-exit=1 -- \\\n"};
}

Recipe tuned_recipe(const RankedLayout& chosen, const EmitRequest& q) {
  const LayoutSpec& s = chosen.candidate.layout;
  const OptimizerMemory& opt = chosen.candidate.optimizer;
  const RecomputeOptions& recompute = chosen.candidate.recompute;
  Recipe r;
  r.schema_version = 1;
  r.model = q.model;
  r.gpu.type = q.gpu;
  r.gpu.memory_gb = q.gpu_memory_gb;
  r.gpu.count = s.world();
  r.gpu.per_node = q.gpus_per_node;
  r.author = Author{std::string("quill tune"), std::nullopt};
  r.status = "proposed";
  r.workload.row_tokens = q.row_tokens;
  r.workload.rows = "SFT conversations";
  r.workload.global_batch = q.global_batch;
  r.workload.precision = "bf16";
  RecipeLayout& l = r.layout;
  l.label = label_of(s);
  l.tp = s.tp, l.pp = s.pp, l.vpp = 1, l.cp = 1, l.ep = s.ep, l.etp = 1, l.dp = s.dp;
  l.sequence_parallel = s.sequence_parallel && s.tp > 1;
  if (!s.pp_layers.empty()) l.layer_split = LayerSplit{s.pp_layers.front(), s.pp_layers.back()};
  l.rows_per_microbatch = 1;
  if (opt.effective_fraction() > 0) l.offload = Offload{opt.offload_fraction, opt.overlap_d2h_h2d};
  if (recompute.active()) l.recompute = Recompute{"full", recompute_method_name(recompute), recompute.num_layers};
  if (recompute.selective()) l.recompute = Recompute{"selective", std::nullopt, std::nullopt};  // modules: the flags
  l.dispatcher = "alltoall";
  const bool bf16_moments = opt.exp_avg == DType::BF16 || opt.exp_avg_sq == DType::BF16;
  l.summary = fmt::format(
      "TP {}{}, PP {} ({}), CP 1, EP {}, ETP 1, DP {}; one {}-token row per microbatch; {}; {}; {}distributed "
      "optimizer; alltoall dispatcher. Chosen by quill tune: projected {:.1f} tokens/s/GPU ({})",
      s.tp, l.sequence_parallel ? " with sequence parallel" : "", s.pp, chosen.candidate.split, s.ep, s.dp, q.row_tokens,
      recompute_prose(recompute),
      opt.effective_fraction() > 0 ? fmt::format("CPU optimizer offload of {:.0f}% with overlapped copies",
                                                 100 * opt.offload_fraction)
                                   : "the optimizer on the GPU",
      bf16_moments ? "bf16 Adam moments; " : "", chosen.tokens_per_s_per_gpu,
      chosen.measured() ? "compute measured by quill tune --measure, communication modelled" : "modelled, not measured");
  r.env = {{"NCCL_NVLS_ENABLE", "0"}};
  std::string flags = fmt::format("--tensor-model-parallel-size {}{} \\\n    --pipeline-model-parallel-size {}", s.tp,
                                  l.sequence_parallel ? " --sequence-parallel" : "", s.pp);
  if (l.layer_split)
    flags += fmt::format(" --decoder-first-pipeline-num-layers {} --decoder-last-pipeline-num-layers {}",
                         *l.layer_split->first, *l.layer_split->last);
  flags += fmt::format(" \\\n    --expert-model-parallel-size {} --expert-tensor-parallel-size 1 --use-distributed-optimizer", s.ep);
  if (recompute.active() || recompute.selective())
    flags += fmt::format(" \\\n    {}", fmt::join(recompute_flags(recompute), " "));
  if (l.offload)
    flags += fmt::format(" \\\n    --optimizer-cpu-offload --optimizer-offload-fraction {}{}", opt.offload_fraction,
                         opt.overlap_d2h_h2d ? " --overlap-cpu-optimizer-d2h-h2d" : "");
  if (bf16_moments)
    flags += fmt::format(" \\\n    --use-precision-aware-optimizer --exp-avg-dtype {} --exp-avg-sq-dtype {}",
                         optimizer_dtype_name(opt.exp_avg), optimizer_dtype_name(opt.exp_avg_sq));
  const LaunchLines launch = launch_lines(q.launcher, static_cast<int>(s.world()), q.gpus_per_node);
  r.run = fmt::format(
      "{}"
      "export NCCL_NVLS_ENABLE=0\n"
      "{}"
      "  quill run {} --save \"$OUT\" --load \"$OUT/checkpoint\" --start-fresh-if-no-checkpoint \\\n"
      "    --hf-checkpoint \"$HF_CKPT\" --prompt-data \"$SFT_DATA\" \\\n"
      "    --train-iters 20 --global-batch-size {} --micro-batch-size 1 --seq-length {} \\\n"
      "    {} \\\n"
      "    --optimizer adam --lr 1e-5 --lr-decay-style cosine --min-lr 1e-6 --lr-warmup-fraction 0.1 \\\n"
      "    --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.98 --bf16 --calculate-per-token-loss \\\n"
      "    --attention-dropout 0.0 --hidden-dropout 0.0 --moe-token-dispatcher-type alltoall \\\n"
      "    --distributed-timeout-minutes 30 --save-interval {}\n",
      launch.directives, launch.command, q.recipe_path,
      q.global_batch, q.row_tokens, flags, kSaveInterval);
  std::string peaks;
  for (size_t i = 0; i < chosen.candidate.stage_roles.size(); ++i)
    peaks += fmt::format("{}{} {:.1f} GiB", peaks.empty() ? "" : ", ", chosen.candidate.stage_roles[i],
                         static_cast<double>(chosen.candidate.stage_device_bytes[i]) / (1 << 30));
  r.notes = fmt::format(
      "- Chosen by `quill tune` (docs/tune.md) from every layout that divides the model and {} GPUs and fits by\n"
      "  `quill plan`: projected step {:.3f} s, {:.1f} tokens/s/GPU, MFU {:.4f} ({});\n"
      "  bounded by {}. Peak device memory per stage (plan): {}.\n"
      "- The optimizer and schedule flags of the run block are the seed's (tests/fixtures/recipes/seed.yaml); review\n"
      "  them for this run. HF_CKPT and SFT_DATA name the model directory and the rows (quill data build), OUT the\n"
      "  run's directory: checkpoints every {} steps into $OUT/checkpoint/iter_NNNNNNN, and at a SIGTERM (the time\n"
      "  limit, a preemption); a requeued or resubmitted job continues from the latest, the first start begins\n"
      "  fresh (docs/multi-node.md).\n",
      s.world(), chosen.step_s, chosen.tokens_per_s_per_gpu, chosen.mfu,
      chosen.measured() ? "the compute of its stages measured by `quill tune --measure` with random weights, the\n"
                          "  communication modelled"
                        : "modelled compute and communication, nothing measured",
      chosen.bound, peaks, kSaveInterval);
  return r;
}

}  // namespace quill::tune
