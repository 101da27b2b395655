// Reads Inkling text configs in either schema (see config.h), checks them, writes transformers'
// schema, and counts parameters as docs/model.md §2 does.
#include "model/config.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>
#include <map>
#include <set>

#include "base/error.h"
#include "base/file_util.h"
#include "model/config_keys.h"

namespace quill {
namespace {

using nlohmann::json;

// One text-config object, the prefix that names its keys in messages ("text_config." or ""), and
// transformers' defaults (config_keys.h) for every key it omits.
class Fields {
 public:
  Fields(const json& object, std::string source, std::string prefix)
      : obj_(object), source_(std::move(source)), prefix_(std::move(prefix)) {
    fold_aliases();
  }

  std::string name(const std::string& key) const { return prefix_ + key; }
  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    QUILL_FAIL("{}: {}: {}", source_, name(key), what);
  }

  // Given in the file (under its name or an alias), and not null.
  bool given(const std::string& key) const {
    const json* v = find(key);
    return v != nullptr && !v->is_null();
  }
  // The value: the file's, else transformers' default. A null in the file is the default only where
  // the default is null (transformers' strict dataclass rejects None for the other keys).
  json value(const std::string& key) const {
    const ConfigKey* k = find_config_key(key);
    QUILL_CHECK(k != nullptr, "internal: config key {} is not in the key table", key);
    const json fallback = json::parse(k->default_json);
    const json* v = find(key);
    if (v == nullptr) return fallback;
    if (v->is_null() && !fallback.is_null())
      fail(key, fmt::format("null is not a value of it (omit the key for transformers' default, {})", fallback.dump()));
    return *v;
  }

  int64_t to_int(const std::string& key, const json& v) const {
    if (v.is_number_unsigned()) {
      if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) fail(key, "too large");
      return static_cast<int64_t>(v.get<uint64_t>());
    }
    if (!v.is_number_integer()) fail(key, fmt::format("must be an integer, got {}", v.dump()));
    return v.get<int64_t>();
  }
  int64_t integer(const std::string& key) const { return to_int(key, value(key)); }
  double number(const std::string& key) const {
    const json v = value(key);
    if (!v.is_number()) fail(key, fmt::format("must be a number, got {}", v.dump()));
    return v.get<double>();
  }
  json list(const std::string& key) const {
    const json v = value(key);
    if (!v.is_array()) fail(key, fmt::format("must be a list, got {}", v.dump()));
    return v;
  }

  // Every key is one quill knows; a kOnly key holds the one value quill implements.
  void check_keys() const {
    for (const auto& [key, v] : obj_.items()) {
      if (is_alias(key)) continue;
      const ConfigKey* k = find_config_key(key);
      if (k == nullptr)
        fail(key, "is not a key of transformers' InklingTextConfig (5.17.0) nor of the release's text_config; quill "
                  "does not know what it means (docs/config.md lists the keys)");
      if (k->use != KeyUse::kOnly || v.is_null()) continue;
      const json expected = json::parse(k->default_json);
      if (v != expected)
        fail(key, fmt::format("{} is not supported: quill implements only {} ({})", v.dump(), expected.dump(), k->note));
    }
  }

 private:
  static bool is_alias(const std::string& key) {
    for (const KeyAlias& a : config_key_aliases())
      if (a.alias == key) return true;
    return false;
  }
  // transformers' attribute_map: `sconv_kernel_size` sets `conv_kernel_size`. Both given: they must agree.
  void fold_aliases() {
    for (const KeyAlias& a : config_key_aliases()) {
      const std::string alias(a.alias), key(a.key);
      auto it = obj_.find(alias);
      if (it == obj_.end()) continue;
      auto canonical = obj_.find(key);
      if (canonical != obj_.end() && *canonical != *it)
        fail(key, fmt::format("{} disagrees with {} = {}", canonical->dump(), name(alias), it->dump()));
      aliased_[key] = &*it;
    }
  }
  const json* find(const std::string& key) const {
    auto it = obj_.find(key);
    if (it != obj_.end()) return &*it;
    auto a = aliased_.find(key);
    return a == aliased_.end() ? nullptr : a->second;
  }

  const json& obj_;
  std::string source_;
  std::string prefix_;
  std::map<std::string, const json*> aliased_;
};

