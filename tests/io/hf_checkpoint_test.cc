// The Inkling checkpoint mapping on a hand-made parameter table (independent of ParamTable::for_config):
// gate/up interleave, dtype round trips, pass-through tensors and failure atomicity.
#include "io/hf_checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "base/file_util.h"
#include "io/io_test_util.h"
#include "util/test_util.h"

namespace quill {
namespace {

namespace fs = std::filesystem;
using test::expect_error;
using test::same_bytes;
using test::ScratchDir;

const char* kW13 = "model.llm.layers.2.mlp.experts.w13_weight";   // [E=2, 2F=6, D=3], interleaved
const char* kDenseW13 = "model.llm.layers.0.mlp.w13_dn.weight";  // [2F=4, D=3], interleaved
const char* kEmbed = "model.llm.embed.weight";
const char* kBias = "model.llm.layers.2.mlp.gate.bias";  // buffer, F32 in the release
const char* kScale = "model.llm.layers.0.mlp.global_scale";
const std::string kConfig = "{\"model_type\": \"inkling\", \"hidden_size\": 3}\n";

Param make_param(const std::string& name, const Shape& shape, DType dtype, bool interleaved = false,
                 bool buffer = false) {
  Param p;
  p.name = name;
  p.shape = shape;
  p.checkpoint_dtype = dtype;
  p.gate_up_interleaved = interleaved;
  p.is_buffer = buffer;
  p.trainable = !buffer;
  p.value = Tensor::zeros(shape, DType::F32);
  return p;
}

// Fresh table with zero values (what a loader fills).
ParamTable make_table() {
  ParamTable t;
  t.params().push_back(make_param(kEmbed, {5, 3}, DType::BF16));
  t.params().push_back(make_param(kDenseW13, {4, 3}, DType::BF16, true));
  t.params().push_back(make_param(kW13, {2, 6, 3}, DType::BF16, true));
  t.params().push_back(make_param(kBias, {4}, DType::F32, false, true));
  t.params().push_back(make_param(kScale, {1}, DType::BF16));
  return t;
}

ParamTable random_table(uint64_t seed) {
  ParamTable t = make_table();
  for (Param& p : t.params()) test::fill_normal(p.value, seed++, 0.7);
  return t;
}

bool same_bits(const ParamTable& a, const ParamTable& b) {
  if (a.params().size() != b.params().size()) return false;
  for (size_t i = 0; i < a.params().size(); ++i)
    if (!same_bytes(a.params()[i].value, b.params()[i].value)) return false;
  return true;
}

// A checkpoint as a release would have it: the table's tensors in BF16 (bias F32), plus tensors
// quill does not model.
std::vector<std::pair<std::string, Tensor>> release_tensors() {
  std::vector<std::pair<std::string, Tensor>> out;
  uint64_t seed = 100;
  ParamTable table = make_table();
  for (const Param& p : table.params())
    out.push_back({p.name, convert_dtype(test::random_tensor(p.shape, DType::F32, seed++), p.checkpoint_dtype)});
  out.push_back({"model.mtp.0.input_proj.weight", convert_dtype(test::random_tensor({3, 6}, DType::F32, 7), DType::BF16)});
  out.push_back({"model.vision.patch.weight", test::random_tensor({2, 2}, DType::F32, 8)});
  Tensor ids = Tensor::empty({3}, DType::I64);
  for (int i = 0; i < 3; ++i) ids.data_as<int64_t>()[i] = 1000 * i - 7;
  out.push_back({"model.audio.ids", ids});
  return out;
}

std::string write_release(const ScratchDir& dir, uint64_t max_shard_bytes = 5'000'000'000) {
  std::string path = dir / "release";
  std::vector<SafetensorsItem> items;
  for (const auto& [n, t] : release_tensors()) items.push_back(SafetensorsItem::from_tensor(n, t));
  // one tensor in a dtype quill cannot compute in, as raw bytes
  SafetensorsItem f8;
  f8.name = "model.vision.fp8_scale";
  f8.dtype = "F8_E4M3";
  f8.shape = {5};
  f8.nbytes = 5;
  f8.bytes = [] {
    Tensor t = Tensor::empty({5}, DType::U8);
    std::memcpy(t.data(), "\x01\x7f\x80\xfe\x33", 5);
    return t;
  };
  items.push_back(f8);
  CheckpointWriteOptions opt;
  opt.max_shard_bytes = max_shard_bytes;
  write_checkpoint_dir(path, items, opt);
  test::write_bytes(dir / "release/config.json", "{\"source\": true}");
  test::write_bytes(dir / "release/tokenizer.json", "{\"tok\": 1}");
  return path;
}

TEST(GateUp, InterleaveOnExpertTensorGivesDocumentedRowOrder) {
  // x[e, r, c] = 100e + 10r + c in checkpoint (interleaved) order.
  Tensor ck = Tensor::empty({2, 6, 3}, DType::F32);
  for (int e = 0; e < 2; ++e)
    for (int r = 0; r < 6; ++r)
      for (int c = 0; c < 3; ++c) ck.data_as<float>()[(e * 6 + r) * 3 + c] = static_cast<float>(100 * e + 10 * r + c);
  Tensor split = deinterleave_gate_up(ck);
  for (int e = 0; e < 2; ++e)
    for (int f = 0; f < 3; ++f)
      for (int c = 0; c < 3; ++c) {
        EXPECT_EQ(split.data_as<float>()[(e * 6 + f) * 3 + c], 100 * e + 10 * (2 * f) + c);          // gate f
        EXPECT_EQ(split.data_as<float>()[(e * 6 + 3 + f) * 3 + c], 100 * e + 10 * (2 * f + 1) + c);  // up f
      }
  EXPECT_TRUE(same_bytes(interleave_gate_up(split), ck));
  // any dtype, same row moves
  Tensor bf = convert_dtype(ck, DType::BF16);
  EXPECT_TRUE(same_bytes(deinterleave_gate_up(bf), convert_dtype(split, DType::BF16)));
  expect_error([] { deinterleave_gate_up(Tensor::zeros({3, 2}, DType::F32)); }, {"[3, 2]", "even"});
  expect_error([] { deinterleave_gate_up(Tensor::zeros({4}, DType::F32)); }, {"[4]"});
}

TEST(HfCheckpoint, LoadDeinterleavesAndRecordsDtypes) {
  ScratchDir dir;
  std::string src = write_release(dir);
  ParamTable t = make_table();
  for (Param& p : t.params()) p.checkpoint_dtype = DType::F64;  // must be overwritten
  Tensor old_storage = t.params()[0].value;
  LoadReport report;
  load_hf_checkpoint(src, t, &report);

  auto release = release_tensors();
  for (size_t i = 0; i < t.params().size(); ++i) {
    const Param& p = t.params()[i];
    Tensor expect = convert_dtype(release[i].second, DType::F32);
    if (p.gate_up_interleaved) expect = deinterleave_gate_up(expect);
    EXPECT_TRUE(same_bytes(p.value, expect)) << p.name;
    EXPECT_EQ(p.checkpoint_dtype, release[i].second.dtype()) << p.name;
  }
  EXPECT_EQ(t.params()[0].value.data(), old_storage.data());  // filled in place
  // expert 1, up row 2 (= checkpoint row 5) of the w13
  const Param& w13 = t.params()[2];
  Tensor ck = convert_dtype(release[2].second, DType::F32);
  for (int c = 0; c < 3; ++c) EXPECT_EQ(w13.value.data_as<float>()[(6 + 3 + 2) * 3 + c], ck.data_as<float>()[(6 + 5) * 3 + c]);

  EXPECT_EQ(report.loaded.size(), 5u);
  EXPECT_EQ(report.pass_through, (std::vector<std::string>{"model.audio.ids", "model.mtp.0.input_proj.weight",
                                                           "model.vision.fp8_scale", "model.vision.patch.weight"}));
}

TEST(HfCheckpoint, F32SaveLoadIsBitExact) {
  ScratchDir dir;
  ParamTable t = random_table(1);
  t.params()[0].value.data_as<float>()[0] = -0.0f;
  t.params()[0].value.data_as<float>()[1] = 1e-42f;  // subnormal
  SaveOptions opt;
  opt.force_dtype = DType::F32;
  save_hf_checkpoint(dir / "out", t, "", kConfig, opt);
  EXPECT_EQ(read_file(dir / "out/config.json"), kConfig);
  ParamTable back = make_table();
  load_hf_checkpoint(dir / "out", back);
  EXPECT_TRUE(same_bits(t, back));
  for (const Param& p : back.params()) EXPECT_EQ(p.checkpoint_dtype, DType::F32);
  // the file holds the interleaved layout
  CheckpointDir c = CheckpointDir::open(dir / "out");
  EXPECT_TRUE(same_bytes(c.tensor(kW13), interleave_gate_up(t.params()[2].value)));
}

TEST(HfCheckpoint, Bf16SaveRoundsToNearestEvenAndReloadsExactly) {
  ScratchDir dir;
  ParamTable t = random_table(2);
  // a tie: 1 + 2^-8 sits halfway between bf16 1.0 and 1 + 2^-7; even mantissa wins (1.0)
  t.params()[0].value.data_as<float>()[0] = 1.0f + 1.0f / 256;
  save_hf_checkpoint(dir / "out", t, "", kConfig);
  CheckpointDir c = CheckpointDir::open(dir / "out");
  EXPECT_EQ(c.entry(kEmbed).dtype_str, "BF16");
  EXPECT_EQ(c.entry(kBias).dtype_str, "F32");
  EXPECT_EQ(bf16_to_f32(c.tensor(kEmbed).data_as<uint16_t>()[0]), 1.0f);

  ParamTable back = make_table();
  load_hf_checkpoint(dir / "out", back);
  for (size_t i = 0; i < t.params().size(); ++i) {
    const Param& p = t.params()[i];
    Tensor expect = convert_dtype(convert_dtype(p.value, p.checkpoint_dtype), DType::F32);
    EXPECT_TRUE(same_bytes(back.params()[i].value, expect)) << p.name;
  }
}

TEST(HfCheckpoint, SaveOfLoadReproducesTheFileAndPassThroughBytes) {
  ScratchDir dir;
  std::string src = write_release(dir, /*max_shard_bytes=*/80);  // a sharded source
  ParamTable t = make_table();
  load_hf_checkpoint(src, t);
  SaveOptions opt;
  opt.max_shard_bytes = 100;
  save_hf_checkpoint(dir / "out", t, src, kConfig, opt);

  CheckpointDir a = CheckpointDir::open(src), b = CheckpointDir::open(dir / "out");
  EXPECT_TRUE(b.sharded());
  EXPECT_EQ(a.names(), b.names());
  for (const std::string& n : a.names()) {
    EXPECT_EQ(a.entry(n).dtype_str, b.entry(n).dtype_str) << n;
    EXPECT_EQ(a.entry(n).shape, b.entry(n).shape) << n;
    EXPECT_TRUE(same_bytes(a.raw(n), b.raw(n))) << n;
  }
  EXPECT_EQ(read_file(dir / "out/config.json"), kConfig);                 // the caller's, not the source's
  EXPECT_EQ(read_file(dir / "out/tokenizer.json"), "{\"tok\": 1}");       // side file carried along
  for (const auto& e : fs::directory_iterator(dir.path()))                // no temporaries beside it
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}

TEST(HfCheckpoint, F16CheckpointLoadsAndSavesBack) {
  ScratchDir dir;
  ParamTable t = random_table(3);
  SaveOptions opt;
  opt.force_dtype = DType::F16;
  save_hf_checkpoint(dir / "a", t, "", kConfig, opt);
  ParamTable back = make_table();
  load_hf_checkpoint(dir / "a", back);
  for (const Param& p : back.params()) EXPECT_EQ(p.checkpoint_dtype, DType::F16);
  EXPECT_LT(test::max_abs_diff(back.params()[2].value, t.params()[2].value), 2e-3);
  save_hf_checkpoint(dir / "b", back, "", kConfig);
  CheckpointDir a = CheckpointDir::open(dir / "a"), b = CheckpointDir::open(dir / "b");
  for (const std::string& n : a.names()) EXPECT_TRUE(same_bytes(a.raw(n), b.raw(n))) << n;
}

TEST(HfCheckpoint, MissingTensorAndWrongShapeNameTheTensor) {
  ScratchDir dir;
  std::string src = write_release(dir);
  ParamTable t = make_table();
  t.params().push_back(make_param("model.llm.layers.9.attn.wq_du.weight", {3, 3}, DType::BF16));
  expect_error([&] { load_hf_checkpoint(src, t); }, {src, "tensor model.llm.layers.9.attn.wq_du.weight missing"});

  ParamTable w = make_table();
  w.params()[2].shape = {2, 8, 3};
  w.params()[2].value = Tensor::zeros({2, 8, 3}, DType::F32);
  expect_error([&] { load_hf_checkpoint(src, w); }, {src, kW13, "[2, 6, 3]", "[2, 8, 3]"});

  ParamTable i = make_table();
  i.params().push_back(make_param("model.audio.ids", {3}, DType::BF16));
  expect_error([&] { load_hf_checkpoint(src, i); }, {"model.audio.ids", "I64"});
}

TEST(HfCheckpoint, FailedSaveLeavesNoOutputDirectory) {
  ScratchDir dir;
  std::string out = dir / "out";
  std::string tmp = out + ".tmp-" + std::to_string(::getpid());

  ParamTable bad = random_table(4);
  bad.params()[1].value = Tensor::zeros({3, 4}, DType::F32);  // table says [4, 3]
  expect_error([&] { save_hf_checkpoint(out, bad, "", kConfig); }, {kDenseW13, "[3, 4]", "[4, 3]"});
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(tmp));

