// Config reading in both schemas, validation messages, the transformers round trip, and the
// parameter counts of inkling-small.md §2 and performance.md.
#include "model/config.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "base/error.h"
#include "base/file_util.h"

namespace quill {
namespace {

const std::string kConfigs = std::string(QUILL_FIXTURES) + "/configs";

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
      {"missing-hidden-size.json", "hidden_size: missing"},
      {"layer-types-wrong-length.json", "layer_types: has 3 entries, num_hidden_layers is 4"},
      {"heads-not-divisible.json", "num_attention_heads: 5 is not a multiple of num_key_value_heads 2"},
      {"logit-softcap.json", "final_logit_softcapping"},
      {"no-expert-width.json", "moe_intermediate_size: missing"},
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
  j["text_config"].erase("hidden_size");
  EXPECT_EQ(error_of([&] { parse_inkling_config(j.dump(), "config.json"); }),
            "config.json: text_config.hidden_size: missing");

  j = nlohmann::json::parse(read_file(kConfigs + "/inkling-small-release.json"));
  j["text_config"]["gate_activation"] = "softmax";
  EXPECT_NE(error_of([&] { parse_inkling_config(j.dump(), "config.json"); })
                .find("config.json: text_config.gate_activation: \"softmax\" is not supported"),
            std::string::npos);

  j = nlohmann::json::parse(read_file(kConfigs + "/inkling-small-release.json"));
  j["text_config"].erase("local_layer_ids");
  EXPECT_NE(error_of([&] { parse_inkling_config(j.dump(), "config.json"); })
                .find("config.json: text_config.layer_types: missing (and no text_config.local_layer_ids)"),
            std::string::npos);

  j = nlohmann::json::parse(read_file(kConfigs + "/inkling-small-release.json"));
  j["text_config"]["local_layer_ids"].push_back(42);
  EXPECT_NE(error_of([&] { parse_inkling_config(j.dump(), "config.json"); })
                .find("text_config.local_layer_ids: layer 42 is outside [0, 42)"),
            std::string::npos);

  j = nlohmann::json::parse(read_file(kConfigs + "/inkling-small-release.json"));
  j.erase("text_config");
  EXPECT_EQ(error_of([&] { parse_inkling_config(j.dump(), "config.json"); }), "config.json: text_config: missing");
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

}  // namespace
}  // namespace quill
