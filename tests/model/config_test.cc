// Config reading in both schemas, validation messages, the transformers round trip, and the
// parameter counts of docs/model.md §2 and performance.md.
#include "model/config.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "base/error.h"
#include "base/file_util.h"
#include "model/config_keys.h"

namespace quill {
namespace {

const std::string kConfigs = std::string(QUILL_FIXTURES) + "/configs";
// transformers 5.17.0's own output (tests/fixtures/hf/README.md) and those configs with every default
// left out (tools/parity/omit_defaults.py).
const std::string kHf = std::string(QUILL_FIXTURES) + "/hf";

nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(read_file(path)); }

void expect_same_config(const InklingConfig& a, const InklingConfig& b) {
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.num_layers, b.num_layers);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.unpadded_vocab_size, b.unpadded_vocab_size);
  EXPECT_EQ(a.num_heads, b.num_heads);
  EXPECT_EQ(a.num_kv_heads, b.num_kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.swa_num_heads, b.swa_num_heads);
  EXPECT_EQ(a.swa_num_kv_heads, b.swa_num_kv_heads);
  EXPECT_EQ(a.swa_head_dim, b.swa_head_dim);
  EXPECT_EQ(a.d_rel, b.d_rel);
  EXPECT_EQ(a.rel_extent, b.rel_extent);
  EXPECT_EQ(a.sliding_window, b.sliding_window);
  EXPECT_EQ(a.log_scaling, b.log_scaling);
  EXPECT_EQ(a.log_scaling_n_floor, b.log_scaling_n_floor);
  EXPECT_EQ(a.log_scaling_alpha, b.log_scaling_alpha);
  EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps);
  EXPECT_EQ(a.conv_kernel_size, b.conv_kernel_size);
  EXPECT_EQ(a.dense_intermediate_size, b.dense_intermediate_size);
  EXPECT_EQ(a.moe_intermediate_size, b.moe_intermediate_size);
  EXPECT_EQ(a.n_routed_experts, b.n_routed_experts);
  EXPECT_EQ(a.num_experts_per_tok, b.num_experts_per_tok);
  EXPECT_EQ(a.n_shared_experts, b.n_shared_experts);
  EXPECT_EQ(a.route_scale, b.route_scale);
  EXPECT_EQ(a.logits_mup_width_multiplier, b.logits_mup_width_multiplier);
  EXPECT_EQ(a.initializer_range, b.initializer_range);
  EXPECT_EQ(a.layer_is_local, b.layer_is_local);
  EXPECT_EQ(a.layer_is_moe, b.layer_is_moe);
}

// The message of the quill::Error that `fn` throws ("" if it throws none).
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Config, ReleaseSchemaReadsInklingSmall) {
  InklingConfig c = load_inkling_config(kConfigs + "/inkling-small-release.json");
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.num_layers, 42);
  EXPECT_EQ(c.vocab_size, 201024);
  EXPECT_EQ(c.unpadded_vocab_size, 200058);
  EXPECT_EQ(c.dense_intermediate_size, 16384);  // the schema trap: intermediate_size is the expert width
  EXPECT_EQ(c.moe_intermediate_size, 2048);
  EXPECT_EQ(c.conv_kernel_size, 4);
  EXPECT_EQ(c.sliding_window, 512);
  EXPECT_EQ(c.rel_extent, 1024);
  EXPECT_TRUE(c.log_scaling);
  EXPECT_EQ(c.log_scaling_n_floor, 128000);
  EXPECT_EQ(c.log_scaling_alpha, 0.1);
  EXPECT_EQ(c.logits_mup_width_multiplier, 16.0);
  EXPECT_EQ(c.source, kConfigs + "/inkling-small-release.json");
}

TEST(Config, LayerPatternFromLocalLayerIdsAndDenseMlpIdx) {
  InklingConfig c = load_inkling_config(kConfigs + "/inkling-small-release.json");
  std::vector<int64_t> globals, dense;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    if (!c.is_local(i)) globals.push_back(i);
    if (!c.is_moe(i)) dense.push_back(i);
  }
  EXPECT_EQ(globals, (std::vector<int64_t>{5, 11, 17, 23, 29, 35, 41}));
  EXPECT_EQ(dense, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(c.extent(0), 512);
  EXPECT_EQ(c.window(0), 512);
  EXPECT_EQ(c.extent(5), 1024);
  EXPECT_EQ(c.window(5), 0);
}

