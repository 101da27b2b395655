// The Hugging Face export of the tiny model in both forms against what transformers 5.17 expects
// (tests/fixtures/hf/names: every tensor InklingForCausalLM.save_pretrained writes, and the
// release-format checkpoint that InklingForConditionalGeneration loads): no name missing, none extra,
// shapes and dtypes equal; config.json in the same form, its dtype that of the tensors; the
// transformers layout against the release map value by value; bit-exact round trips through both.
#include "io/hf_export.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "base/file_util.h"
#include "io/checkpoint_dir.h"
#include "io/hf_checkpoint.h"
#include "io/io_test_util.h"
#include "util/test_util.h"

namespace quill {
namespace {

using test::expect_error;
using test::same_bytes;
using test::ScratchDir;
using nlohmann::json;

const std::string kTiny = std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json";
const std::string kNames = std::string(QUILL_FIXTURES) + "/hf/names";

// name -> (shape, dtype)
using NameList = std::map<std::string, std::pair<Shape, std::string>>;

NameList list_from_json(const json& rows) {
  NameList out;
  for (const json& r : rows) out[r[0].get<std::string>()] = {r[1].get<Shape>(), r[2].get<std::string>()};
  return out;
}

NameList golden_transformers() { return list_from_json(json::parse(read_file(kNames + "/tiny.transformers.json"))); }
json golden_release() { return json::parse(read_file(kNames + "/tiny.release.json")); }

NameList written_names(const std::string& dir) {
  CheckpointDir ckpt = CheckpointDir::open(dir);
  NameList out;
  for (const std::string& n : ckpt.names()) out[n] = {ckpt.entry(n).shape, ckpt.entry(n).dtype_str};
  return out;
}

// Fails naming every missing, extra or different tensor; `dtypes` false compares names and shapes only.
void expect_same_names(const NameList& got, const NameList& want, bool dtypes = true) {
  for (const auto& [n, sd] : want) {
    auto it = got.find(n);
    if (it == got.end()) {
      ADD_FAILURE() << "missing: " << n;
      continue;
    }
    EXPECT_EQ(it->second.first, sd.first) << n << " shape";
    if (dtypes) {
      EXPECT_EQ(it->second.second, sd.second) << n << " dtype";
    }
  }
  for (const auto& [n, sd] : got)
    if (!want.count(n)) ADD_FAILURE() << "extra: " << n;
}

ParamTable random_tiny(uint64_t seed) {
  ParamTable t = ParamTable::for_config(load_inkling_config(kTiny));
  t.init_random(seed);
  return t;
}

// A release-format checkpoint as make_init.py writes it for configs/tiny.json: its config.json and
// tensor names and dtypes from the golden file, random values; plus one MTP and one vision tensor
// (the release passes them through) and a tokenizer side file.
std::string write_release_init(const ScratchDir& dir, uint64_t seed = 11) {
  const std::string path = dir / "release-init";
  make_dirs(path);
  const json g = golden_release();
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const json& r : g["tensors"]) {
    const Tensor v = test::random_tensor(r[1].get<Shape>(), DType::F32, seed++, 0.5);
    tensors.push_back({r[0].get<std::string>(), convert_dtype(v, r[2] == "F32" ? DType::F32 : DType::BF16)});
  }
  tensors.push_back({"model.mtp.0.input_proj.weight", convert_dtype(test::random_tensor({4, 8}, DType::F32, 5), DType::BF16)});
  tensors.push_back({"model.visual.layers.linear_0.weight", test::random_tensor({3, 2}, DType::F32, 6)});
  write_safetensors(path + "/model.safetensors", tensors, {{"format", "pt"}});
  write_file_atomic(path + "/config.json", g["config"].dump(2));
  write_file_atomic(path + "/tokenizer.json", "{\"tok\": 1}");
  return path;
}

ParamTable load_table(const std::string& dir, LoadReport* report = nullptr) {
  ParamTable t = ParamTable::for_config(load_inkling_config(dir));
  load_hf_checkpoint(dir, t, report);
  return t;
}

json config_of(const std::string& dir) { return json::parse(read_file(dir + "/config.json")); }

TEST(HfExport, TransformersFormOfTinyIsWhatSavePretrainedWrites) {
  ScratchDir dir;
  const InklingConfig config = load_inkling_config(kTiny);
  HfExportOptions o;
  o.dtype = DType::F32;
  const HfExportPlan plan = plan_hf_export(config, "", kTiny, o);
  EXPECT_EQ(plan.format, HfFormat::Transformers);  // a random init
  const SaveReport r = write_hf_export(plan, dir / "hf", random_tiny(1));
  expect_same_names(written_names(dir / "hf"), golden_transformers());
  EXPECT_EQ(r.written.size(), 88u);
  EXPECT_TRUE(r.passed_through.empty() && r.dropped.empty());

  const json c = config_of(dir / "hf");
  EXPECT_EQ(c["architectures"], json::array({"InklingForCausalLM"}));
  EXPECT_EQ(c["model_type"], "inkling_text");
  EXPECT_EQ(c["dtype"], "float32");
  EXPECT_FALSE(c.contains("torch_dtype"));
  EXPECT_FALSE(c.contains("text_config"));
  // Every key transformers wrote for configs/tiny.json (written/tiny.json) that the export has agrees.
  const json written = json::parse(read_file(std::string(QUILL_FIXTURES) + "/hf/written/tiny.json"));
  for (const auto& [k, v] : written.items())
    if (c.contains(k) && k != "transformers_version") {
      EXPECT_EQ(c[k], v) << k;
    }
}

TEST(HfExport, Bf16KeepsTheReleaseAndTransformersFp32Tensors) {
  ScratchDir dir;
  const InklingConfig config = load_inkling_config(kTiny);
  const HfExportPlan plan = plan_hf_export(config, "", kTiny, {});  // bf16 is the default
  write_hf_export(plan, dir / "hf", random_tiny(2));
  const NameList got = written_names(dir / "hf");
  expect_same_names(got, golden_transformers(), /*dtypes=*/false);
  for (const auto& [n, sd] : got) {
    const bool f32 = n.ends_with("sconv.conv1d.weight") || n.ends_with("mlp.gate.e_score_correction_bias") ||
                     n.ends_with("mlp.gate.global_scale");
    EXPECT_EQ(sd.second, f32 ? "F32" : "BF16") << n;
  }
  EXPECT_EQ(config_of(dir / "hf")["dtype"], "bfloat16");
}

TEST(HfExport, ReleaseFormFromAReleaseCheckpointIsTheRelease) {
  ScratchDir dir;
  const std::string init = write_release_init(dir);
  LoadReport loaded;
  const ParamTable table = load_table(init, &loaded);
  EXPECT_EQ(loaded.format, HfFormat::Release);
  const HfExportPlan plan = plan_hf_export(load_inkling_config(init), init, "", {});
  EXPECT_EQ(plan.format, HfFormat::Release);  // the form of --init
  const SaveReport r = write_hf_export(plan, dir / "hf", table);

  // The golden names and dtypes (BF16, F32 router bias and scale), plus the pass-through tensors.
  const json g = golden_release();
  NameList want = list_from_json(g["tensors"]);
  want["model.mtp.0.input_proj.weight"] = {{4, 8}, "BF16"};
  want["model.visual.layers.linear_0.weight"] = {{3, 2}, "F32"};
  expect_same_names(written_names(dir / "hf"), want);
  EXPECT_EQ(r.passed_through, (std::vector<std::string>{"model.mtp.0.input_proj.weight", "model.visual.layers.linear_0.weight"}));
  CheckpointDir src = CheckpointDir::open(init), out = CheckpointDir::open(dir / "hf");
  EXPECT_TRUE(same_bytes(src.raw("model.mtp.0.input_proj.weight"), out.raw("model.mtp.0.input_proj.weight")));
  // Loaded BF16 and written BF16: every parameter byte for byte.
  for (const json& t : g["tensors"]) EXPECT_TRUE(same_bytes(src.raw(t[0]), out.raw(t[0]))) << t[0];
  EXPECT_TRUE(path_exists(dir / "hf/tokenizer.json"));

  // config.json: the release's own, every key kept; only the dtype added.
  json c = config_of(dir / "hf");
  EXPECT_EQ(c["dtype"], "bfloat16");
  c.erase("dtype");
  EXPECT_EQ(c, g["config"]);
}

TEST(HfExport, ReleaseFormInFp32) {
  ScratchDir dir;
  const std::string init = write_release_init(dir);
  HfExportOptions o;
  o.dtype = DType::F32;
  write_hf_export(plan_hf_export(load_inkling_config(init), init, "", o), dir / "hf", load_table(init));
  NameList want = list_from_json(golden_release()["tensors"]);
  want["model.mtp.0.input_proj.weight"] = {{4, 8}, "BF16"};  // passed through as it is
  want["model.visual.layers.linear_0.weight"] = {{3, 2}, "F32"};
  for (auto& [n, sd] : want)
    if (n.starts_with("model.llm.")) sd.second = "F32";
  expect_same_names(written_names(dir / "hf"), want);
  EXPECT_EQ(config_of(dir / "hf")["dtype"], "float32");
}

TEST(HfExport, TransformersFormFromAReleaseCheckpoint) {
  ScratchDir dir;
  const std::string init = write_release_init(dir);
  HfExportOptions o;
  o.format = HfFormat::Transformers;
  o.dtype = DType::F32;
  const SaveReport r = write_hf_export(plan_hf_export(load_inkling_config(init), init, "", o), dir / "hf", load_table(init));
  expect_same_names(written_names(dir / "hf"), golden_transformers());
  // MTP and vision have no place in InklingForCausalLM: not written, and said so.
  EXPECT_EQ(r.dropped, (std::vector<std::string>{"model.mtp.0.input_proj.weight", "model.visual.layers.linear_0.weight"}));
  EXPECT_TRUE(r.passed_through.empty());
  const json c = config_of(dir / "hf");
  EXPECT_EQ(c["architectures"], json::array({"InklingForCausalLM"}));
  EXPECT_FALSE(c.contains("text_config"));
  // The release's token ids and context length are carried (its text_config has them).
  const json text = golden_release()["config"]["text_config"];
  EXPECT_EQ(c["eos_token_id"], text["eos_token_id"]);
  EXPECT_EQ(c["bos_token_id"], text["bos_token_id"]);
  EXPECT_EQ(c["max_position_embeddings"], text["max_position_embeddings"]);
  EXPECT_EQ(c["dtype"], "float32");
}

// The transformers tensors against the release's, through the map transformers' conversion applies
// (tools/parity/README.md "Name and layout map"), not through quill's internal layout: dense and
// shared gate = release rows 0::2, up = rows 1::2; experts' gate_up_proj = rows 0::2 then rows 1::2.
TEST(HfExport, TransformersLayoutFollowsTheReleaseMap) {
  ScratchDir dir;
  const std::string init = write_release_init(dir);
  HfExportOptions o;
  o.format = HfFormat::Transformers;
  o.dtype = DType::F32;
  write_hf_export(plan_hf_export(load_inkling_config(init), init, "", o), dir / "hf", load_table(init));
  CheckpointDir rel = CheckpointDir::open(init), hf = CheckpointDir::open(dir / "hf");
  auto f32 = [](const CheckpointDir& c, const std::string& n) { return convert_dtype(c.tensor(n), DType::F32); };
  // rows [b*R + r] of a [blocks, R, C] tensor
  auto row = [](const Tensor& t, int64_t block, int64_t r) {
    const int64_t R = t.dim(t.ndim() - 2), C = t.dim(t.ndim() - 1);
    return t.data_as<float>() + (block * R + r) * C;
  };
  auto expect_rows = [&](const std::string& release, const std::vector<std::pair<std::string, int>>& parts) {
    // parts: transformers name, and which release rows its rows are: 0 = even (gate), 1 = odd (up),
    // 2 = even then odd (gate_up_proj)
    const Tensor r = f32(rel, release);
    const int64_t R = r.dim(r.ndim() - 2), C = r.dim(r.ndim() - 1), blocks = r.numel() / (R * C), F = R / 2;
    for (const auto& [name, kind] : parts) {
      const Tensor t = f32(hf, name);
      for (int64_t b = 0; b < blocks; ++b)
        for (int64_t j = 0; j < t.dim(t.ndim() - 2); ++j) {
          const int64_t src = kind == 2 ? (j < F ? 2 * j : 2 * (j - F) + 1) : 2 * j + kind;
          ASSERT_EQ(std::memcmp(row(t, b, j), row(r, b, src), static_cast<size_t>(C) * 4), 0)
              << name << " block " << b << " row " << j << " vs " << release << " row " << src;
        }
    }
  };
  expect_rows("model.llm.layers.0.mlp.w13_dn.weight", {{"model.layers.0.mlp.gate_proj.weight", 0}, {"model.layers.0.mlp.up_proj.weight", 1}});
  expect_rows("model.llm.layers.1.mlp.shared_experts.shared_w13_weight",
              {{"model.layers.1.mlp.shared_experts.gate_proj", 0}, {"model.layers.1.mlp.shared_experts.up_proj", 1}});
  expect_rows("model.llm.layers.2.mlp.experts.w13_weight", {{"model.layers.2.mlp.experts.gate_up_proj", 2}});
  // Renames keep the values.
  for (const auto& [release, name] : std::vector<std::pair<std::string, std::string>>{
           {"model.llm.embed.weight", "model.embed_tokens.weight"},
           {"model.llm.unembed.weight", "lm_head.weight"},
           {"model.llm.layers.3.mlp.gate.bias", "model.layers.3.mlp.gate.e_score_correction_bias"},
           {"model.llm.layers.1.attn.k_sconv.weight", "model.layers.1.self_attn.k_sconv.conv1d.weight"},
           {"model.llm.layers.2.mlp.experts.w2_weight", "model.layers.2.mlp.experts.down_proj"}})
    EXPECT_TRUE(same_bytes(f32(rel, release), f32(hf, name))) << name;
}

TEST(HfExport, BothFormsRoundTripBitExactly) {
  ScratchDir dir;
  const InklingConfig config = load_inkling_config(kTiny);
  const ParamTable a = random_tiny(3);
  HfExportOptions o;
  o.dtype = DType::F32;
  write_hf_export(plan_hf_export(config, "", kTiny, o), dir / "t", a);
  LoadReport rt;
  const ParamTable b = load_table(dir / "t", &rt);
  EXPECT_EQ(rt.format, HfFormat::Transformers);
  EXPECT_TRUE(rt.pass_through.empty());
  EXPECT_EQ(rt.loaded.size(), a.params().size());
  // ... and the loaded table again in the release form (its config from a release checkpoint)
  const std::string release = write_release_init(dir);
  write_hf_export(plan_hf_export(config, release, "", o), dir / "r", b);
  LoadReport rr;
  const ParamTable c = load_table(dir / "r", &rr);
  EXPECT_EQ(rr.format, HfFormat::Release);
  for (size_t i = 0; i < a.params().size(); ++i) {
    EXPECT_TRUE(same_bytes(a.params()[i].value, b.params()[i].value)) << a.params()[i].name;
    EXPECT_TRUE(same_bytes(a.params()[i].value, c.params()[i].value)) << a.params()[i].name;
    EXPECT_EQ(b.params()[i].checkpoint_dtype, DType::F32);
  }
}

TEST(HfExport, DefaultFormIsTheSourcesAndReleaseNeedsTowerConfigs) {
  ScratchDir dir;
  const InklingConfig config = load_inkling_config(kTiny);
  const std::string release = write_release_init(dir);
  HfExportOptions o;
  o.dtype = DType::F32;
  write_hf_export(plan_hf_export(config, "", kTiny, o), dir / "t", random_tiny(4));
  EXPECT_EQ(plan_hf_export(config, release, "", {}).format, HfFormat::Release);
  EXPECT_EQ(plan_hf_export(config, dir / "t", "", {}).format, HfFormat::Transformers);
  EXPECT_EQ(plan_hf_export(config, "", kTiny, {}).format, HfFormat::Transformers);
  // A release init exported in the transformers form, and back: the flag wins.
  o.format = HfFormat::Transformers;
  EXPECT_EQ(plan_hf_export(config, release, "", o).format, HfFormat::Transformers);
  // The release form needs a multimodal config to write: a random init or a transformers init has none.
  o.format = HfFormat::Release;
  expect_error([&] { plan_hf_export(config, "", kTiny, o); },
               {"--hf-format release", "random init", kTiny, "--hf-format transformers"});
  expect_error([&] { plan_hf_export(config, dir / "t", "", o); }, {"--hf-format release", dir / "t", "text config"});
  // ... which --config can supply to a random init (the towers then have no tensors: said so).
  const HfExportPlan p = plan_hf_export(config, "", release, o);
  EXPECT_EQ(p.format, HfFormat::Release);
  ASSERT_FALSE(p.notes.empty());
  EXPECT_NE(p.notes.back().find("tower"), std::string::npos) << p.notes.back();

  expect_error([] { parse_hf_format("hf", "--hf-format"); }, {"--hf-format", "'hf'", "release", "transformers"});
  expect_error([] { parse_hf_export_dtype("fp16", "--save-hf-dtype"); }, {"--save-hf-dtype", "'fp16'", "bf16", "fp32"});
  EXPECT_EQ(parse_hf_export_dtype("fp32", "x"), DType::F32);
  EXPECT_EQ(parse_hf_format("release", "x"), HfFormat::Release);
}

TEST(HfExport, ReleaseConfigFollowsTheTrainedModelAndItsDtype) {
  ScratchDir dir;
  const std::string init = write_release_init(dir);
  // The source says float32 in both places the release uses: both follow the export's dtype.
  json g = golden_release()["config"];
  g["torch_dtype"] = "float32";
  g["text_config"]["torch_dtype"] = "float32";
  write_file_atomic(init + "/config.json", g.dump());
  json c = json::parse(plan_hf_export(load_inkling_config(init), init, "", {}).config_json);
  EXPECT_EQ(c["dtype"], "bfloat16");
  EXPECT_EQ(c["torch_dtype"], "bfloat16");
  EXPECT_EQ(c["text_config"]["torch_dtype"], "bfloat16");
  EXPECT_EQ(c["vision_config"], g["vision_config"]);

  // A --config that changed the model: the text_config becomes the trained model's, with a note.
  InklingConfig changed = load_inkling_config(init);
  changed.rms_norm_eps = 1e-5;
  const HfExportPlan p = plan_hf_export(changed, init, "", {});
  c = json::parse(p.config_json);
  EXPECT_EQ(c["text_config"]["rms_norm_eps"], 1e-5);
  EXPECT_EQ(c["audio_config"], g["audio_config"]);
  ASSERT_EQ(p.notes.size(), 1u);
  EXPECT_NE(p.notes[0].find("text_config"), std::string::npos) << p.notes[0];
}

TEST(HfExport, TransformersCheckpointMissingATensorNamesBothNames) {
  ScratchDir dir;
  HfExportOptions o;
  write_hf_export(plan_hf_export(load_inkling_config(kTiny), "", kTiny, o), dir / "t", random_tiny(5));
  // Drop one tensor: rewrite the file without model.layers.0.mlp.up_proj.weight.
  CheckpointDir ckpt = CheckpointDir::open(dir / "t");
  std::vector<SafetensorsItem> items;
  for (const std::string& n : ckpt.names())
    if (n != "model.layers.0.mlp.up_proj.weight") items.push_back(SafetensorsItem::from_file(n, ckpt.file_of(n), n));
  write_checkpoint_dir(dir / "u", items);
  write_file_atomic(dir / "u/config.json", read_file(dir / "t/config.json"));
  ParamTable t = ParamTable::for_config(load_inkling_config(kTiny));
  expect_error([&] { load_hf_checkpoint(dir / "u", t); },
               {dir / "u", "model.layers.0.mlp.up_proj.weight missing", "model.llm.layers.0.mlp.w13_dn.weight"});
}

}  // namespace
}  // namespace quill