// Per-layer sliding flags: `layer_types`, else `local_layer_ids`, else transformers' rule (every layer i
// with (i + 1) % 6 != 0 slides). quill also refuses the two keys disagreeing, which transformers ignores.
std::vector<bool> read_layer_is_local(const Fields& f, int64_t num_layers) {
  std::optional<std::vector<bool>> from_types, from_ids;
  if (f.given("layer_types")) {
    const json list = f.list("layer_types");
    if (static_cast<int64_t>(list.size()) != num_layers)
      f.fail("layer_types", fmt::format("has {} entries, num_hidden_layers is {}", list.size(), num_layers));
    from_types.emplace();
    for (size_t i = 0; i < list.size(); ++i) {
      if (list[i] == "hybrid_sliding") from_types->push_back(true);
      else if (list[i] == "hybrid") from_types->push_back(false);
      else f.fail("layer_types", fmt::format("entry {} is {}, expected \"hybrid_sliding\" or \"hybrid\"", i,
                                             list[i].dump()));
    }
  }
  if (f.given("local_layer_ids")) {
    const json list = f.list("local_layer_ids");
    from_ids.emplace(static_cast<size_t>(num_layers), false);
    for (const json& v : list) {
      int64_t id = f.to_int("local_layer_ids", v);
      if (id < 0 || id >= num_layers)
        f.fail("local_layer_ids", fmt::format("layer {} is outside [0, {})", id, num_layers));
      if ((*from_ids)[static_cast<size_t>(id)]) f.fail("local_layer_ids", fmt::format("layer {} is listed twice", id));
      (*from_ids)[static_cast<size_t>(id)] = true;
    }
  }
  if (from_types && from_ids && *from_types != *from_ids)
    f.fail("layer_types", fmt::format("disagrees with {}", f.name("local_layer_ids")));
  if (from_types) return *from_types;
  if (from_ids) return *from_ids;
  std::vector<bool> local;
  for (int64_t i = 0; i < num_layers; ++i) local.push_back((i + 1) % 6 != 0);
  return local;
}

// Per-layer MoE flags: `mlp_layer_types`, else `dense_mlp_idx` (default 0: every layer sparse).
std::vector<bool> read_layer_is_moe(const Fields& f, int64_t num_layers) {
  std::optional<std::vector<bool>> from_types;
  if (f.given("mlp_layer_types")) {
    const json list = f.list("mlp_layer_types");
    if (static_cast<int64_t>(list.size()) != num_layers)
      f.fail("mlp_layer_types", fmt::format("has {} entries, num_hidden_layers is {}", list.size(), num_layers));
    from_types.emplace();
    for (size_t i = 0; i < list.size(); ++i) {
      if (list[i] == "sparse") from_types->push_back(true);
      else if (list[i] == "dense") from_types->push_back(false);
      else f.fail("mlp_layer_types", fmt::format("entry {} is {}, expected \"dense\" or \"sparse\"", i,
                                                 list[i].dump()));
    }
  }
  const int64_t idx = f.integer("dense_mlp_idx");
  if (idx < 0 || idx > num_layers)
    f.fail("dense_mlp_idx", fmt::format("{} is outside [0, num_hidden_layers = {}]", idx, num_layers));
  std::vector<bool> from_idx;
  for (int64_t i = 0; i < num_layers; ++i) from_idx.push_back(i >= idx);
  if (from_types && f.given("dense_mlp_idx") && *from_types != from_idx)
    f.fail("mlp_layer_types", fmt::format("disagrees with {}", f.name("dense_mlp_idx")));
  return from_types ? *from_types : from_idx;
}

// The two MLP widths. transformers: `moe_intermediate_size` is the expert width, `intermediate_size`
// (or `dense_intermediate_size`, which its __post_init__ copies onto it) the dense width. The release
// writes the expert width as `intermediate_size` next to `dense_intermediate_size` and no
// `moe_intermediate_size`; transformers would build 3072-wide experts from that (the schema trap of
// docs/model.md), quill reads it as the release means it, which the checkpoint's tensor shapes confirm.
void read_widths(const Fields& f, InklingConfig& c) {
  const bool release = !f.given("moe_intermediate_size") && f.given("dense_intermediate_size") &&
                       f.given("intermediate_size");
  if (release) {
    c.moe_intermediate_size = f.integer("intermediate_size");
    c.dense_intermediate_size = f.integer("dense_intermediate_size");
    return;
  }
  c.moe_intermediate_size = f.integer("moe_intermediate_size");
  c.dense_intermediate_size =
      f.given("dense_intermediate_size") ? f.integer("dense_intermediate_size") : f.integer("intermediate_size");
}

