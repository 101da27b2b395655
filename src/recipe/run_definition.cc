#include "recipe/run_definition.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "parallel/stage_split.h"
#include "recipe/yaml_util.h"

namespace quill {

namespace {

std::optional<int64_t> parse_int(const std::string& s) {
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return std::nullopt;
  return v;
}

std::optional<double> parse_double(const std::string& s) {
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || *end != '\0') return std::nullopt;
  return v;
}

// Reads the flags into typed fields, noting where each value came from.
class Lookup {
 public:
  Lookup(const RunFlags& flags, RunDefinition& def) : flags_(flags), def_(def) {}

  // The flag's value as written, or nothing when absent (the field keeps its default) or unresolved.
  std::optional<std::string> text(const char* name) {
    const ParsedFlag* p = flags_.find(name);
    if (!p) {
      const FlagSpec* spec = find_flag(name);
      def_.origin[name] = spec && spec->default_value ? "default" : "unset";
      return std::nullopt;
    }
    if (!p->unresolved.empty()) {
      def_.origin[name] = "unresolved";
      return std::nullopt;
    }
    def_.origin[name] = "flag";
    return p->spec && p->spec->kind == FlagKind::Switch ? "true" : p->value();
  }

  void get(const char* name, std::string& out) {
    if (auto t = text(name)) out = *t;
  }
  void get(const char* name, std::optional<std::string>& out) {
    if (const ParsedFlag* p = flags_.find(name)) {
      out = p->value();  // strings keep an unresolved $VAR as written
      def_.origin[name] = p->unresolved.empty() ? "flag" : "unresolved";
    } else {
      def_.origin[name] = "unset";
    }
  }
  void get(const char* name, bool& out) {
    if (text(name)) out = true;
  }
  void get(const char* name, double& out) {
    if (auto v = number<double>(name)) out = *v;
  }
  void get(const char* name, std::optional<double>& out) {
    if (auto v = number<double>(name)) out = *v;
  }
  void get(const char* name, int64_t& out) {
    if (auto v = number<int64_t>(name)) out = *v;
  }
  void get(const char* name, std::optional<int64_t>& out) {
    if (auto v = number<int64_t>(name)) out = *v;
  }
  bool given(const char* name) const { return flags_.find(name) != nullptr; }

 private:
  template <class T> std::optional<T> number(const char* name) {
    const ParsedFlag* p = flags_.find(name);
    if (p && !p->unresolved.empty())
      def_.problems.push_back(fmt::format("--{} '{}' uses {} without a value (give it with --set NAME=VALUE)", name,
                                          p->value(), p->unresolved.front()));
    std::optional<std::string> t = text(name);
    if (!t) return std::nullopt;
    std::optional<T> v;
    if constexpr (std::is_same_v<T, int64_t>) v = parse_int(*t);
    else v = parse_double(*t);
    if (!v) def_.problems.push_back(fmt::format("--{} '{}' is not {}", name, *t,
                                                std::is_same_v<T, int64_t> ? "an integer" : "a number"));
    return v;
  }

  const RunFlags& flags_;
  RunDefinition& def_;
};

std::string normalise(const FlagSpec& spec, const std::string& raw) {
  if (spec.kind == FlagKind::Int) {
    if (auto v = parse_int(raw)) return fmt::format("{}", *v);
  } else if (spec.kind == FlagKind::Float) {
    if (auto v = parse_double(raw)) return format_double(*v);
  }
  return raw;
}

}  // namespace