TEST(Config, BothSchemasGiveTheSameInklingSmall) {
  InklingConfig release = load_inkling_config(kConfigs + "/inkling-small-release.json");
  InklingConfig hf = load_inkling_config(kConfigs + "/inkling-small-hf.json");
  expect_same_config(release, hf);
}

TEST(Config, InklingSmallParamCountsExact) {
  for (const char* name : {"inkling-small-release.json", "inkling-small-hf.json"}) {
    SCOPED_TRACE(name);
    ParamCounts n = count_params(load_inkling_config(kConfigs + "/" + name));
    EXPECT_EQ(n.total, 263'655'199'274);
    EXPECT_EQ(n.active, 11'173'191'680);
  }
}

TEST(Config, PerformanceSliceActiveCount) {
  // performance.md: 4 layers (0 dense, 1-3 MoE; 0-2 local, 3 global), 32 routed experts.
  InklingConfig c = load_inkling_config(kConfigs + "/inkling-small-hf.json");
  c.num_layers = 4;
  c.layer_is_local = {true, true, true, false};
  c.layer_is_moe = {false, true, true, true};
  c.n_routed_experts = 32;
  validate_config(c);
  EXPECT_EQ(count_params(c).active, 1'805'484'032);
}

TEST(Config, TinyConfig) {
  InklingConfig c = load_inkling_config(std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json");
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.vocab_size, 320);
  EXPECT_EQ(c.unpadded_vocab_size, 300);
  EXPECT_EQ(c.dense_intermediate_size, 96);
  EXPECT_EQ(c.moe_intermediate_size, 32);
  EXPECT_EQ(c.layer_is_local, (std::vector<bool>{true, true, false, true}));
  EXPECT_EQ(c.layer_is_moe, (std::vector<bool>{false, true, true, true}));
  EXPECT_TRUE(c.log_scaling);
  EXPECT_EQ(c.log_scaling_n_floor, 16);
  EXPECT_EQ(c.heads(2), 4);
  EXPECT_EQ(c.kv_heads(2), 2);
  EXPECT_EQ(c.extent(2), 16);
  EXPECT_EQ(c.extent(0), 8);
}

TEST(Config, RoundTripThroughTransformersJson) {
  for (std::string path : {kConfigs + "/inkling-small-release.json", kConfigs + "/inkling-small-hf.json",
                           std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json"}) {
    SCOPED_TRACE(path);
    InklingConfig c = load_inkling_config(path);
    std::string text = config_to_hf_json(c);
    expect_same_config(parse_inkling_config(text, "roundtrip.json"), c);
    nlohmann::json j = nlohmann::json::parse(text);
    EXPECT_EQ(j["model_type"], "inkling_text");
    EXPECT_EQ(j["intermediate_size"], c.dense_intermediate_size);
    EXPECT_EQ(j["moe_intermediate_size"], c.moe_intermediate_size);
    EXPECT_EQ(j["hidden_act"], "silu");
    EXPECT_EQ(j["tie_word_embeddings"], false);
    EXPECT_TRUE(j["pad_token_id"].is_null());
  }
  // Log scaling off: written as null, read back off.
  InklingConfig c = load_inkling_config(std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json");
  c.log_scaling = false;
  c.log_scaling_n_floor = c.log_scaling_alpha = 0;
  std::string text = config_to_hf_json(c);
  EXPECT_TRUE(nlohmann::json::parse(text)["log_scaling_n_floor"].is_null());
  expect_same_config(parse_inkling_config(text, "roundtrip.json"), c);
}

TEST(Config, DirectoryHoldingConfigJson) {
  std::string dir = ::testing::TempDir() + "quill-config-test-model";
  make_dirs(dir);
  write_file_atomic(dir + "/config.json", read_file(kConfigs + "/inkling-small-release.json"));
  InklingConfig c = load_inkling_config(dir);
  EXPECT_EQ(c.source, dir + "/config.json");
  EXPECT_EQ(c.hidden_size, 4096);

  std::string msg = error_of([] { load_inkling_config("/nonexistent/quill-model"); });
  EXPECT_NE(msg.find("/nonexistent/quill-model"), std::string::npos) << msg;
}

struct BadCase {
  const char* file;
  const char* expect;  // must appear in the message, after the file name
};

TEST(Config, BadFixturesFailNamingFileAndField) {
  const BadCase cases[] = {
      {"malformed.json", "malformed JSON: parse error at line 9"},
      {"layer-types-wrong-length.json", "layer_types: has 3 entries, num_hidden_layers is 4"},
      {"heads-not-divisible.json", "num_attention_heads: 5 is not a multiple of num_key_value_heads 2"},
      {"logit-softcap.json", "final_logit_softcapping"},
      {"top-k-too-large.json", "num_experts_per_tok"},
  };
  for (const BadCase& bad : cases) {
    SCOPED_TRACE(bad.file);
    std::string path = kConfigs + "/bad/" + bad.file;
    std::string msg = error_of([&] { load_inkling_config(path); });
    ASSERT_FALSE(msg.empty()) << "no error";
    EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;  // starts with the file
    EXPECT_NE(msg.find(bad.expect), std::string::npos) << msg;
  }
}

TEST(Config, ReleaseErrorsNameTheTextConfigField) {
  nlohmann::json j = nlohmann::json::parse(read_file(kConfigs + "/inkling-small-release.json"));
  j["text_config"]["hidden_size"] = "4096";
  EXPECT_EQ(error_of([&] { parse_inkling_config(j.dump(), "config.json"); }),
            "config.json: text_config.hidden_size: must be an integer, got \"4096\"");

  j = nlohmann::json::parse(read_file(kConfigs + "/inkling-small-release.json"));
  j["text_config"]["gate_activation"] = "softmax";
  EXPECT_NE(error_of([&] { parse_inkling_config(j.dump(), "config.json"); })
                .find("config.json: text_config.gate_activation: \"softmax\" is not supported"),
            std::string::npos);

  j = nlohmann::json::parse(read_file(kConfigs + "/inkling-small-release.json"));
  j["text_config"]["local_layer_ids"].push_back(42);
  EXPECT_NE(error_of([&] { parse_inkling_config(j.dump(), "config.json"); })
                .find("text_config.local_layer_ids: layer 42 is outside [0, 42)"),
            std::string::npos);

  j = nlohmann::json::parse(read_file(kConfigs + "/inkling-small-release.json"));
  j["text_config"]["use_sconv"] = false;
  EXPECT_NE(error_of([&] { parse_inkling_config(j.dump(), "config.json"); })
                .find("config.json: text_config.use_sconv: false is not supported"),
            std::string::npos);
}

TEST(Config, MixedSchemaDenseIntermediateSizeWins) {
  // transformers saves dense_intermediate_size next to intermediate_size after __post_init__ mapped it.
  nlohmann::json j = nlohmann::json::parse(read_file(std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json"));
  j["dense_intermediate_size"] = 112;
  InklingConfig c = parse_inkling_config(j.dump(), "mixed.json");
  EXPECT_EQ(c.dense_intermediate_size, 112);
  EXPECT_EQ(c.moe_intermediate_size, 32);
}

TEST(Config, OptionalKeys) {
  nlohmann::json j = nlohmann::json::parse(read_file(std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json"));
  j.erase("unpadded_vocab_size");
  j["log_scaling_n_floor"] = nullptr;
  j.erase("log_scaling_alpha");
  j.erase("conv_kernel_size");
  j["sconv_kernel_size"] = 3;
  InklingConfig c = parse_inkling_config(j.dump(), "opt.json");
  EXPECT_EQ(c.unpadded_vocab_size, 320);
  EXPECT_FALSE(c.log_scaling);
  EXPECT_EQ(c.conv_kernel_size, 3);

  j["conv_kernel_size"] = 4;  // both spellings present and disagreeing
  EXPECT_NE(error_of([&] { parse_inkling_config(j.dump(), "opt.json"); }).find("opt.json: conv_kernel_size"),
            std::string::npos);
}

TEST(Config, ValidateNamesTheField) {
  InklingConfig c = load_inkling_config(std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json");
  InklingConfig bad = c;
  bad.unpadded_vocab_size = 321;
  EXPECT_NE(error_of([&] { validate_config(bad); }).find("unpadded_vocab_size"), std::string::npos);
  bad = c;
  bad.swa_num_kv_heads = 3;
  EXPECT_NE(error_of([&] { validate_config(bad); }).find("swa_num_attention_heads"), std::string::npos);
  bad = c;
  bad.layer_is_moe.pop_back();
  EXPECT_NE(error_of([&] { validate_config(bad); }).find("mlp_layer_types"), std::string::npos);
  bad = c;
  bad.sliding_window = 0;
  EXPECT_NE(error_of([&] { validate_config(bad); }).find("sliding_window_size"), std::string::npos);
  bad = c;
  bad.num_experts_per_tok = 0;
  EXPECT_NE(error_of([&] { validate_config(bad); }).find("num_experts_per_tok"), std::string::npos);
}

// ---- transformers' defaults (docs/config.md) -------------------------------------------------------

TEST(ConfigDefaults, KeyTableHoldsTransformersDefaults) {
  // defaults/text_config.json is InklingTextConfig().to_dict() from transformers 5.17.0.
  const nlohmann::json dump = read_json(kHf + "/defaults/text_config.json");
  for (const auto& [key, value] : dump.items()) {
    SCOPED_TRACE(key);
    const ConfigKey* k = find_config_key(key);
    ASSERT_NE(k, nullptr) << "a transformers key missing from model/config_keys.cc";
    // Derived lists (null until __post_init__ fills them) are checked by reading, below; the base
    // class's label maps (filled by __post_init__) and the version (stamped by to_dict) are bookkeeping.
    if (key == "layer_types" || key == "mlp_layer_types" || key == "id2label" || key == "label2id" ||
        key == "transformers_version")
      continue;
    EXPECT_EQ(nlohmann::json::parse(k->default_json), value);
  }
  for (const ConfigKey& k : transformers_text_keys()) {
    if (k.name == "tie_word_embeddings" || k.name == "torch_dtype") continue;  // not fields in 5.17.0
    EXPECT_TRUE(dump.contains(std::string(k.name))) << k.name << " is not a key of transformers 5.17.0";
  }
}

TEST(ConfigDefaults, AnEmptyConfigIsTransformersDefaultModel) {
  const InklingConfig empty = parse_inkling_config("{}", "empty.json");
  const InklingConfig dumped = load_inkling_config(kHf + "/defaults/text_config.json");
  expect_same_config(empty, dumped);
  const nlohmann::json dump = read_json(kHf + "/defaults/text_config.json");
  EXPECT_EQ(empty.hidden_size, 6144);
  EXPECT_EQ(empty.num_layers, 66);
  EXPECT_EQ(empty.vocab_size, 201024);
  EXPECT_EQ(empty.unpadded_vocab_size, 201024);  // None: not padded
  EXPECT_EQ(empty.swa_num_kv_heads, 16);           // not the global layers' 8
  EXPECT_EQ(empty.moe_intermediate_size, 3072);
  EXPECT_EQ(empty.dense_intermediate_size, 24576);
  EXPECT_FALSE(empty.log_scaling);
  EXPECT_EQ(empty.log_scaling_alpha, 0.1);
  EXPECT_EQ(empty.logits_mup_width_multiplier, 24.0);
  EXPECT_EQ(empty.initializer_range, 0.02);
  // The layer pattern transformers' __post_init__ derived: layer i global when (i + 1) % 6 == 0.
  for (int64_t i = 0; i < 66; ++i) {
    EXPECT_EQ(empty.is_local(i), dump["layer_types"][i] == "hybrid_sliding") << i;
    EXPECT_EQ(empty.is_moe(i), dump["mlp_layer_types"][i] == "sparse") << i;
  }
}

TEST(ConfigDefaults, MultimodalConfigWithoutTextConfigIsTheDefaultTextConfig) {
  const InklingConfig text = parse_inkling_config("{}", "empty.json");
  expect_same_config(load_inkling_config(kHf + "/defaults/mm_config.json"), text);
  expect_same_config(load_inkling_config(kHf + "/omitted/mm_config.json"), text);  // "text_config": {}
  expect_same_config(parse_inkling_config(R"({"model_type": "inkling_mm_model"})", "mm.json"), text);
  expect_same_config(parse_inkling_config(R"({"model_type": "inkling_mm_model", "text_config": null})", "mm.json"),
                     text);
}

// The parameter count transformers' InklingForCausalLM has for a config (written/NAME.params.json):
// quill's total less the router's selection bias, a buffer there.
int64_t transformers_count(const InklingConfig& c) {
  const ParamCounts n = count_params(c);
  return n.total - n.buffers;
}

TEST(ConfigDefaults, ConfigsWrittenByTransformersAreAccepted) {
  for (const char* name : {"tiny", "slice"}) {
    SCOPED_TRACE(name);
    const InklingConfig written = load_inkling_config(kHf + "/written/" + name + ".json");
    const InklingConfig ours = load_inkling_config(std::string(QUILL_SOURCE_DIR) + "/configs/" + name + ".json");
    expect_same_config(written, ours);
    const int64_t hf_params = read_json(kHf + "/written/" + name + ".params.json")["parameters"].get<int64_t>();
    EXPECT_EQ(transformers_count(written), hf_params);
    EXPECT_EQ(count_params(written).total, count_params(ours).total);
  }
}

TEST(ConfigDefaults, ConfigsWithDefaultsOmittedReadToTheSameModel) {
  for (const char* name : {"tiny", "slice"}) {
    SCOPED_TRACE(name);
    const std::string omitted_path = kHf + "/omitted/" + name + ".json";
    const nlohmann::json omitted = read_json(omitted_path);
    // The fixture really omits what the defaults cover (tiny's conv kernel, eps, route scale, ...).
    EXPECT_FALSE(omitted.contains("conv_kernel_size"));
    EXPECT_FALSE(omitted.contains("rms_norm_eps"));
    EXPECT_FALSE(omitted.contains("route_scale"));
    EXPECT_FALSE(omitted.contains("log_scaling_alpha"));
    EXPECT_FALSE(omitted.contains("n_shared_experts"));
    const InklingConfig c = load_inkling_config(omitted_path);
    const InklingConfig full = load_inkling_config(kHf + "/written/" + name + ".json");
    expect_same_config(c, full);
    EXPECT_EQ(count_params(c).total, count_params(full).total);
    EXPECT_EQ(count_params(c).active, count_params(full).active);
    EXPECT_EQ(transformers_count(c), read_json(kHf + "/written/" + name + ".params.json")["parameters"].get<int64_t>());
  }
  // Inkling-Small in both schemas with its defaults left out (layer_types derived by transformers' rule).
  for (const char* name : {"inkling-small-hf.json", "inkling-small-release.json"}) {
    SCOPED_TRACE(name);
    const nlohmann::json omitted = read_json(kHf + "/omitted/" + name);
    const nlohmann::json& text = omitted.contains("text_config") ? omitted["text_config"] : omitted;
    EXPECT_FALSE(text.contains("rel_extent"));
    EXPECT_FALSE(text.contains("n_routed_experts"));
    const InklingConfig c = load_inkling_config(kHf + "/omitted/" + name);
    expect_same_config(c, load_inkling_config(kConfigs + "/" + name));
    EXPECT_EQ(count_params(c).total, 263'655'199'274);
    EXPECT_EQ(count_params(c).active, 11'173'191'680);
  }
  EXPECT_FALSE(read_json(kHf + "/omitted/inkling-small-hf.json").contains("layer_types"));
}

// written/tiny.json with one key changed.
std::string tiny_with(const std::string& key, const nlohmann::json& value) {
  nlohmann::json j = read_json(kHf + "/written/tiny.json");
  j[key] = value;
  return j.dump();
}

TEST(ConfigDefaults, ValuesQuillDoesNotImplementAreRefusedByName) {
  const std::pair<const char*, nlohmann::json> refused[] = {
      {"tie_word_embeddings", true}, {"shared_expert_sink", false}, {"attention_dropout", 0.1},
      {"pad_token_id", 0},           {"hidden_act", "gelu"},        {"number_of_conv_states", 3},
      {"model_type", "llama"},
  };
  for (const auto& [key, value] : refused) {
    SCOPED_TRACE(key);
    const std::string msg = error_of([&] { parse_inkling_config(tiny_with(key, value), "tiny.json"); });
    EXPECT_EQ(msg.rfind(std::string("tiny.json: ") + key + ": " + value.dump() + " is not supported", 0), 0u) << msg;
  }
  // A key neither transformers nor the release knows is refused too: quill cannot know what it changes.
  EXPECT_NE(error_of([&] { parse_inkling_config(tiny_with("swiglu_limit", 7.0), "tiny.json"); })
                .find("tiny.json: swiglu_limit: is not a key of transformers' InklingTextConfig"),
            std::string::npos);
  // null where transformers' default is not None: transformers' strict dataclass refuses it as well.
  EXPECT_NE(error_of([&] { parse_inkling_config(tiny_with("hidden_size", nullptr), "tiny.json"); })
                .find("tiny.json: hidden_size: null is not a value of it (omit the key for transformers' default, 6144)"),
            std::string::npos);
}

TEST(ConfigDefaults, KeysTransformersDoesNotUseAreAcceptedWithAnyValue) {
  const InklingConfig base = load_inkling_config(kHf + "/written/tiny.json");
  const std::pair<const char*, nlohmann::json> ignored[] = {
      {"rms_norm_eps_moe_gate", 1e-3}, {"num_mtp_layers", 8},      {"chain_hidden_post_norm", true},
      {"mtp_local_layer_ids", {0, 2}}, {"mtp_hidden_states_first", false}, {"bos_token_id", 200000},
      {"eos_token_id", 200006},        {"max_position_embeddings", 1048576}, {"transformers_version", "5.99"},
  };
  for (const auto& [key, value] : ignored) {
    SCOPED_TRACE(key);
    expect_same_config(parse_inkling_config(tiny_with(key, value), "tiny.json"), base);
  }
  EXPECT_EQ(parse_inkling_config(tiny_with("initializer_range", 0.05), "tiny.json").initializer_range, 0.05);
}

// Defect 8 of issue 15, each case against transformers' own default.
TEST(ConfigDefaults, TieWordEmbeddingsTrueIsRefused) {
  // quill keeps embed and unembed separate; a config asking for tied tables must not train untied silently.
  nlohmann::json text = read_json(std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json");
  text["tie_word_embeddings"] = true;
  EXPECT_NE(error_of([&] { parse_inkling_config(text.dump(), "tied.json"); })
                .find("tied.json: tie_word_embeddings: true is not supported: quill implements only false"),
            std::string::npos);
  nlohmann::json mm = read_json(kConfigs + "/inkling-small-release.json");
  mm["tie_word_embeddings"] = true;
  EXPECT_NE(error_of([&] { parse_inkling_config(mm.dump(), "mm.json"); }).find("mm.json: tie_word_embeddings: true"),
            std::string::npos);
  mm.erase("tie_word_embeddings");
  mm["text_config"]["tie_word_embeddings"] = true;
  EXPECT_NE(error_of([&] { parse_inkling_config(mm.dump(), "mm.json"); })
                .find("mm.json: text_config.tie_word_embeddings: true"),
            std::string::npos);
}

TEST(ConfigDefaults, MissingUnpaddedVocabSizeIsTransformersNone) {
  // transformers' default is None: the head is not padded and its loss covers all vocab_size logits
  // (InklingForCausalLM.forward slices only to a smaller unpadded_vocab_size). So tiny without the key
  // is a different model from tiny (vocab 300 of 320), and quill must build the same one transformers does.
  EXPECT_TRUE(read_json(kHf + "/defaults/text_config.json")["unpadded_vocab_size"].is_null());
  nlohmann::json j = read_json(kHf + "/written/tiny.json");
  j.erase("unpadded_vocab_size");
  EXPECT_EQ(parse_inkling_config(j.dump(), "tiny.json").unpadded_vocab_size, 320);
  j["unpadded_vocab_size"] = nullptr;
  EXPECT_EQ(parse_inkling_config(j.dump(), "tiny.json").unpadded_vocab_size, 320);
}

TEST(ConfigDefaults, MissingLogScalingKeysTakeTransformersDefaults) {
  // log_scaling_n_floor: None (off); log_scaling_alpha: 0.1, also when only the floor is given.
  EXPECT_TRUE(read_json(kHf + "/defaults/text_config.json")["log_scaling_n_floor"].is_null());
  nlohmann::json j = read_json(kHf + "/written/tiny.json");
  j.erase("log_scaling_alpha");
  InklingConfig c = parse_inkling_config(j.dump(), "tiny.json");
  EXPECT_TRUE(c.log_scaling);
  EXPECT_EQ(c.log_scaling_n_floor, 16);
  EXPECT_EQ(c.log_scaling_alpha, 0.1);
  j.erase("log_scaling_n_floor");
  EXPECT_FALSE(parse_inkling_config(j.dump(), "tiny.json").log_scaling);
}

TEST(ConfigDefaults, MissingWidthsAndLayerListsTakeTransformersDefaults) {
  nlohmann::json j = read_json(kHf + "/written/tiny.json");
  j.erase("moe_intermediate_size");
  j.erase("mlp_layer_types");
  j.erase("layer_types");
  InklingConfig c = parse_inkling_config(j.dump(), "tiny.json");
  EXPECT_EQ(c.moe_intermediate_size, 3072);
  EXPECT_EQ(c.dense_intermediate_size, 96);
  EXPECT_EQ(c.layer_is_moe, (std::vector<bool>{true, true, true, true}));     // dense_mlp_idx 0
  EXPECT_EQ(c.layer_is_local, (std::vector<bool>{true, true, true, true}));   // no (i+1) % 6 == 0 in 4 layers
  j["dense_mlp_idx"] = 1;
  j["local_layer_ids"] = {0, 1, 3};
  c = parse_inkling_config(j.dump(), "tiny.json");
  EXPECT_EQ(c.layer_is_moe, (std::vector<bool>{false, true, true, true}));
  EXPECT_EQ(c.layer_is_local, (std::vector<bool>{true, true, false, true}));
}

TEST(ConfigDefaults, AliasesAreTransformersAttributeMap) {
  nlohmann::json j = read_json(kHf + "/written/tiny.json");
  j.erase("n_routed_experts");
  j["num_local_experts"] = 4;
  j.erase("logits_mup_width_multiplier");
  j["embedding_multiplier"] = 2.0;
  InklingConfig c = parse_inkling_config(j.dump(), "tiny.json");
  EXPECT_EQ(c.n_routed_experts, 4);
  EXPECT_EQ(c.logits_mup_width_multiplier, 2.0);
  j["n_routed_experts"] = 8;
  EXPECT_NE(error_of([&] { parse_inkling_config(j.dump(), "tiny.json"); })
                .find("tiny.json: n_routed_experts: 8 disagrees with num_local_experts = 4"),
            std::string::npos);
}

TEST(ConfigDefaults, DocsListEveryKey) {
  // docs/config.md is the reader's table of every key: it must not fall behind model/config_keys.cc.
  const std::string doc = read_file(std::string(QUILL_SOURCE_DIR) + "/docs/config.md");
  auto listed = [&](std::string_view key) { return doc.find("`" + std::string(key) + "`") != std::string::npos; };
  for (const ConfigKey& k : transformers_text_keys()) EXPECT_TRUE(listed(k.name)) << k.name;
  for (const ConfigKey& k : release_text_keys()) EXPECT_TRUE(listed(k.name)) << k.name;
  for (const KeyAlias& a : config_key_aliases()) EXPECT_TRUE(listed(a.alias)) << a.alias;
}

// ---- sizes (defect 13 of issue 15) -------------------------------------------------------------------

TEST(ConfigSize, HugeDimensionIsReportedBeforeAllocatingNamingFileAndField) {
  nlohmann::json j = read_json(std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json");
  j["hidden_size"] = int64_t{1} << 40;
  const InklingConfig c = parse_inkling_config(j.dump(), "huge.json");
  const uint64_t machine = uint64_t{64} << 30;  // 64 GiB
  const std::string msg = error_of([&] { check_params_fit_memory(c, machine); });
  EXPECT_EQ(msg.rfind("huge.json: hidden_size: the model's ", 0), 0u) << msg;
  EXPECT_NE(msg.find("more than this machine's 64.0 GiB"), std::string::npos) << msg;
  EXPECT_NE(msg.find("hidden_size 1099511627776"), std::string::npos) << msg;
  // The same config at its real size fits.
  EXPECT_EQ(error_of([&] { check_params_fit_memory(load_inkling_config(std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json"), machine); }),
            "");
  // A vocabulary too big names vocab_size.
  j = read_json(std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json");
  j["vocab_size"] = int64_t{1} << 40;
  EXPECT_EQ(error_of([&] { check_params_fit_memory(parse_inkling_config(j.dump(), "vocab.json"), machine); })
                .rfind("vocab.json: vocab_size: ", 0),
            0u);
}

TEST(ConfigSize, CountsPast2To63AreAnErrorNotAWrap) {
  nlohmann::json j = read_json(std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json");
  j["hidden_size"] = int64_t{1} << 60;
  const InklingConfig c = parse_inkling_config(j.dump(), "huge.json");
  const std::string msg = error_of([&] { count_params(c); });
  EXPECT_EQ(msg.rfind("huge.json: hidden_size: the model would have more than 2^63 parameters", 0), 0u) << msg;
  EXPECT_NE(error_of([&] { check_params_fit_memory(c, uint64_t{64} << 30); }).find("huge.json: hidden_size"),
            std::string::npos);
}

}  // namespace
}  // namespace quill
