// Reads Inkling text configs in either schema (see config.h), checks them, writes transformers'
// schema, and counts parameters as inkling-small.md §2 does.
#include "model/config.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <optional>
#include <set>

#include "base/error.h"
#include "base/file_util.h"

namespace quill {
namespace {

using nlohmann::json;

// One JSON object and the prefix that names its keys in messages ("text_config." or "").
class Fields {
 public:
  Fields(const json& object, std::string source, std::string prefix)
      : obj_(object), source_(std::move(source)), prefix_(std::move(prefix)) {}

  std::string name(const std::string& key) const { return prefix_ + key; }
  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    QUILL_FAIL("{}: {}: {}", source_, name(key), what);
  }

  // Present and not null.
  bool has(const std::string& key) const {
    auto it = obj_.find(key);
    return it != obj_.end() && !it->is_null();
  }
  const json& at(const std::string& key) const {
    auto it = obj_.find(key);
    if (it == obj_.end()) fail(key, "missing");
    if (it->is_null()) fail(key, "missing (null)");
    return *it;
  }

  int64_t to_int(const std::string& key, const json& v) const {
    if (v.is_number_unsigned()) {
      if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) fail(key, "too large");
      return static_cast<int64_t>(v.get<uint64_t>());
    }
    if (!v.is_number_integer()) fail(key, fmt::format("must be an integer, got {}", v.dump()));
    return v.get<int64_t>();
  }
  int64_t integer(const std::string& key) const { return to_int(key, at(key)); }
  double number(const std::string& key) const {
    const json& v = at(key);
    if (!v.is_number()) fail(key, fmt::format("must be a number, got {}", v.dump()));
    return v.get<double>();
  }
  std::string string(const std::string& key) const {
    const json& v = at(key);
    if (!v.is_string()) fail(key, fmt::format("must be a string, got {}", v.dump()));
    return v.get<std::string>();
  }
  const json& array(const std::string& key) const {
    const json& v = at(key);
    if (!v.is_array()) fail(key, fmt::format("must be a list, got {}", v.dump()));
    return v;
  }

  // An integer under `key` or under its alias (both present: they must agree).
  int64_t integer_either(const std::string& key, const std::string& alias) const {
    if (has(key) && has(alias) && integer(key) != integer(alias))
      fail(key, fmt::format("{} disagrees with {} = {}", integer(key), name(alias), integer(alias)));
    if (!has(key) && has(alias)) return integer(alias);
    if (!has(key)) fail(key, fmt::format("missing (and no {})", name(alias)));
    return integer(key);
  }

  // Optional keys naming a feature quill implements in one way only: absent, null or `expected`.
  void require_if_present(const std::string& key, const json& expected, const std::string& why) const {
    if (has(key) && obj_.at(key) != expected)
      fail(key, fmt::format("{} is not supported: quill supports only {} ({})", obj_.at(key).dump(),
                            expected.dump(), why));
  }

 private:
  const json& obj_;
  std::string source_;
  std::string prefix_;
};