InklingConfig read_text_config(const Fields& f, const std::string& source) {
  f.check_keys();
  InklingConfig c;
  c.source = source;
  c.hidden_size = f.integer("hidden_size");
  c.num_layers = f.integer("num_hidden_layers");
  c.vocab_size = f.integer("vocab_size");
  // transformers: None means the head is not padded; it slices the logits only to a smaller value.
  c.unpadded_vocab_size = f.given("unpadded_vocab_size") ? f.integer("unpadded_vocab_size") : c.vocab_size;
  c.num_heads = f.integer("num_attention_heads");
  c.num_kv_heads = f.integer("num_key_value_heads");
  c.head_dim = f.integer("head_dim");
  c.swa_num_heads = f.integer("swa_num_attention_heads");
  c.swa_num_kv_heads = f.integer("swa_num_key_value_heads");
  c.swa_head_dim = f.integer("swa_head_dim");
  c.d_rel = f.integer("d_rel");
  c.rel_extent = f.integer("rel_extent");
  c.sliding_window = f.integer("sliding_window_size");
  c.log_scaling = f.given("log_scaling_n_floor");
  c.log_scaling_alpha = f.number("log_scaling_alpha");
  if (c.log_scaling) c.log_scaling_n_floor = f.number("log_scaling_n_floor");
  c.rms_norm_eps = f.number("rms_norm_eps");
  c.conv_kernel_size = f.integer("conv_kernel_size");
  read_widths(f, c);
  c.n_routed_experts = f.integer("n_routed_experts");
  c.num_experts_per_tok = f.integer("num_experts_per_tok");
  c.n_shared_experts = f.integer("n_shared_experts");
  c.route_scale = f.number("route_scale");
  c.logits_mup_width_multiplier = f.number("logits_mup_width_multiplier");
  c.initializer_range = f.number("initializer_range");

  if (c.num_layers <= 0) f.fail("num_hidden_layers", fmt::format("must be positive, got {}", c.num_layers));
  c.layer_is_local = read_layer_is_local(f, c.num_layers);
  c.layer_is_moe = read_layer_is_moe(f, c.num_layers);
  return c;
}

std::string strip_json_exception_id(const std::string& what) {
  // "[json.exception.parse_error.101] parse error at line 3, column 5: ..." -> "parse error at ..."
  if (!what.empty() && what[0] == '[') {
    size_t end = what.find("] ");
    if (end != std::string::npos) return what.substr(end + 2);
  }
  return what;
}

}  // namespace

InklingConfig parse_inkling_config(const std::string& json_text, const std::string& source) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::parse_error& e) {
    QUILL_FAIL("{}: malformed JSON: {}", source, strip_json_exception_id(e.what()));
  }
  if (!root.is_object()) QUILL_FAIL("{}: expected a JSON object at the top level, got {}", source, root.type_name());

  // A multimodal InklingConfig (model_type inkling_mm_model, or a text_config key) holds the text
  // config under text_config; transformers builds InklingTextConfig() when it is absent or null.
  InklingConfig config;
  auto model_type = root.find("model_type");
  const bool multimodal = root.contains("text_config") || (model_type != root.end() && *model_type == "inkling_mm_model");
  if (multimodal) {
    if (model_type != root.end() && *model_type != "inkling_mm_model")
      QUILL_FAIL("{}: model_type: {} is not supported next to text_config: quill reads \"inkling_mm_model\" (a "
                 "multimodal config) or \"inkling_text\" (a text config alone)", source, model_type->dump());
    auto tie = root.find("tie_word_embeddings");
    if (tie != root.end() && !tie->is_null() && *tie != false)
      QUILL_FAIL("{}: tie_word_embeddings: {} is not supported: quill implements only false (separate embed and "
                 "unembed tables; transformers' Inkling models never tie either)", source, tie->dump());
    static const json kEmpty = json::object();
    auto it = root.find("text_config");
    const json* text = &kEmpty;
    if (it != root.end() && !it->is_null()) {
      if (!it->is_object()) QUILL_FAIL("{}: text_config: must be an object, got {}", source, it->type_name());
      text = &*it;
    }
    config = read_text_config(Fields(*text, source, "text_config."), source);
  } else {
    config = read_text_config(Fields(root, source, ""), source);
  }
  validate_config(config);
  return config;
}

