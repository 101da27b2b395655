#include "recipe/flag_table.h"

#include <algorithm>

namespace quill {

const char* class_name(SettingClass c) {
  switch (c) {
    case SettingClass::Numerics: return "numerics";
    case SettingClass::Placement: return "placement";
    case SettingClass::Launcher: return "launcher";
    case SettingClass::Unknown: return "unknown";
  }
  return "unknown";
}

namespace {

constexpr SettingClass N = SettingClass::Numerics;
constexpr SettingClass P = SettingClass::Placement;
constexpr SettingClass L = SettingClass::Launcher;
constexpr FlagKind SW = FlagKind::Switch, I = FlagKind::Int, F = FlagKind::Float, S = FlagKind::String,
                   LI = FlagKind::List;

// quill train's reading of a Megatron name (flag_table.h's TrainName), one helper per use.
TrainName alias(const char* option) { return {TrainUse::Alias, option, nullptr}; }
TrainName only(const char* value, const char* why) { return {TrainUse::Value, value, why}; }
TrainName note(const char* text) { return {TrainUse::Note, nullptr, text}; }
TrainName cpu_note(const char* text) { return {TrainUse::CpuNote, nullptr, text}; }
TrainName instead(const char* what) { return {TrainUse::Refused, nullptr, what}; }
TrainName ignored(const char* what) { return {TrainUse::Ignored, nullptr, what}; }
// What a run's own files offer in place of a logging service.
constexpr const char* kOwnMetrics =
    "quill writes each step's loss, grad norm, lr, tokens/s and expert load to OUT/metrics.jsonl and OUT/run.svg "
    "(and TensorBoard files with --tensorboard-dir)";
// The model's shape and router are the model's config.json, never flags.
TrainName shape() { return instead("the model's shape is its config.json: give --config, or --init's"); }

// Defaults: Megatron-LM megatron/training/arguments.py (core 0.16) unless noted; "=tp" and the like
// are resolved by the reader.
const std::vector<FlagSpec> kFlags = {
    // -- optimizer and schedule (numerics)
    {"optimizer", N, S, "adam", "optimizer (adam is AdamW: decoupled weight decay)",
        only("adam", "quill implements adam (AdamW, decoupled weight decay)")},
    {"lr", N, F, nullptr, "peak learning rate"},
    {"min-lr", N, F, "0.0", "learning rate at the end of the decay"},
    {"lr-decay-style", N, S, "linear", "decay after warm-up: constant | linear | cosine | ..."},
    {"lr-warmup-fraction", N, F, nullptr, "warm-up steps as a fraction of the decay steps", alias("warmup-fraction")},
    {"lr-warmup-iters", N, I, "0", "warm-up steps (when no fraction)",
        instead("give the warm-up as --warmup-fraction (warm-up steps / decay steps); quill train's "
                "--warmup-steps only leaves steps out of the closing summary")},
    {"lr-warmup-init", N, F, "0.0", "learning rate at the start of the warm-up",
        only("0", "quill's warm-up starts from a learning rate of 0")},
    {"lr-decay-iters", N, I, nullptr, "decay steps (default: the train steps)", alias("lr-decay-steps")},
    {"weight-decay", N, F, "0.01", "decoupled weight decay (none on 1-D parameters)"},
    {"adam-beta1", N, F, "0.9", "Adam beta1", alias("beta1")},
    {"adam-beta2", N, F, "0.999", "Adam beta2", alias("beta2")},
    {"adam-eps", N, F, "1e-08", "Adam epsilon"},
    {"clip-grad", N, F, "1.0", "gradient clipping by global norm (0: off)"},
    {"use-precision-aware-optimizer", N, SW, "false", "TE's optimizer that may keep state in lower precision"},
    // The state's dtypes change the arithmetic's results (bf16 rounds the moments): numerics.
    {"exp-avg-dtype", N, S, "fp32", "Adam first moment's dtype: fp32 | bf16"},
    {"exp-avg-sq-dtype", N, S, "fp32", "Adam second moment's dtype: fp32 | bf16"},
    {"main-grads-dtype", N, S, "fp32", "gradient buffers' dtype: fp32 | bf16"},
    {"accumulate-allreduce-grads-in-fp32", N, SW, "false", "fp32 gradient accumulation and reduction"},
    // -- batch and steps
    {"global-batch-size", N, I, nullptr, "rows per optimizer step", alias("global-batch")},
    {"micro-batch-size", P, I, nullptr, "rows per micro-batch (per-token loss: grouping only)",
        only("1", "quill runs one row per micro-batch (each of --global-batch rows is its own; the per-token "
             "loss makes the grouping irrelevant to the result)")},
    {"train-iters", N, I, nullptr, "optimizer steps", alias("steps")},
    {"num-rollout", N, I, nullptr, "miles: rollouts; with one step per rollout, the train steps"},
    {"rollout-batch-size", N, I, nullptr, "miles: prompts per rollout"},
    {"n-samples-per-prompt", N, I, "1", "miles: samples per prompt"},
    {"seed", N, I, "1234", "random seed"},
    // -- loss and data
    {"loss-type", N, S, nullptr, "miles: the loss (sft_loss)",
        only("sft_loss", "quill train's loss is the SFT loss over the rows' supervised tokens")},
    {"calculate-per-token-loss", N, SW, "false", "normalise the loss by the supervised tokens of the global batch",
        note("quill's loss is always per token over the global batch")},
    {"prompt-data", N, S, nullptr, "miles: the training rows",
        instead("give --rows DIR (rows made by quill data build or quill data synth)")},
    {"input-key", N, S, nullptr, "miles: field of a row holding the conversation"},
    {"metadata-key", N, S, nullptr, "miles: field of a row holding its metadata"},
    {"rollout-function-path", N, S, nullptr, "miles: the function producing the rows of a step"},
    {"apply-chat-template", N, SW, "false", "miles: render conversations with the chat template"},
    {"data-path", N, LI, nullptr, "training data",
        instead("give --rows DIR (rows made by quill data build or quill data synth)")},
    {"seq-length", N, I, nullptr, "tokens per row",
        instead("the rows fix the tokens per row: quill data build/synth --row-tokens N")},
    // -- model and weights
    {"hf-checkpoint", N, S, nullptr, "Hugging Face checkpoint (tokenizer, config; initial weights)",
        instead("give --init DIR to start from its weights, or --config DIR for its shape with a random "
                "initialisation")},
    {"ref-load", N, S, nullptr, "miles: reference/initial weights (Megatron format)",
        instead("give --init DIR (a Hugging Face checkpoint)")},
    // quill train has --load itself (--resume is the same option): a --save directory's latest iteration.
    {"load", N, S, nullptr, "initial weights or checkpoint", alias("resume")},
    {"pretrained-checkpoint", N, S, nullptr, "initial weights",
        instead("give --init DIR (a Hugging Face checkpoint)")},
    {"model-name", N, S, nullptr, "miles: model family", shape()},
    {"bf16", N, SW, "false", "bf16 parameters and activations",
        cpu_note("--device cpu computes in fp32 (the reference backend); bf16 is --device cuda's precision "
                 "(fp32 master weights)")},
    // FP8 GEMMs change the function computed (E4M3 rounding of their operands): numerics. quill train has
    // both names itself (cli/fp8_flags.h); Megatron's --fp8-recipe defaults to delayed, which applies only
    // with --fp8-format, so the table leaves it unset.
    {"fp8-format", N, S, nullptr, "FP8 GEMMs: e4m3 | hybrid (off when absent)"},
    {"fp8-recipe", N, S, nullptr, "FP8 scaling: delayed (Megatron's default) | tensorwise | mxfp8 | blockwise"},
    {"no-fp8-wgrad", N, SW, "false", "FP8 runs' weight gradients in higher precision"},
    {"fp16", N, SW, "false", "fp16 parameters and activations",
        instead("quill computes in bf16 on --device cuda (--bf16) and in fp32 on --device cpu")},
    {"attention-dropout", N, F, "0.1", "attention dropout", only("0", "quill trains without dropout")},
    {"hidden-dropout", N, F, "0.1", "hidden dropout", only("0", "quill trains without dropout")},
    {"attention-softmax-in-fp32", N, SW, "false", "softmax in fp32",
        note("quill's softmax is computed in fp32 already")},
    {"no-bias-dropout-fusion", N, SW, "false", "unfused bias+dropout kernels"},
    {"transformer-impl", N, S, "transformer_engine", "layer implementation (kernels)",
        note("quill runs its own kernels (bf16 GEMMs, fp32 softmax and norms on --device cuda)")},
    {"num-layers", N, I, nullptr, "model shape", shape()},
    {"hidden-size", N, I, nullptr, "model shape", shape()},
    {"ffn-hidden-size", N, I, nullptr, "model shape", shape()},
    {"num-attention-heads", N, I, nullptr, "model shape", shape()},
    {"num-query-groups", N, I, nullptr, "model shape", shape()},
    {"group-query-attention", N, SW, "false", "model shape", shape()},
    {"kv-channels", N, I, nullptr, "model shape", shape()},
    {"max-position-embeddings", N, I, nullptr, "model shape", shape()},
    {"vocab-size", N, I, nullptr, "model shape", shape()},
    {"make-vocab-size-divisible-by", N, I, "128", "vocabulary padding", shape()},
    {"normalization", N, S, "LayerNorm", "model shape", shape()},
    {"norm-epsilon", N, F, "1e-05", "model shape", shape()},
    {"swiglu", N, SW, "false", "model shape", shape()},
    {"untie-embeddings-and-output-weights", N, SW, "false", "model shape", shape()},
    {"disable-bias-linear", N, SW, "false", "model shape", shape()},
    {"position-embedding-type", N, S, "learned_absolute", "model shape", shape()},
    {"rotary-base", N, F, "10000", "model shape", shape()},
    {"num-experts", N, I, nullptr, "model shape", shape()},
    {"moe-router-topk", N, I, "2", "model shape", shape()},
    {"moe-ffn-hidden-size", N, I, nullptr, "model shape", shape()},
    {"moe-shared-expert-intermediate-size", N, I, nullptr, "model shape", shape()},
    {"moe-router-score-function", N, S, "softmax", "router", shape()},
    {"moe-router-enable-expert-bias", N, SW, "false", "router", shape()},
    {"moe-aux-loss-coeff", N, F, "0.0", "router auxiliary loss",
        only("0", "quill trains without the router's auxiliary loss")},
    {"moe-layer-freq", N, S, "1", "model shape", shape()},
    {"qk-layernorm", N, SW, "false", "model shape", shape()},
    // -- placement: parallel layout
    {"tensor-model-parallel-size", P, I, "1", "TP"},
    {"pipeline-model-parallel-size", P, I, "1", "PP"},
    {"context-parallel-size", P, I, "1", "CP"},
    {"expert-model-parallel-size", P, I, "1", "EP"},
    {"expert-tensor-parallel-size", P, I, "=tp", "ETP (default: the TP size)"},
    {"virtual-pipeline-model-parallel-size", P, I, "1", "VPP",
        instead("quill has no virtual pipeline stages: --pp with --pp-layers")},
    {"num-layers-per-virtual-pipeline-stage", P, I, nullptr, "VPP by layers",
        instead("quill has no virtual pipeline stages: --pp with --pp-layers")},
    {"sequence-parallel", P, SW, "false", "sequence parallelism"},
    {"decoder-first-pipeline-num-layers", P, I, nullptr, "layers of the first pipeline stage",
        instead("give every stage's layers with --pp-layers, e.g. 12,10,10,10")},
    {"decoder-last-pipeline-num-layers", P, I, nullptr, "layers of the last pipeline stage",
        instead("give every stage's layers with --pp-layers, e.g. 12,10,10,10")},
    {"actor-num-nodes", P, I, "1", "miles: nodes of the training job"},
    {"actor-num-gpus-per-node", P, I, "8", "miles: GPUs per node of the training job"},
    {"num-gpus-per-node", P, I, "8", "GPUs per node"},
    {"use-distributed-optimizer", P, SW, "false", "sharded optimizer state",
        note("quill's data parallelism always shards the optimizer state")},
    {"overlap-grad-reduce", P, SW, "false", "overlapped gradient reduction"},
    {"overlap-param-gather", P, SW, "false", "overlapped parameter gathering"},
    {"ddp-bucket-size", P, I, nullptr, "elements per data-parallel gradient bucket"},
    {"moe-token-dispatcher-type", P, S, "allgather", "expert dispatcher",
        only("alltoall", "quill's expert exchange is Megatron's alltoall dispatcher")},
    {"moe-shared-expert-overlap", P, SW, "false", "shared experts overlapped with the token exchange"},
    {"tp-comm-overlap", P, SW, "false", "tensor-parallel collectives overlapped with GEMMs (sequence parallelism)"},
    {"delay-wgrad-compute", P, SW, "false", "expert weight gradients overlapped with the backward's token exchange"},
    {"overlap-moe-expert-parallel-comm", P, SW, "false",
        "combined 1F1B: one micro-batch's token exchanges under another's compute (--pp 1)"},
    {"max-tokens-per-gpu", P, I, nullptr, "miles: dynamic micro-batching by tokens"},
    {"use-dynamic-batch-size", P, SW, "false", "miles: dynamic micro-batching"},
    {"recompute-granularity", P, S, nullptr, "activation recompute: full | selective"},
    {"recompute-method", P, S, nullptr, "activation recompute: uniform | block"},
    {"recompute-num-layers", P, I, nullptr, "activation recompute: layers per group"},
    {"recompute-modules", P, LI, nullptr, "activation recompute, selective: moe_act | layernorm"},
    {"recompute-activations", P, SW, "false", "selective recompute",
        instead("Megatron's --recompute-activations recomputes its default module core_attn, which quill's attention "
                "does not need (it keeps no [T, T] tensor): give --recompute-granularity selective --recompute-modules "
                "moe_act layernorm")},
    {"optimizer-cpu-offload", P, SW, "false", "optimizer state on the CPU"},
    {"optimizer-offload-fraction", P, F, "1.0", "share of the optimizer state on the CPU"},
    {"overlap-cpu-optimizer-d2h-h2d", P, SW, "false", "overlapped optimizer copies"},
    // -- launcher: irrelevant to the math
    {"no-check-for-nan-in-loss-and-grad", L, SW, "false", "a NaN check, not math",
        note("quill stops at a non-finite loss regardless, before the weights change")},
    {"distributed-timeout-minutes", L, I, "10", "timeout"},
    {"save", L, S, nullptr, "checkpoint path"},
    {"save-interval", L, I, nullptr, "checkpoint interval"},
    // Honoured: quill train has the flags itself; quill run passes --async-save on when it saves.
    {"async-save", L, SW, "false", "checkpoints written in the background while training goes on (honoured)"},
    {"ckpt-step", L, I, nullptr,
        "the iteration --load resumes instead of the latest (honoured by quill train and quill run)"},
    {"exit-on-missing-checkpoint", L, SW, "false", "refuse a --load without a checkpoint instead of starting fresh",
        note("quill train always refuses a --load DIR that holds no checkpoint, unless "
             "--start-fresh-if-no-checkpoint")},
    // quill's own (Megatron starts fresh silently where a --load holds nothing): a job script that always
    // passes --load gives it for its first start.
    {"start-fresh-if-no-checkpoint", L, SW, "false",
        "with --load, start the run when no checkpoint exists yet (honoured by quill train and quill run)"},
    {"save-retain-interval", L, I, nullptr, "keep the checkpoints of every N-th iteration, remove the others",
        instead("give --keep-last-checkpoints N (the newest N stay, the latest always)")},
    {"exit-signal-handler", L, SW, "false", "on SIGTERM, save a checkpoint and exit",
        note("quill train always does this, for SIGTERM and SIGINT: every rank stops at the next step boundary, "
             "saves to --save DIR, prints the command that continues the run and exits 128 + the signal's number "
             "(docs/run-directory.md)")},
    {"no-save-optim", L, SW, "false", "checkpoint content",
        instead("a quill training checkpoint always holds the optimizer state (--save DIR)")},
    {"log-interval", L, I, "100", "logging",
        note("quill train logs every step (a line per step and OUT/metrics.jsonl; --quiet for no lines)")},
    {"log-throughput", L, SW, "false", "logging", note("quill train logs tokens/s every step")},
    {"timing-log-level", L, I, "0", "logging", ignored("quill times every step (OUT/metrics.jsonl, summary.json)")},
    // Honoured: quill train has the flag itself, and quill run passes it on (a relative DIR under --out).
    {"tensorboard-dir", L, S, nullptr, "logging: TensorBoard event files of each step's scalars (honoured)"},
    {"use-wandb", L, SW, "false", "logging", ignored(kOwnMetrics)},
    {"wandb-project", L, S, nullptr, "logging", ignored(kOwnMetrics)},
    {"wandb-group", L, S, nullptr, "logging", ignored(kOwnMetrics)},
    {"wandb-key", L, S, nullptr, "logging", ignored(kOwnMetrics)},
    // Honoured: quill train has the flags itself (the validation loss, with --valid-rows); quill run passes
    // them on with the validation rows. Evaluation changes no training result: launcher.
    {"eval-interval", L, I, "1000", "evaluation: the validation loss every N steps and after the last (honoured "
        "with validation rows)"},
    {"eval-iters", L, I, "100", "evaluation: global batches of validation rows per evaluation (honoured)"},
    {"valid-data-path", L, LI, nullptr, "evaluation: the validation data (quill run reads it as a rows directory)",
        instead("give --valid-rows DIR (rows made by quill data build --valid-fraction)")},
    {"ray-address", L, S, nullptr, "Ray", ignored("quill starts its ranks with mpirun or srun")},
    {"colocate", L, SW, "false", "miles: rollout engines beside the trainer",
        ignored("quill only trains: no rollout engines")},
    {"rollout-num-gpus", L, I, nullptr, "miles: rollout engines (none in a train-only run)",
        ignored("quill only trains: no rollout engines")},
    {"rollout-num-gpus-per-engine", L, I, nullptr, "miles: rollout engines",
        ignored("quill only trains: no rollout engines")},
};

std::string normalise(std::string_view name) {
  while (!name.empty() && name.front() == '-') name.remove_prefix(1);
  std::string s(name);
  std::replace(s.begin(), s.end(), '_', '-');
  return s;
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

}  // namespace

const std::vector<FlagSpec>& flag_table() { return kFlags; }

std::string not_honoured_warning(const std::vector<std::string>& flags) {
  std::vector<std::string> names, notes;
  for (const std::string& f : flags) {
    if (std::find(names.begin(), names.end(), f) != names.end()) continue;
    names.push_back(f);
    const FlagSpec* spec = find_flag(f);
    if (spec && spec->train.note && std::find(notes.begin(), notes.end(), spec->train.note) == notes.end())
      notes.push_back(spec->train.note);
  }
  if (names.empty()) return "";
  std::string line = "not honoured (accepted, nothing done):";
  for (size_t i = 0; i < names.size(); ++i) line += (i ? ", " : " ") + names[i];
  for (const std::string& n : notes) line += "; " + n;
  return line;
}

const FlagSpec* find_flag(std::string_view name) {
  std::string n = normalise(name);
  for (const FlagSpec& f : kFlags)
    if (n == f.name) return &f;
  return nullptr;
}

SettingClass env_class(std::string_view name) {
  if (starts_with(name, "NCCL_") || name == "CUDA_DEVICE_MAX_CONNECTIONS" || name == "PYTORCH_CUDA_ALLOC_CONF")
    return SettingClass::Placement;
  if (starts_with(name, "FI_") || starts_with(name, "RAY_") || name == "TRITON_CACHE_DIR" ||
      name == "TORCHINDUCTOR_CACHE_DIR")
    return SettingClass::Launcher;
  return SettingClass::Unknown;
}

}  // namespace quill