// Per-layer sliding flags from `layer_types` or `local_layer_ids` (if both are given they must agree).
std::vector<bool> read_layer_is_local(const Fields& f, int64_t num_layers) {
  std::optional<std::vector<bool>> from_types, from_ids;
  if (f.has("layer_types")) {
    const json& list = f.array("layer_types");
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
  if (f.has("local_layer_ids")) {
    const json& list = f.array("local_layer_ids");
    from_ids.emplace(static_cast<size_t>(std::max<int64_t>(num_layers, 0)), false);
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
  f.fail("layer_types", fmt::format("missing (and no {})", f.name("local_layer_ids")));
}

// Per-layer MoE flags from `mlp_layer_types` or `dense_mlp_idx` (layers below it dense).
std::vector<bool> read_layer_is_moe(const Fields& f, int64_t num_layers) {
  std::optional<std::vector<bool>> from_types, from_idx;
  if (f.has("mlp_layer_types")) {
    const json& list = f.array("mlp_layer_types");
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
  if (f.has("dense_mlp_idx")) {
    int64_t idx = f.integer("dense_mlp_idx");
    if (idx < 0 || idx > num_layers)
      f.fail("dense_mlp_idx", fmt::format("{} is outside [0, num_hidden_layers = {}]", idx, num_layers));
    from_idx.emplace();
    for (int64_t i = 0; i < num_layers; ++i) from_idx->push_back(i >= idx);
  }
  if (from_types && from_idx && *from_types != *from_idx)
    f.fail("mlp_layer_types", fmt::format("disagrees with {}", f.name("dense_mlp_idx")));
  if (from_types) return *from_types;
  if (from_idx) return *from_idx;
  f.fail("mlp_layer_types", fmt::format("missing (and no {})", f.name("dense_mlp_idx")));
}

InklingConfig read_text_config(const Fields& f, const std::string& source) {
  InklingConfig c;
  c.source = source;
  f.require_if_present("model_type", "inkling_text", "an Inkling text config");
  f.require_if_present("final_logit_softcapping", nullptr, "no logit softcap");
  f.require_if_present("gate_activation", "sigmoid", "sigmoid router scores");
  f.require_if_present("hidden_act", "silu", "SwiGLU");
  f.require_if_present("use_embed_norm", true, "RMSNorm after the embedding");
  f.require_if_present("q_bias", false, "no projection biases");
  f.require_if_present("o_bias", false, "no projection biases");
  f.require_if_present("use_sconv", true, "the four short convolutions per layer");
  f.require_if_present("shared_expert_sink", true, "router-weighted shared experts");
  f.require_if_present("use_gate_bias", true, "the router's selection bias");
  f.require_if_present("norm_after_topk", true, "weights normalised over the chosen experts");
  f.require_if_present("use_global_scale", true, "learned global scales");

  c.hidden_size = f.integer("hidden_size");
  c.num_layers = f.integer("num_hidden_layers");
  c.vocab_size = f.integer("vocab_size");
  c.unpadded_vocab_size = f.has("unpadded_vocab_size") ? f.integer("unpadded_vocab_size") : c.vocab_size;
  c.num_heads = f.integer("num_attention_heads");
  c.num_kv_heads = f.integer("num_key_value_heads");
  c.head_dim = f.integer("head_dim");
  c.swa_num_heads = f.integer("swa_num_attention_heads");
  c.swa_num_kv_heads = f.integer("swa_num_key_value_heads");
  c.swa_head_dim = f.integer("swa_head_dim");
  c.d_rel = f.integer("d_rel");
  c.rel_extent = f.integer("rel_extent");
  c.sliding_window = f.integer_either("sliding_window_size", "sliding_window");
  c.log_scaling = f.has("log_scaling_n_floor");
  if (c.log_scaling) {
    c.log_scaling_n_floor = f.number("log_scaling_n_floor");
    c.log_scaling_alpha = f.number("log_scaling_alpha");
  }
  c.rms_norm_eps = f.number("rms_norm_eps");
  c.conv_kernel_size = f.integer_either("conv_kernel_size", "sconv_kernel_size");

  // Expert and dense widths: the schema trap of inkling-small.md §1.1.
  if (f.has("moe_intermediate_size")) {  // transformers: intermediate_size is the dense width
    c.moe_intermediate_size = f.integer("moe_intermediate_size");
    c.dense_intermediate_size =
        f.has("dense_intermediate_size") ? f.integer("dense_intermediate_size") : f.integer("intermediate_size");
  } else if (f.has("dense_intermediate_size")) {  // release: intermediate_size is the expert width
    c.moe_intermediate_size = f.integer("intermediate_size");
    c.dense_intermediate_size = f.integer("dense_intermediate_size");
  } else {
    f.fail("moe_intermediate_size",
           fmt::format("missing (and no {}), so the expert width is unknown; transformers' default 3072 is the "
                       "big Inkling's",
                       f.name("dense_intermediate_size")));
  }
  c.n_routed_experts = f.integer("n_routed_experts");
  c.num_experts_per_tok = f.integer("num_experts_per_tok");
  c.n_shared_experts = f.integer("n_shared_experts");
  c.route_scale = f.number("route_scale");
  c.logits_mup_width_multiplier = f.number("logits_mup_width_multiplier");

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

  InklingConfig config;
  Fields top(root, source, "");
  auto it = root.find("text_config");
  if (it != root.end()) {  // a full multimodal config
    top.require_if_present("model_type", "inkling_mm_model", "Inkling models");
    if (!it->is_object()) top.fail("text_config", fmt::format("must be an object, got {}", it->type_name()));
    config = read_text_config(Fields(*it, source, "text_config."), source);
  } else {
    if (top.has("model_type") && root.at("model_type") == "inkling_mm_model") top.fail("text_config", "missing");
    config = read_text_config(top, source);
  }
  validate_config(config);
  return config;
}

InklingConfig load_inkling_config(const std::string& path) {
  std::string file = path;
  if (path_exists(path + "/config.json")) file = path + "/config.json";
  if (!path_exists(file)) QUILL_FAIL("{}: no such file (expected a config.json or a directory holding one)", path);
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
  if (c.log_scaling) {
    positive_real(c.log_scaling_n_floor, "log_scaling_n_floor");
    check(std::isfinite(c.log_scaling_alpha), "log_scaling_alpha",
          fmt::format("must be finite, got {}", c.log_scaling_alpha));
  }
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
  j["hidden_act"] = "silu";
  j["torch_dtype"] = "float32";
  j["tie_word_embeddings"] = false;
  j["pad_token_id"] = nullptr;
  return j.dump(2) + "\n";
}

ParamCounts count_params(const InklingConfig& c) {
  const int64_t h = c.hidden_size, k = c.conv_kernel_size;
  const int64_t expert = 3 * h * c.moe_intermediate_size;
  ParamCounts n;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const int64_t heads = c.heads(i), kv = c.kv_heads(i), hd = c.layer_head_dim(i);
    int64_t matrices = heads * hd * h          // q
                       + 2 * kv * hd * h       // k, v
                       + heads * c.d_rel * h   // r
                       + h * heads * hd        // o
                       + 2 * kv * hd * k       // k_sconv, v_sconv
                       + 2 * h * k             // attn_sconv, mlp_sconv
                       + c.d_rel * c.extent(i);  // relative-bias table
    int64_t vectors = 2 * h + 2 * hd;  // attn_norm, mlp_norm, q_norm, k_norm
    int64_t active_mlp = 0, total_mlp = 0;
    if (c.is_moe(i)) {
      const int64_t router = (c.n_routed_experts + c.n_shared_experts) * h;
      active_mlp = router + (c.num_experts_per_tok + c.n_shared_experts) * expert;
      total_mlp = router + (c.n_routed_experts + c.n_shared_experts) * expert;
      vectors += c.n_routed_experts + 1;  // selection bias, global_scale
    } else {
      active_mlp = total_mlp = 3 * h * c.dense_intermediate_size;
      vectors += 1;  // global_scale
    }
    n.active += matrices + active_mlp;
    n.total += matrices + total_mlp + vectors;
  }
  const int64_t table = c.vocab_size * h;
  n.active += table;              // LM head; the input embedding is a lookup
  n.total += 2 * table + 2 * h;  // embed, unembed, embed_norm, final norm
  return n;
}

}  // namespace quill