InklingConfig load_inkling_config(const std::string& path) {
  std::string file = path;
  if (path_exists(path + "/config.json")) file = path + "/config.json";
  if (!path_exists(file)) QUILL_FAIL("{}: no such file (expected a config.json or a directory holding one)", path);
  // A directory without one would otherwise be read as an empty file ("malformed JSON").
  if (std::filesystem::is_directory(file)) QUILL_FAIL("{}: no config.json in this directory", path);
  return parse_inkling_config(read_file(file), file);
}

void validate_config(const InklingConfig& c) {
  auto check = [&](bool ok, const char* field, const std::string& what) {
    if (!ok) QUILL_FAIL("{}: {}: {}", c.source, field, what);
  };
  auto positive = [&](int64_t v, const char* field) { check(v > 0, field, fmt::format("must be positive, got {}", v)); };
  auto positive_real = [&](double v, const char* field) {
    check(std::isfinite(v) && v > 0, field, fmt::format("must be a positive finite number, got {}", v));
  };

  positive(c.hidden_size, "hidden_size");
  positive(c.num_layers, "num_hidden_layers");
  positive(c.vocab_size, "vocab_size");
  positive(c.unpadded_vocab_size, "unpadded_vocab_size");
  check(c.unpadded_vocab_size <= c.vocab_size, "unpadded_vocab_size",
        fmt::format("{} exceeds vocab_size {}", c.unpadded_vocab_size, c.vocab_size));
  positive(c.num_heads, "num_attention_heads");
  positive(c.num_kv_heads, "num_key_value_heads");
  positive(c.head_dim, "head_dim");
  positive(c.swa_num_heads, "swa_num_attention_heads");
  positive(c.swa_num_kv_heads, "swa_num_key_value_heads");
  positive(c.swa_head_dim, "swa_head_dim");
  check(c.num_heads % c.num_kv_heads == 0, "num_attention_heads",
        fmt::format("{} is not a multiple of num_key_value_heads {}", c.num_heads, c.num_kv_heads));
  check(c.swa_num_heads % c.swa_num_kv_heads == 0, "swa_num_attention_heads",
        fmt::format("{} is not a multiple of swa_num_key_value_heads {}", c.swa_num_heads, c.swa_num_kv_heads));
  positive(c.d_rel, "d_rel");
  positive(c.rel_extent, "rel_extent");
  positive(c.sliding_window, "sliding_window_size");
  if (c.log_scaling) positive_real(c.log_scaling_n_floor, "log_scaling_n_floor");
  check(std::isfinite(c.log_scaling_alpha), "log_scaling_alpha", fmt::format("must be finite, got {}", c.log_scaling_alpha));
  positive_real(c.initializer_range, "initializer_range");
  positive_real(c.rms_norm_eps, "rms_norm_eps");
  positive(c.conv_kernel_size, "conv_kernel_size");
  positive(c.dense_intermediate_size, "intermediate_size (dense width)");
  positive(c.moe_intermediate_size, "moe_intermediate_size");
  positive(c.n_routed_experts, "n_routed_experts");
  check(c.num_experts_per_tok > 0 && c.num_experts_per_tok <= c.n_routed_experts, "num_experts_per_tok",
        fmt::format("{} is outside [1, n_routed_experts = {}]", c.num_experts_per_tok, c.n_routed_experts));
  check(c.n_shared_experts >= 0, "n_shared_experts", fmt::format("must not be negative, got {}", c.n_shared_experts));
  positive_real(c.route_scale, "route_scale");
  positive_real(c.logits_mup_width_multiplier, "logits_mup_width_multiplier");
  check(static_cast<int64_t>(c.layer_is_local.size()) == c.num_layers, "layer_types",
        fmt::format("has {} entries, num_hidden_layers is {}", c.layer_is_local.size(), c.num_layers));
  check(static_cast<int64_t>(c.layer_is_moe.size()) == c.num_layers, "mlp_layer_types",
        fmt::format("has {} entries, num_hidden_layers is {}", c.layer_is_moe.size(), c.num_layers));
}

