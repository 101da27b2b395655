// An OpenRecipes recipe (recipes-and-measurement.md §1) as a typed model. The seed recipe is the
// reference sample: every field it has is typed here, with the seed's names, units and meaning
// (`mfu` a fraction, `step_time_cv_percent` a percentage). The document as read is kept beside the
// typed fields, so fields the model does not know, and the key order, survive a write: reading what
// write_recipe wrote gives an equal Recipe.
//
// Null or absent values are std::nullopt. Writing updates the typed fields in place in the document
// (a field whose value did not change keeps its original spelling, such as a quoted '13.0') and
// appends new keys at the end of their section; a Recipe built from scratch (no document) is
// written with every field, nulls included, in the seed's order.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace quill {

// A YAML value the model keeps untyped (a list of patches, the `stack` versions). Equality is
// structural, not node identity.
struct RawYaml {
  YAML::Node node;
  bool operator==(const RawYaml& other) const;
};

// An ordered NAME -> value map with scalar values (the `env` section).
using StringMap = std::vector<std::pair<std::string, std::string>>;

struct Gpu {
  std::string type;
  std::optional<int64_t> memory_gb;
  int64_t count = 0;
  std::optional<int64_t> per_node;
  std::optional<std::string> instance;
  bool operator==(const Gpu&) const = default;
  template <class V> void visit(V&& v) {
    v("type", type); v("memory_gb", memory_gb); v("count", count); v("per_node", per_node); v("instance", instance);
  }
};

struct Author {
  std::optional<std::string> name, url;
  bool operator==(const Author&) const = default;
  template <class V> void visit(V&& v) { v("name", name); v("url", url); }
};

struct DatasetBuild {
  std::optional<std::string> name, tokenizer, loss_mask;
  std::optional<int64_t> rows, row_tokens, padding_tokens, seed;
  std::optional<std::string> packing, template_kwargs;
  std::optional<double> supervised_token_ratio;
  std::optional<std::string> parquet_sha256;
  std::optional<int64_t> parquet_bytes;
  std::optional<std::string> builder;
  bool operator==(const DatasetBuild&) const = default;
  template <class V> void visit(V&& v) {
    v("name", name); v("tokenizer", tokenizer); v("loss_mask", loss_mask); v("rows", rows); v("row_tokens", row_tokens);
    v("padding_tokens", padding_tokens); v("seed", seed); v("packing", packing); v("template_kwargs", template_kwargs);
    v("supervised_token_ratio", supervised_token_ratio); v("parquet_sha256", parquet_sha256);
    v("parquet_bytes", parquet_bytes); v("builder", builder);
  }
};

struct Dataset {
  std::optional<std::string> name, source, revision, license, rows_sha256;
  std::optional<DatasetBuild> build;
  bool operator==(const Dataset&) const = default;
  template <class V> void visit(V&& v) {
    v("name", name); v("source", source); v("revision", revision); v("license", license);
    v("rows_sha256", rows_sha256); v("build", build);
  }
};

struct Workload {
  int64_t row_tokens = 0;
  std::optional<std::string> rows;  // what a row is ("SFT conversations")
  int64_t global_batch = 0;         // rows per optimizer step
  std::string precision;            // bf16 | fp16 | fp32
  std::optional<Dataset> dataset;
  bool operator==(const Workload&) const = default;
  template <class V> void visit(V&& v) {
    v("row_tokens", row_tokens); v("rows", rows); v("global_batch", global_batch); v("precision", precision);
    v("dataset", dataset);
  }
};

struct LayerSplit {
  std::optional<int64_t> first, last;  // layers of the first / last pipeline stage
  bool operator==(const LayerSplit&) const = default;
  template <class V> void visit(V&& v) { v("first", first); v("last", last); }
};

// Activation recompute. Written as a scalar ("full", "selective") when only the granularity is
// set, as a map {granularity, method, num_layers} otherwise.
struct Recompute {
  std::string granularity;
  std::optional<std::string> method;
  std::optional<int64_t> num_layers;
  bool operator==(const Recompute&) const = default;
};

struct Offload {
  std::optional<double> optimizer_fraction;  // share of the optimizer state kept on the CPU
  std::optional<bool> overlap_d2h_h2d;
  bool operator==(const Offload&) const = default;
  template <class V> void visit(V&& v) { v("optimizer_fraction", optimizer_fraction); v("overlap_d2h_h2d", overlap_d2h_h2d); }
};

struct RecipeLayout {  // the recipe's `layout` block as written (parallel/layout_spec.h: as quill runs it)
  std::optional<std::string> label, summary, highlights;
  int64_t tp = 1, pp = 1, vpp = 1, cp = 1, ep = 1, etp = 1, dp = 1;
  bool sequence_parallel = false;
  std::optional<LayerSplit> layer_split;
  std::optional<int64_t> max_tokens_per_gpu;
  int64_t rows_per_microbatch = 1;
  std::optional<Recompute> recompute;
  std::optional<Offload> offload;
  std::optional<std::string> dispatcher;
  bool operator==(const RecipeLayout&) const = default;
  int64_t world() const { return tp * pp * cp * dp; }
  template <class V> void visit(V&& v) {
    v("label", label); v("summary", summary); v("highlights", highlights);
    v("tp", tp); v("pp", pp); v("vpp", vpp); v("cp", cp); v("ep", ep); v("etp", etp); v("dp", dp);
    v("sequence_parallel", sequence_parallel); v("layer_split", layer_split);
    v("max_tokens_per_gpu", max_tokens_per_gpu); v("rows_per_microbatch", rows_per_microbatch);
    v("recompute", recompute); v("offload", offload); v("dispatcher", dispatcher);
  }
};