RunDefinition run_definition(const RunFlags& flags) {
  RunDefinition d;
  Lookup l(flags, d);
  l.get("optimizer", d.optimizer);
  l.get("lr", d.lr);
  l.get("min-lr", d.min_lr);
  l.get("lr-decay-style", d.lr_decay_style);
  l.get("lr-warmup-fraction", d.lr_warmup_fraction);
  l.get("lr-warmup-iters", d.lr_warmup_iters);
  l.get("lr-decay-iters", d.lr_decay_iters);
  l.get("weight-decay", d.weight_decay);
  l.get("adam-beta1", d.adam_beta1);
  l.get("adam-beta2", d.adam_beta2);
  l.get("adam-eps", d.adam_eps);
  l.get("clip-grad", d.clip_grad);
  l.get("global-batch-size", d.global_batch_size);
  l.get("micro-batch-size", d.micro_batch_size);
  l.get("num-rollout", d.num_rollout);
  l.get("rollout-batch-size", d.rollout_batch_size);
  l.get("n-samples-per-prompt", d.n_samples_per_prompt);
  l.get("seq-length", d.seq_length);
  l.get("seed", d.seed);
  l.get("save-interval", d.save_interval);
  l.get("async-save", d.async_save);
  l.get("eval-interval", d.eval_interval);
  l.get("eval-iters", d.eval_iters);
  l.get("distributed-timeout-minutes", d.distributed_timeout_minutes);
  l.get("bf16", d.bf16);
  l.get("fp16", d.fp16);
  l.get("fp8-format", d.fp8_format);
  l.get("fp8-recipe", d.fp8_recipe);
  l.get("attention-dropout", d.attention_dropout);
  l.get("hidden-dropout", d.hidden_dropout);
  l.get("calculate-per-token-loss", d.calculate_per_token_loss);
  l.get("loss-type", d.loss_type);
  l.get("hf-checkpoint", d.hf_checkpoint);
  l.get("tensor-model-parallel-size", d.tp);
  l.get("pipeline-model-parallel-size", d.pp);
  l.get("context-parallel-size", d.cp);
  l.get("expert-model-parallel-size", d.ep);
  d.etp = d.tp;  // Megatron: the expert TP size defaults to the TP size
  l.get("expert-tensor-parallel-size", d.etp);
  l.get("virtual-pipeline-model-parallel-size", d.vpp);
  l.get("sequence-parallel", d.sequence_parallel);
  l.get("decoder-first-pipeline-num-layers", d.first_stage_layers);
  l.get("decoder-last-pipeline-num-layers", d.last_stage_layers);
  l.get("recompute-granularity", d.recompute_granularity);
  l.get("recompute-method", d.recompute_method);
  l.get("recompute-num-layers", d.recompute_num_layers);
  l.get("optimizer-cpu-offload", d.optimizer_cpu_offload);
  l.get("optimizer-offload-fraction", d.optimizer_offload_fraction);
  l.get("overlap-cpu-optimizer-d2h-h2d", d.overlap_cpu_optimizer_d2h_h2d);
  l.get("use-distributed-optimizer", d.use_distributed_optimizer);
  l.get("use-precision-aware-optimizer", d.use_precision_aware_optimizer);
  l.get("exp-avg-dtype", d.exp_avg_dtype);
  l.get("exp-avg-sq-dtype", d.exp_avg_sq_dtype);
  l.get("main-grads-dtype", d.main_grads_dtype);
  for (const auto& [flag, value] : {std::pair{"exp-avg-dtype", d.exp_avg_dtype}, std::pair{"exp-avg-sq-dtype", d.exp_avg_sq_dtype},
                                    std::pair{"main-grads-dtype", d.main_grads_dtype}})
    if (value != "fp32" && value != "bf16" && d.origin[flag] != "unresolved")
      d.problems.push_back(fmt::format("--{} '{}' is not fp32 or bf16", flag, value));
  l.get("moe-token-dispatcher-type", d.dispatcher);

  if (l.given("actor-num-nodes") || l.given("actor-num-gpus-per-node")) {
    int64_t nodes = 1, per_node = 8;
    l.get("actor-num-nodes", nodes);
    l.get("actor-num-gpus-per-node", per_node);
    d.world_size = nodes * per_node;
    d.gpus_per_node = per_node;
  }

  std::optional<int64_t> train_iters;
  l.get("train-iters", train_iters);
  if (train_iters) {
    d.train_steps = train_iters;
    d.origin["train_steps"] = "--train-iters";
  } else if (d.num_rollout && d.rollout_batch_size && d.global_batch_size && *d.global_batch_size > 0) {
    // miles: each rollout's samples make rollout_batch_size * n_samples_per_prompt / global_batch_size steps
    int64_t samples = *d.rollout_batch_size * d.n_samples_per_prompt;
    if (samples % *d.global_batch_size != 0) {
      d.problems.push_back(fmt::format("--rollout-batch-size {} x --n-samples-per-prompt {} is not a multiple of "
                                       "--global-batch-size {}",
                                       *d.rollout_batch_size, d.n_samples_per_prompt, *d.global_batch_size));
    } else {
      d.train_steps = *d.num_rollout * (samples / *d.global_batch_size);
      d.origin["train_steps"] = "--num-rollout x --rollout-batch-size x --n-samples-per-prompt / --global-batch-size";
    }
  }
  if (!d.lr && d.origin["lr"] != "unresolved") d.problems.push_back("--lr is not given (Megatron has no default)");
  return d;
}