std::string config_to_hf_json(const InklingConfig& c) {
  using ordered = nlohmann::ordered_json;
  ordered j;
  j["architectures"] = {"InklingForCausalLM"};
  j["model_type"] = "inkling_text";
  j["vocab_size"] = c.vocab_size;
  j["unpadded_vocab_size"] = c.unpadded_vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["head_dim"] = c.head_dim;
  j["swa_num_attention_heads"] = c.swa_num_heads;
  j["swa_num_key_value_heads"] = c.swa_num_kv_heads;
  j["swa_head_dim"] = c.swa_head_dim;
  j["sliding_window_size"] = c.sliding_window;
  j["d_rel"] = c.d_rel;
  j["rel_extent"] = c.rel_extent;
  if (!c.log_scaling) {
    j["log_scaling_n_floor"] = nullptr;
  } else if (c.log_scaling_n_floor == std::floor(c.log_scaling_n_floor) && std::abs(c.log_scaling_n_floor) < 1e15) {
    j["log_scaling_n_floor"] = static_cast<int64_t>(c.log_scaling_n_floor);  // transformers types it int
  } else {
    j["log_scaling_n_floor"] = c.log_scaling_n_floor;
  }
  j["log_scaling_alpha"] = c.log_scaling_alpha;
  ordered layer_types = ordered::array(), mlp_layer_types = ordered::array();
  for (int64_t i = 0; i < c.num_layers; ++i) {
    layer_types.push_back(c.is_local(i) ? "hybrid_sliding" : "hybrid");
    mlp_layer_types.push_back(c.is_moe(i) ? "sparse" : "dense");
  }
  j["layer_types"] = layer_types;
  j["mlp_layer_types"] = mlp_layer_types;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["conv_kernel_size"] = c.conv_kernel_size;
  j["intermediate_size"] = c.dense_intermediate_size;
  j["moe_intermediate_size"] = c.moe_intermediate_size;
  j["n_routed_experts"] = c.n_routed_experts;
  j["num_experts_per_tok"] = c.num_experts_per_tok;
  j["n_shared_experts"] = c.n_shared_experts;
  j["route_scale"] = c.route_scale;
  j["logits_mup_width_multiplier"] = c.logits_mup_width_multiplier;
  j["initializer_range"] = c.initializer_range;
  j["hidden_act"] = "silu";
  j["torch_dtype"] = "float32";
  j["tie_word_embeddings"] = false;
  j["pad_token_id"] = nullptr;
  return j.dump(2) + "\n";
}

namespace {

// Counts in long double, so that a config of absurd dimensions is reported instead of wrapping around.
using Wide = long double;  // exact for integers below 2^64, and never wraps

// The parts of the model by size, each with the config fields its shape is made of.
struct Part {
  std::string what;
  Wide params = 0;
  std::vector<std::pair<std::string, int64_t>> fields;
};

std::vector<Part> model_parts(const InklingConfig& c) {
  const Wide h = c.hidden_size, k = c.conv_kernel_size;
  int64_t moe_layers = 0, dense_layers = 0;
  for (int64_t i = 0; i < c.num_layers; ++i) (c.is_moe(i) ? moe_layers : dense_layers)++;
  Wide attention = 0;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const Wide heads = c.heads(i), kv = c.kv_heads(i), hd = c.layer_head_dim(i);
    attention += 2 * heads * hd * h + 2 * kv * hd * h + heads * c.d_rel * h + 2 * kv * hd * k + 2 * h * k +
                 Wide(c.d_rel) * c.extent(i) + 2 * h + 2 * hd;
  }
  const Wide experts = Wide(c.n_routed_experts + c.n_shared_experts) * 3 * c.moe_intermediate_size * h;
  std::vector<Part> parts;
  parts.push_back({"the embedding and unembedding tables", 2 * Wide(c.vocab_size) * h + 2 * h,
                   {{"vocab_size", c.vocab_size}, {"hidden_size", c.hidden_size}}});
  parts.push_back({"the attention of all layers", attention,
                   {{"num_hidden_layers", c.num_layers}, {"num_attention_heads", c.num_heads},
                    {"head_dim", c.head_dim}, {"swa_num_attention_heads", c.swa_num_heads},
                    {"swa_head_dim", c.swa_head_dim}, {"d_rel", c.d_rel}, {"rel_extent", c.rel_extent},
                    {"sliding_window_size", c.sliding_window}, {"conv_kernel_size", c.conv_kernel_size},
                    {"hidden_size", c.hidden_size}}});
  parts.push_back({"the experts and routers of the MoE layers",
                   moe_layers * (experts + Wide(c.n_routed_experts + c.n_shared_experts) * h + c.n_routed_experts + 1),
                   {{"num_hidden_layers", c.num_layers}, {"n_routed_experts", c.n_routed_experts},
                    {"moe_intermediate_size", c.moe_intermediate_size}, {"hidden_size", c.hidden_size}}});
  parts.push_back({"the dense MLPs", dense_layers * (3 * Wide(c.dense_intermediate_size) * h + 1),
                   {{"num_hidden_layers", c.num_layers}, {"intermediate_size", c.dense_intermediate_size},
                    {"hidden_size", c.hidden_size}}});
  return parts;
}

