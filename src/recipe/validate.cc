#include "recipe/validate.h"

#include <fmt/format.h>

#include "parallel/stage_split.h"
#include "recipe/recipe_keys.h"

namespace quill {

namespace {

void need_positive(std::vector<Problem>& out, const std::string& field, int64_t v) {
  if (v < 1) out.push_back({field, fmt::format("must be at least 1, got {}", v)});
}

void check_window(const Recipe& r, std::optional<int64_t> steps, std::vector<Problem>& out) {
  const std::optional<std::vector<int64_t>>& w = r.result ? r.result->window : std::nullopt;
  if (!w) {
    if (steps && *steps - 5 < 8)
      out.push_back({"result.window", fmt::format("absent, and the default window [5, {}] of a {}-step run holds {} "
                                                  "steps (at least 8 needed)",
                                                  *steps - 1, *steps, std::max<int64_t>(0, *steps - 5))});
    return;
  }
  if (w->size() != 2) {
    out.push_back({"result.window", fmt::format("expected [first, last], got {} values", w->size())});
    return;
  }
  int64_t first = (*w)[0], last = (*w)[1];
  if (first < 0 || last < first) {
    out.push_back({"result.window", fmt::format("[{}, {}] is not a range of steps (0-based, inclusive)", first, last)});
    return;
  }
  if (steps && last >= *steps)
    out.push_back({"result.window", fmt::format("[{}, {}] ends outside the run's {} steps (0 to {})", first, last,
                                                *steps, *steps - 1)});
  if (r.result->window_tokens && r.workload.global_batch > 0 && r.workload.row_tokens > 0) {
    int64_t expect = (last - first + 1) * r.workload.global_batch * r.workload.row_tokens;
    if (*r.result->window_tokens != expect)
      out.push_back({"result.window_tokens", fmt::format("{} != {} steps x {} rows x {} tokens = {}",
                                                         *r.result->window_tokens, last - first + 1,
                                                         r.workload.global_batch, r.workload.row_tokens, expect)});
  }
}

void check_layer_split(const Recipe& r, std::optional<int64_t> num_layers, std::vector<Problem>& out) {
  const RecipeLayout& L = r.layout;
  std::optional<int64_t> first = L.layer_split ? L.layer_split->first : std::nullopt;
  std::optional<int64_t> last = L.layer_split ? L.layer_split->last : std::nullopt;
  if (!num_layers) {
    if ((first && *first < 1) || (last && *last < 1))
      out.push_back({"layout.layer_split", "stages need at least one layer"});
    return;
  }
  StageSplit s = split_layers(*num_layers, L.pp, first, last);
  if (!s.error.empty()) out.push_back({"layout.layer_split", fmt::format("{} ({})", s.error, r.model)});
}

}  // namespace

std::optional<int64_t> known_model_layers(std::string_view model) {
  if (model == "Inkling-Small") return 42;
  return std::nullopt;
}

std::vector<Problem> validate_recipe(const Recipe& r, const ValidateOptions& o) {
  std::vector<Problem> out;
  for (const UnknownKey& k : unknown_recipe_keys(r))
    out.push_back({k.path, fmt::format("unknown key (did you mean '{}'?); quill would ignore it", k.nearest)});
  if (r.schema_version != 1)
    out.push_back({"schema_version", fmt::format("must be 1, got {}", r.schema_version)});
  if (r.model.empty()) out.push_back({"model", "missing"});
  need_positive(out, "gpu.count", r.gpu.count);
  const RecipeLayout& L = r.layout;
  for (auto [name, v] : {std::pair{"layout.tp", L.tp}, {"layout.pp", L.pp}, {"layout.vpp", L.vpp}, {"layout.cp", L.cp},
                         {"layout.ep", L.ep}, {"layout.etp", L.etp}, {"layout.dp", L.dp},
                         {"layout.rows_per_microbatch", L.rows_per_microbatch}})
    need_positive(out, name, v);
  bool sizes_ok = L.tp > 0 && L.pp > 0 && L.vpp > 0 && L.cp > 0 && L.ep > 0 && L.etp > 0 && L.dp > 0 &&
                  L.rows_per_microbatch > 0;
  if (sizes_ok) {
    if (L.world() != r.gpu.count)
      out.push_back({"layout", fmt::format("world tp x pp x cp x dp = {} x {} x {} x {} = {} differs from gpu.count {}",
                                           L.tp, L.pp, L.cp, L.dp, L.world(), r.gpu.count)});
    int64_t dense = L.tp * L.cp * L.dp;
    if (dense % (L.ep * L.etp) != 0)
      out.push_back({"layout.ep", fmt::format("ep x etp = {} x {} = {} does not divide tp x cp x dp = {}", L.ep, L.etp,
                                              L.ep * L.etp, dense)});
    if (L.vpp > 1 && L.pp == 1) out.push_back({"layout.vpp", fmt::format("vpp {} needs pp > 1", L.vpp)});
    if (r.workload.global_batch % (L.dp * L.rows_per_microbatch) != 0)
      out.push_back({"workload.global_batch",
                     fmt::format("{} is not a multiple of dp x rows_per_microbatch = {} x {} = {}",
                                 r.workload.global_batch, L.dp, L.rows_per_microbatch, L.dp * L.rows_per_microbatch)});
    check_layer_split(r, o.num_layers, out);
  }
  need_positive(out, "workload.row_tokens", r.workload.row_tokens);
  need_positive(out, "workload.global_batch", r.workload.global_batch);
  if (r.workload.precision != "bf16" && r.workload.precision != "fp16" && r.workload.precision != "fp32")
    out.push_back({"workload.precision", fmt::format("unknown precision '{}' (bf16, fp16 or fp32)", r.workload.precision)});
  if (L.dispatcher && *L.dispatcher != "alltoall" && *L.dispatcher != "allgather" && *L.dispatcher != "flex" &&
      *L.dispatcher != "alltoall_seq")
    out.push_back({"layout.dispatcher", fmt::format("unknown dispatcher '{}' (alltoall, allgather, flex)", *L.dispatcher)});
  if (L.offload && L.offload->optimizer_fraction &&
      (*L.offload->optimizer_fraction < 0 || *L.offload->optimizer_fraction > 1))
    out.push_back({"layout.offload.optimizer_fraction",
                   fmt::format("{} is not a fraction in [0, 1]", *L.offload->optimizer_fraction)});
  if (L.max_tokens_per_gpu && *L.max_tokens_per_gpu < 1)
    out.push_back({"layout.max_tokens_per_gpu", fmt::format("must be at least 1, got {}", *L.max_tokens_per_gpu)});
  std::optional<int64_t> steps = r.result && r.result->steps_per_run ? r.result->steps_per_run : o.run_steps;
  if (steps && *steps < 1) out.push_back({"result.steps_per_run", fmt::format("must be at least 1, got {}", *steps)});
  check_window(r, steps, out);
  if (r.result && r.result->mfu && (*r.result->mfu < 0 || *r.result->mfu > 1))
    out.push_back({"result.mfu", fmt::format("{} is not a fraction in [0, 1] (mfu is a fraction, not a percentage)",
                                             *r.result->mfu)});
  return out;
}

VarMap recipe_variables(const Recipe& recipe, const VarMap& extra) {
  VarMap vars = extra;
  for (const auto& [k, v] : recipe.env) vars[k] = v;
  return vars;
}

RecipeCheck check_recipe(const Recipe& recipe, const CheckOptions& o) {
  RecipeCheck c;
  c.num_layers = o.num_layers ? o.num_layers : known_model_layers(recipe.model);
  c.flags = parse_run_flags(recipe.run, recipe_variables(recipe, o.extra_env), o.set);
  c.definition = run_definition(c.flags);
  c.disagreements = compare_layout_with_flags(recipe, c.flags, c.definition, c.num_layers);
  c.problems = validate_recipe(recipe, {c.num_layers, c.definition.train_steps});

  auto& w = c.warnings;
  if (!c.num_layers)
    w.push_back(fmt::format("model: the layer count of '{}' is not known; the layer split is not checked (give --layers)",
                            recipe.model));
  if (!c.flags.found) {
    if (!recipe.run.empty()) w.push_back("run: no training command with --flags found");
    return c;
  }
  for (const Disagreement& d : c.disagreements)
    w.push_back(fmt::format("{}: the recipe says {}, the flags ({}) say {}; {}", d.field, d.recipe_value, d.flags,
                            d.flag_value, d.note));
  for (const std::string& f : c.flags.unknown)
    w.push_back(fmt::format("run: flag {} is not understood (class unknown)", f));
  for (const UnexpandedArray& a : c.flags.unexpanded)
    w.push_back(fmt::format("run: \"${{{}[@]}}\" is not expanded: its words come from {} (give them with --set {}='...')",
                            a.name, a.source, a.name));
  for (const std::string& v : c.flags.unresolved)
    w.push_back(fmt::format("run: {} has no value here (give it with --set {}=...)", v, v));
  for (const std::string& p : c.flags.problems) w.push_back("run: " + p);
  for (const std::string& p : c.definition.problems) w.push_back("run: " + p);
  return c;
}

}  // namespace quill