LrSchedule RunDefinition::lr_schedule() const {
  LrSchedule s;
  s.max_lr = lr.value_or(0.0);
  s.min_lr = min_lr;
  s.style = lr_decay_style;
  if (lr_warmup_fraction) {
    s.warmup_fraction = *lr_warmup_fraction;
    s.warmup_steps = -1;
  } else {
    s.warmup_steps = lr_warmup_iters;
  }
  s.decay_steps = lr_decay_iters.value_or(0);
  return s;
}

AdamWConfig RunDefinition::adamw() const {
  AdamWConfig c;
  c.beta1 = adam_beta1;
  c.beta2 = adam_beta2;
  c.eps = adam_eps;
  c.weight_decay = weight_decay;
  c.clip_grad = clip_grad;
  c.memory.cpu_offload = optimizer_cpu_offload;
  c.memory.offload_fraction = optimizer_offload_fraction;
  c.memory.overlap_d2h_h2d = overlap_cpu_optimizer_d2h_h2d;
  c.memory.exp_avg = parse_optimizer_dtype(exp_avg_dtype, "--exp-avg-dtype");
  c.memory.exp_avg_sq = parse_optimizer_dtype(exp_avg_sq_dtype, "--exp-avg-sq-dtype");
  c.memory.main_grads = parse_optimizer_dtype(main_grads_dtype, "--main-grads-dtype");
  return c;
}

nlohmann::json RunDefinition::to_json() const {
  nlohmann::json j;
  auto opt = [](const auto& o) { return o ? nlohmann::json(*o) : nlohmann::json(nullptr); };
  j["optimizer"] = optimizer;
  j["lr"] = opt(lr);
  j["min_lr"] = min_lr;
  j["lr_decay_style"] = lr_decay_style;
  j["lr_warmup_fraction"] = opt(lr_warmup_fraction);
  j["lr_warmup_iters"] = lr_warmup_iters;
  j["lr_decay_iters"] = opt(lr_decay_iters);
  j["weight_decay"] = weight_decay;
  j["adam_beta1"] = adam_beta1;
  j["adam_beta2"] = adam_beta2;
  j["adam_eps"] = adam_eps;
  j["clip_grad"] = clip_grad;
  j["global_batch_size"] = opt(global_batch_size);
  j["micro_batch_size"] = opt(micro_batch_size);
  j["train_steps"] = opt(train_steps);
  j["num_rollout"] = opt(num_rollout);
  j["rollout_batch_size"] = opt(rollout_batch_size);
  j["n_samples_per_prompt"] = n_samples_per_prompt;
  j["seq_length"] = opt(seq_length);
  j["seed"] = seed;
  j["bf16"] = bf16;
  j["fp16"] = fp16;
  j["fp8_format"] = opt(fp8_format);
  j["fp8_recipe"] = opt(fp8_recipe);
  j["attention_dropout"] = attention_dropout;
  j["hidden_dropout"] = hidden_dropout;
  j["calculate_per_token_loss"] = calculate_per_token_loss;
  j["loss_type"] = opt(loss_type);
  j["hf_checkpoint"] = opt(hf_checkpoint);
  j["tp"] = tp;
  j["pp"] = pp;
  j["cp"] = cp;
  j["ep"] = ep;
  j["etp"] = etp;
  j["vpp"] = vpp;
  j["sequence_parallel"] = sequence_parallel;
  j["first_stage_layers"] = opt(first_stage_layers);
  j["last_stage_layers"] = opt(last_stage_layers);
  j["world_size"] = opt(world_size);
  j["gpus_per_node"] = opt(gpus_per_node);
  j["recompute_granularity"] = opt(recompute_granularity);
  j["recompute_method"] = opt(recompute_method);
  j["recompute_num_layers"] = opt(recompute_num_layers);
  j["optimizer_cpu_offload"] = optimizer_cpu_offload;
  j["optimizer_offload_fraction"] = optimizer_offload_fraction;
  j["overlap_cpu_optimizer_d2h_h2d"] = overlap_cpu_optimizer_d2h_h2d;
  j["use_distributed_optimizer"] = use_distributed_optimizer;
  j["use_precision_aware_optimizer"] = use_precision_aware_optimizer;
  j["exp_avg_dtype"] = exp_avg_dtype;
  j["exp_avg_sq_dtype"] = exp_avg_sq_dtype;
  j["main_grads_dtype"] = main_grads_dtype;
  j["dispatcher"] = dispatcher;
  j["origin"] = origin;
  j["problems"] = problems;
  return j;
}