std::string describe_fields(const Part& p) {
  std::string s;
  for (const auto& [name, v] : p.fields) s += fmt::format("{}{} {}", s.empty() ? "" : ", ", name, v);
  return s;
}

// The field of a part with the largest value: the one that makes it large.
const std::string& largest_field(const Part& p) {
  size_t best = 0;
  for (size_t i = 1; i < p.fields.size(); ++i)
    if (p.fields[i].second > p.fields[best].second) best = i;
  return p.fields[best].first;
}

const Part& largest_part(const std::vector<Part>& parts) {
  size_t best = 0;
  for (size_t i = 1; i < parts.size(); ++i)
    if (parts[i].params > parts[best].params) best = i;
  return parts[best];
}

std::string bytes_text(long double bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024 && u < 6) bytes /= 1024, ++u;
  return fmt::format("{:.1f} {}", static_cast<double>(bytes), units[u]);
}

constexpr Wide kInt64Max = std::numeric_limits<int64_t>::max();

}  // namespace

ParamCounts count_params(const InklingConfig& c) {
  const std::vector<Part> parts = model_parts(c);
  Wide total = 0;
  for (const Part& p : parts) total += p.params;
  if (total > kInt64Max) {
    const Part& big = largest_part(parts);
    QUILL_FAIL("{}: {}: the model would have more than 2^63 parameters; the largest part is {} ({})", c.source,
               largest_field(big), big.what, describe_fields(big));
  }
  // Active (N): every weight of 2 or more dimensions that one token touches, the LM head once.
  const int64_t h = c.hidden_size, k = c.conv_kernel_size;
  const int64_t expert = 3 * h * c.moe_intermediate_size;
  ParamCounts n;
  n.total = static_cast<int64_t>(total);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const int64_t heads = c.heads(i), kv = c.kv_heads(i), hd = c.layer_head_dim(i);
    n.active += 2 * heads * hd * h + 2 * kv * hd * h + heads * c.d_rel * h  // q, o; k, v; r
                + 2 * kv * hd * k + 2 * h * k                               // the four short convolutions
                + c.d_rel * c.extent(i);                                    // relative-bias table
    if (c.is_moe(i)) {
      n.active += (c.n_routed_experts + c.n_shared_experts) * h + (c.num_experts_per_tok + c.n_shared_experts) * expert;
      n.buffers += c.n_routed_experts;
    } else {
      n.active += 3 * h * c.dense_intermediate_size;
    }
  }
  n.active += c.vocab_size * h;  // LM head; the input embedding is a lookup
  return n;
}

void check_params_fit_memory(const InklingConfig& c, uint64_t available_bytes) {
  const std::vector<Part> parts = model_parts(c);
  Wide total = 0;
  for (const Part& p : parts) total += p.params;
  const long double need = static_cast<long double>(total) * kHostBytesPerParam;
  if (need <= static_cast<long double>(available_bytes)) return;
  const Part& big = largest_part(parts);
  QUILL_FAIL("{}: {}: the model's {:.4g} parameters need {} of host memory (fp32 value and gradient of each), more "
             "than this machine's {}; the largest part is {} ({})",
             c.source, largest_field(big), static_cast<double>(total), bytes_text(need),
             bytes_text(static_cast<long double>(available_bytes)), big.what, describe_fields(big));
}

}  // namespace quill