  ParamTable good = random_table(5);
  expect_error([&] { save_hf_checkpoint(out, good, dir / "no_such_source", kConfig); }, {"no_such_source"});
  EXPECT_FALSE(fs::exists(out));
  expect_error([&] { save_hf_checkpoint(out, good, "", "{not json"); }, {"config.json"});
  EXPECT_FALSE(fs::exists(out));

  // a gate/up parameter with an odd row count
  ParamTable odd = random_table(6);
  odd.params().push_back(make_param("model.llm.layers.1.mlp.w13_dn.weight", {3, 2}, DType::BF16, true));
  test::fill_normal(odd.params().back().value, 9);
  expect_error([&] { save_hf_checkpoint(out, odd, "", kConfig); }, {"w13_dn", "[3, 2]"});
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(tmp));
}

TEST(HfCheckpoint, OverwriteRulesAndInPlaceSave) {
  ScratchDir dir;
  std::string src = write_release(dir);
  ParamTable t = make_table();
  load_hf_checkpoint(src, t);
  for (Param& p : t.params()) p.value.data_as<float>()[0] = 0.5f;

  fs::create_directories(dir / "empty");
  save_hf_checkpoint(dir / "empty", t, src, kConfig);  // an empty directory is fine
  EXPECT_TRUE(CheckpointDir::is_checkpoint_dir(dir / "empty"));

  // src is not empty: refused, untouched
  expect_error([&] { save_hf_checkpoint(src, t, src, kConfig); }, {src, "not empty"});
  EXPECT_EQ(read_file(dir / "release/config.json"), "{\"source\": true}");

  SaveOptions opt;
  opt.overwrite = true;
  save_hf_checkpoint(src + "/", t, src, kConfig, opt);  // in place, trailing slash
  ParamTable back = make_table();
  LoadReport report;
  load_hf_checkpoint(src, back, &report);
  for (const Param& p : back.params()) EXPECT_EQ(p.value.data_as<float>()[0], 0.5f) << p.name;
  EXPECT_EQ(report.pass_through.size(), 4u);
  CheckpointDir c = CheckpointDir::open(src);
  Tensor f8 = c.raw("model.vision.fp8_scale");
  EXPECT_EQ(std::string(static_cast<const char*>(f8.data()), 5), std::string("\x01\x7f\x80\xfe\x33", 5));
  EXPECT_EQ(c.entry("model.vision.fp8_scale").dtype_str, "F8_E4M3");
  EXPECT_EQ(read_file(src + "/config.json"), kConfig);
  for (const auto& e : fs::directory_iterator(dir.path())) {
    std::string name = e.path().filename().string();
    EXPECT_TRUE(name == "release" || name == "empty") << name;
  }
}

}  // namespace
}  // namespace quill