std::map<std::string, std::string> effective_flags(const RunFlags& flags) {
  std::map<std::string, std::string> out;
  for (const FlagSpec& spec : flag_table()) {
    const ParsedFlag* p = flags.find(spec.name);
    if (p) {
      out[spec.name] = spec.kind == FlagKind::Switch ? "true" : p->unresolved.empty() ? normalise(spec, p->value())
                                                                                      : p->value();
    } else if (spec.default_value && std::string(spec.default_value) != "=tp") {
      out[spec.name] = normalise(spec, spec.default_value);
    }
  }
  if (!flags.find("expert-tensor-parallel-size")) out["expert-tensor-parallel-size"] = out["tensor-model-parallel-size"];
  for (const ParsedFlag& f : flags.flags)
    if (!f.spec) out[f.name] = f.values.empty() ? "true" : f.value();
  return out;
}

namespace {

class Comparer {
 public:
  Comparer(const RunFlags& flags, std::vector<Disagreement>& out) : flags_(flags), out_(out) {}

  // Reports `field` when the recipe's value and the flags' value differ.
  void check(const std::string& field, const std::string& recipe_value, const std::string& flag_value,
             const std::string& flag, const std::string& note = "") {
    if (recipe_value == flag_value) return;
    Disagreement d{field, recipe_value, flag_value, flag, note};
    if (d.note.empty()) d.note = absent_note(flag);
    out_.push_back(std::move(d));
  }

  std::string absent_note(const std::string& flag) const {
    std::string first = flag.substr(0, flag.find(' '));
    if (flags_.find(first)) return "the recipe's layout applies";
    std::string note = "the flag is absent, so Megatron's default applies to the flags; the recipe's layout applies";
    if (!flags_.unexpanded.empty())
      note += fmt::format(" (\"${{{}[@]}}\" is not expanded and may set it)", flags_.unexpanded.front().name);
    return note;
  }

 private:
  const RunFlags& flags_;
  std::vector<Disagreement>& out_;
};

std::string str(int64_t v) { return fmt::format("{}", v); }
std::string str(bool v) { return v ? "true" : "false"; }
std::string str(const std::optional<int64_t>& v) { return v ? str(*v) : "none"; }

std::string recompute_text(const std::optional<std::string>& g, const std::optional<std::string>& m,
                           const std::optional<int64_t>& n) {
  if (!g) return "none";
  std::string s = *g;
  if (m) s += " " + *m;
  if (n) s += fmt::format(" {}", *n);
  return s;
}

}  // namespace