struct ActiveParams {
  std::optional<int64_t> count;
  std::optional<std::string> source, revision;
  bool operator==(const ActiveParams&) const = default;
  template <class V> void visit(V&& v) { v("count", count); v("source", source); v("revision", revision); }
};

struct Result {
  std::optional<double> tokens_per_s_per_gpu, usd_per_million_tokens;
  std::optional<double> usd_per_gpu_hour;               // the price usd_per_million_tokens was computed with
  std::optional<std::string> usd_per_gpu_hour_source;   // where that price came from
  std::optional<double> step_time_cv_percent, mfu;
  std::optional<std::string> mfu_note;
  std::optional<ActiveParams> active_params;
  std::optional<std::string> measured;  // a date, YYYY-MM-DD
  std::optional<int64_t> steps_per_run;
  std::optional<std::vector<int64_t>> window;  // [first, last], 0-based, inclusive
  std::optional<int64_t> window_tokens, runs;
  std::optional<bool> profiler;
  std::optional<double> gpu_hours;
  std::optional<std::string> gpu_hours_note;
  bool operator==(const Result&) const = default;
  template <class V> void visit(V&& v) {
    v("tokens_per_s_per_gpu", tokens_per_s_per_gpu); v("usd_per_million_tokens", usd_per_million_tokens);
    v("usd_per_gpu_hour", usd_per_gpu_hour); v("usd_per_gpu_hour_source", usd_per_gpu_hour_source);
    v("step_time_cv_percent", step_time_cv_percent); v("mfu", mfu); v("mfu_note", mfu_note);
    v("active_params", active_params); v("measured", measured); v("steps_per_run", steps_per_run);
    v("window", window); v("window_tokens", window_tokens); v("runs", runs); v("profiler", profiler);
    v("gpu_hours", gpu_hours); v("gpu_hours_note", gpu_hours_note);
  }
};

struct ConvergenceRecord {
  std::optional<int64_t> steps;
  std::optional<std::string> result;
  std::optional<double> correlation, final_loss_difference;
  std::optional<int64_t> pointwise_failures;
  std::optional<std::string> note;
  bool operator==(const ConvergenceRecord&) const = default;
  template <class V> void visit(V&& v) {
    v("steps", steps); v("result", result); v("correlation", correlation);
    v("final_loss_difference", final_loss_difference); v("pointwise_failures", pointwise_failures); v("note", note);
  }
};

struct Correctness {
  std::optional<std::string> result, summary, reference, configuration;
  std::optional<RawYaml> component_tests;
  std::optional<ConvergenceRecord> convergence;
  std::optional<std::string> rules;
  bool operator==(const Correctness&) const = default;
  template <class V> void visit(V&& v) {
    v("result", result); v("summary", summary); v("reference", reference); v("configuration", configuration);
    v("component_tests", component_tests); v("convergence", convergence); v("rules", rules);
  }
};

// The typed fields, in the seed's order.
struct RecipeFields {
  int64_t schema_version = 1;
  std::string model;
  Gpu gpu;
  std::optional<Author> author;
  std::optional<std::string> status;
  std::optional<RawYaml> stack;  // versions: strings the project does not interpret
  Workload workload;
  RecipeLayout layout;
  std::optional<Result> result;
  std::optional<Correctness> correctness;
  StringMap env;
  std::optional<RawYaml> patches;
  std::string run;    // the launch script
  std::string notes;
  bool operator==(const RecipeFields&) const = default;
  template <class V> void visit(V&& v) {
    v("schema_version", schema_version); v("model", model); v("gpu", gpu); v("author", author); v("status", status);
    v("stack", stack); v("workload", workload); v("layout", layout); v("result", result);
    v("correctness", correctness); v("env", env); v("patches", patches); v("run", run); v("notes", notes);
  }
};

struct Recipe : RecipeFields {
  YAML::Node doc;               // the document as read (unknown fields, key order); null when built from scratch
  std::string leading_comment;  // the '#' lines before the first key, written back unchanged
  std::string source;           // where it was read from (for messages)
};

// Equal typed fields and equal documents once the typed fields are merged in (unknown fields
// and key order included). The leading comment and source are not part of the model.
bool operator==(const Recipe& a, const Recipe& b);

// Reads a recipe; bad YAML or a field of the wrong type is a quill::Error naming the file and field.
Recipe read_recipe(const std::string& path);
Recipe parse_recipe(const std::string& text, const std::string& name = "<recipe>");

// The document with the typed fields merged in, and its YAML text.
YAML::Node recipe_to_node(const Recipe& recipe);
std::string recipe_to_yaml(const Recipe& recipe);
// Writes to a temporary name and renames it onto `path`.
void write_recipe(const std::string& path, const Recipe& recipe);

}  // namespace quill