std::vector<Disagreement> compare_layout_with_flags(const Recipe& r, const RunFlags& flags, const RunDefinition& d,
                                                    std::optional<int64_t> num_layers) {
  std::vector<Disagreement> out;
  if (!flags.found) return out;
  Comparer c(flags, out);
  const RecipeLayout& L = r.layout;
  c.check("layout.tp", str(L.tp), str(d.tp), "--tensor-model-parallel-size");
  c.check("layout.pp", str(L.pp), str(d.pp), "--pipeline-model-parallel-size");
  c.check("layout.cp", str(L.cp), str(d.cp), "--context-parallel-size");
  c.check("layout.ep", str(L.ep), str(d.ep), "--expert-model-parallel-size");
  c.check("layout.etp", str(L.etp), str(d.etp), "--expert-tensor-parallel-size");
  c.check("layout.vpp", str(L.vpp), str(d.vpp), "--virtual-pipeline-model-parallel-size");
  c.check("layout.sequence_parallel", str(L.sequence_parallel), str(d.sequence_parallel), "--sequence-parallel");
  if (d.world_size) {
    c.check("gpu.count", str(r.gpu.count), str(*d.world_size), "--actor-num-nodes x --actor-num-gpus-per-node");
    int64_t dense = d.tp * d.pp * d.cp;
    if (dense > 0 && *d.world_size % dense == 0)
      c.check("layout.dp", str(L.dp), str(*d.world_size / dense),
              "--actor-num-nodes x --actor-num-gpus-per-node / (tp x pp x cp)");
  }
  if (d.gpus_per_node && r.gpu.per_node)
    c.check("gpu.per_node", str(*r.gpu.per_node), str(*d.gpus_per_node), "--actor-num-gpus-per-node");

  // Layer split: the flags name the first/last stage; the others share the rest evenly.
  std::optional<int64_t> first = L.layer_split ? L.layer_split->first : std::nullopt;
  std::optional<int64_t> last = L.layer_split ? L.layer_split->last : std::nullopt;
  std::optional<int64_t> flag_first = d.first_stage_layers, flag_last = d.last_stage_layers;
  if (num_layers && L.pp > 1) {
    StageSplit s = split_layers(*num_layers, d.pp, d.first_stage_layers, d.last_stage_layers);
    if (s.error.empty()) {
      flag_first = s.layers.front();
      flag_last = s.layers.back();
    }
  }
  if (first || d.first_stage_layers)
    c.check("layout.layer_split.first", str(first), str(flag_first), "--decoder-first-pipeline-num-layers",
            d.first_stage_layers ? "" : "the flags leave it to the even split; the recipe's layout applies");
  if (last || d.last_stage_layers)
    c.check("layout.layer_split.last", str(last), str(flag_last), "--decoder-last-pipeline-num-layers",
            d.last_stage_layers || !num_layers ? "" : "the flags leave it to the even split; the recipe's layout applies");

  if (d.micro_batch_size)
    c.check("layout.rows_per_microbatch", str(L.rows_per_microbatch), str(*d.micro_batch_size), "--micro-batch-size");

  std::string layout_recompute = L.recompute ? recompute_text(L.recompute->granularity, L.recompute->method,
                                                              L.recompute->num_layers)
                                             : "none";
  std::string flag_recompute = recompute_text(d.recompute_granularity, L.recompute && !L.recompute->method ? std::nullopt : d.recompute_method,
                                              L.recompute && !L.recompute->num_layers ? std::nullopt : d.recompute_num_layers);
  c.check("layout.recompute", layout_recompute, flag_recompute,
          "--recompute-granularity --recompute-method --recompute-num-layers",
          L.recompute ? "" : "the recipe's layout applies: no recompute");

  const std::optional<Offload>& off = L.offload;
  const std::string layout_fraction =
      off && off->optimizer_fraction ? format_double(*off->optimizer_fraction) : std::string("none");
  const std::string flag_fraction = d.optimizer_cpu_offload ? format_double(d.optimizer_offload_fraction) : "none";
  c.check("layout.offload.optimizer_fraction", layout_fraction, flag_fraction,
          "--optimizer-cpu-offload --optimizer-offload-fraction");
  if (off && off->overlap_d2h_h2d)
    c.check("layout.offload.overlap_d2h_h2d", str(*off->overlap_d2h_h2d), str(d.overlap_cpu_optimizer_d2h_h2d),
            "--overlap-cpu-optimizer-d2h-h2d");
  if (L.dispatcher) c.check("layout.dispatcher", *L.dispatcher, d.dispatcher, "--moe-token-dispatcher-type");
  std::optional<int64_t> flag_max_tokens;
  if (const ParsedFlag* p = flags.find("max-tokens-per-gpu"); p && p->unresolved.empty()) {
    try {
      flag_max_tokens = std::stoll(p->value());
    } catch (const std::exception&) {
    }
  }
  if (L.max_tokens_per_gpu || flag_max_tokens)
    c.check("layout.max_tokens_per_gpu", str(L.max_tokens_per_gpu), str(flag_max_tokens), "--max-tokens-per-gpu");

  if (d.global_batch_size)
    c.check("workload.global_batch", str(r.workload.global_batch), str(*d.global_batch_size), "--global-batch-size");
  if (d.seq_length) c.check("workload.row_tokens", str(r.workload.row_tokens), str(*d.seq_length), "--seq-length");
  std::string flag_precision = d.bf16 ? "bf16" : d.fp16 ? "fp16" : "fp32";
  c.check("workload.precision", r.workload.precision, flag_precision, d.bf16 ? "--bf16" : d.fp16 ? "--fp16" : "--bf16 / --fp16");
  if (r.result && r.result->steps_per_run && d.train_steps)
    c.check("result.steps_per_run", str(*r.result->steps_per_run), str(*d.train_steps),
            d.origin.count("train_steps") ? d.origin.at("train_steps") : "--train-iters");
  return out;
}

}  // namespace quill
