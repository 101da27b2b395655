// End-to-end training on the CPU reference: the loss falls, a resumed run is bit-identical to an
// uninterrupted one, a NaN stops the run, and the Hugging Face export round-trips.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <map>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "data/synthetic.h"
#include "io/hf_checkpoint.h"
#include "train/train_checkpoint.h"
#include "io/safetensors.h"
#include "train/trainer.h"

namespace quill {
namespace {

namespace fs = std::filesystem;

std::string temp_dir(const std::string& name) {
  // One folder per process: CTest runs each test as its own process, possibly in parallel.
  const std::string d =
      (fs::temp_directory_path() / ("quill-train-test-" + std::to_string(::getpid()) + "-" + name)).string();
  fs::remove_all(d);
  return d;
}

const std::string& shared_rows() {
  static const std::string dir = [] {
    std::string d = temp_dir("rows");
    build_synthetic_rows(d, 200, 42, 64, 40);
    return d;
  }();
  return dir;
}

double test_sum_squares(const Tensor& t) {
  double s = 0;
  for (int64_t i = 0; i < t.numel(); ++i) s += static_cast<double>(t.data_as<float>()[i]) * t.data_as<float>()[i];
  return s;
}

TrainOptions tiny_options(const std::string& out) {
  TrainOptions o;
  o.config_path = std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json";
  o.rows_dir = shared_rows();
  o.seed = 5;
  o.steps = 6;
  o.global_batch = 3;
  o.lr.max_lr = 1e-2;
  o.lr.min_lr = 1e-3;
  o.lr.warmup_fraction = 0.2;
  o.adam.weight_decay = 0.1;
  o.freeze_patterns = {"*.rel_logits_proj.proj", "*global_scale"};
  o.out_dir = out;
  o.quiet = true;
  return o;
}

std::vector<nlohmann::json> read_metrics(const std::string& out) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(out + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

// Megatron's rule (iteration % eval_interval == 0, iterations from 1) and the evaluation at the end, once.
TEST(Training, EvaluationStepsAreEveryIntervalAndTheLast) {
  std::vector<int64_t> steps;
  for (int64_t s = 0; s < 7; ++s)
    if (is_eval_step(s, 3, 7)) steps.push_back(s);
  EXPECT_EQ(steps, (std::vector<int64_t>{2, 5, 6}));
  steps.clear();
  for (int64_t s = 0; s < 6; ++s)
    if (is_eval_step(s, 3, 6)) steps.push_back(s);
  EXPECT_EQ(steps, (std::vector<int64_t>{2, 5}));
  steps.clear();
  for (int64_t s = 0; s < 4; ++s)
    if (is_eval_step(s, 0, 4)) steps.push_back(s);
  EXPECT_EQ(steps, (std::vector<int64_t>{3})) << "--eval-interval 0: after the last step only";
}

TEST(Training, LossFallsAndMetricsHaveEveryField) {
  TrainOptions o = tiny_options(temp_dir("falls"));
  o.steps = 12;
  TrainResult r = run_training(o);
  ASSERT_EQ(r.steps.size(), 12u);
  EXPECT_LT(r.steps.back().loss, r.steps.front().loss - 0.5);
  auto lines = read_metrics(o.out_dir);
  ASSERT_EQ(lines.size(), 12u);
  for (const char* key : {"step", "loss", "grad_norm", "lr", "tokens", "step_time_s", "expert_tokens"})
    EXPECT_TRUE(lines[0].contains(key)) << key;
  EXPECT_EQ(lines[0]["lr"].get<double>(), 0.0);  // warm-up starts at 0, as Megatron
  // Three MoE layers, 8 experts each; every token goes to top_k = 2 experts.
  ASSERT_EQ(lines[0]["expert_tokens"].size(), 3u);
  int64_t routed = 0;
  for (auto& n : lines[0]["expert_tokens"][0]) routed += n.get<int64_t>();
  EXPECT_EQ(routed, 2 * lines[0]["tokens"].get<int64_t>());
}

TEST(Training, ResumeIsBitIdenticalToAnUninterruptedRun) {
  TrainOptions full = tiny_options(temp_dir("full"));
  TrainResult uninterrupted = run_training(full);

  TrainOptions first = tiny_options(temp_dir("resumed"));
  first.stop_after = 2;
  first.save_dir = first.out_dir + "/checkpoint";
  run_training(first);
  TrainOptions second = tiny_options(first.out_dir);
  second.save_dir = first.save_dir;
  second.resume_dir = first.out_dir + "/checkpoint";
  run_training(second);

  auto a = read_metrics(full.out_dir), b = read_metrics(first.out_dir);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]["loss"].get<double>(), b[i]["loss"].get<double>()) << "step " << i;
    EXPECT_EQ(a[i]["grad_norm"].get<double>(), b[i]["grad_norm"].get<double>()) << "step " << i;
  }
}

TEST(Training, NonFiniteLossStopsWithAClearError) {
  // An init checkpoint holding a NaN: the first loss is NaN and the run must stop, not train on.
  const std::string init = temp_dir("nan-init");
  InklingConfig config = load_inkling_config(std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json");
  ParamTable params = ParamTable::for_config(config);
  params.init_random(3);
  params.at("model.llm.norm.weight").value.data_as<float>()[0] = NAN;
  SaveOptions save;
  save.force_dtype = DType::F32;
  save_hf_checkpoint(init, params, "", config_to_hf_json(config), save);

  TrainOptions o = tiny_options(temp_dir("nan"));
  o.config_path.clear();
  o.init_dir = init;
  try {
    run_training(o);
    FAIL() << "a NaN loss must stop the run";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("loss is nan"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(o.out_dir + "/checkpoint"));
}

TEST(Training, HuggingFaceExportLoadsBackBitExactly) {
  TrainOptions o = tiny_options(temp_dir("export"));
  o.steps = 2;
  o.save_hf = true;
  run_training(o);
  InklingConfig config = load_inkling_config(o.out_dir + "/hf");  // config.json written beside the weights
  ParamTable a = ParamTable::for_config(config), b = ParamTable::for_config(config);
  load_hf_checkpoint(o.out_dir + "/hf", a);
  SaveOptions save;
  save.overwrite = true;
  const std::string again = temp_dir("export-again");
  save_hf_checkpoint(again, a, o.out_dir + "/hf", config_to_hf_json(config), save);
  load_hf_checkpoint(again, b);
  for (size_t i = 0; i < a.params().size(); ++i) {
    const Param &pa = a.params()[i], &pb = b.params()[i];
    ASSERT_EQ(pa.checkpoint_dtype, pb.checkpoint_dtype) << pa.name;
    EXPECT_EQ(std::memcmp(pa.value.data(), pb.value.data(), pa.value.nbytes()), 0) << pa.name;
  }
}

// The trained fp32 weights (the training checkpoint's) against an fp32 export loaded back.
void expect_export_holds_trained_weights(const std::string& out_dir) {
  InklingConfig config = load_inkling_config(out_dir + "/hf");
  ParamTable t = ParamTable::for_config(config);
  load_hf_checkpoint(out_dir + "/hf", t);
  std::map<std::string, Tensor> trained;
  for (auto& [name, value] : checkpoint_values(out_dir + "/checkpoint")) trained[name] = value;
  for (const Param& p : t.params()) {
    const Tensor w = trained.at(p.name);
    ASSERT_EQ(w.nbytes(), p.value.nbytes()) << p.name;
    EXPECT_EQ(std::memcmp(w.data(), p.value.data(), w.nbytes()), 0) << p.name;
  }
}

TEST(Training, RandomInitExportsTheTransformersForm) {
  TrainOptions o = tiny_options(temp_dir("export-transformers"));
  o.steps = 2;
  o.save_hf = true;
  o.save_dir = o.out_dir + "/checkpoint";
  o.hf_export.dtype = DType::F32;
  run_training(o);
  const auto config = nlohmann::json::parse(std::ifstream(o.out_dir + "/hf/config.json"));
  EXPECT_EQ(config["architectures"][0], "InklingForCausalLM");
  EXPECT_EQ(config["dtype"], "float32");
  EXPECT_TRUE(SafetensorsFile::open(o.out_dir + "/hf/model.safetensors").contains("lm_head.weight"));
  expect_export_holds_trained_weights(o.out_dir);
}

TEST(Training, ReleaseInitExportsTheReleaseForm) {
  // A release-format init: the multimodal config.json make_init.py writes, release names and dtypes.
  const std::string init = temp_dir("release-init");
  const auto golden = nlohmann::json::parse(std::ifstream(std::string(QUILL_FIXTURES) + "/hf/names/tiny.release.json"));
  InklingConfig config = parse_inkling_config(golden["config"].dump(), "tiny.release.json");
  ParamTable params = ParamTable::for_config(config);
  params.init_random(8);
  save_hf_checkpoint(init, params, "", golden["config"].dump(2));

  TrainOptions o = tiny_options(temp_dir("export-release"));
  o.config_path.clear();
  o.init_dir = init;
  o.steps = 2;
  o.save_hf = true;
  o.save_dir = o.out_dir + "/checkpoint";
  o.hf_export.dtype = DType::F32;
  run_training(o);
  auto written = nlohmann::json::parse(std::ifstream(o.out_dir + "/hf/config.json"));
  EXPECT_EQ(written["dtype"], "float32");
  written.erase("dtype");
  EXPECT_EQ(written, golden["config"]);  // the release's own config.json
  EXPECT_TRUE(SafetensorsFile::open(o.out_dir + "/hf/model.safetensors").contains("model.llm.unembed.weight"));
  expect_export_holds_trained_weights(o.out_dir);
}

TEST(Training, AnExportThatCannotBeMadeStopsTheRunBeforeItsFirstStep) {
  TrainOptions o = tiny_options(temp_dir("export-refused"));
  o.save_hf = true;
  o.hf_export.format = HfFormat::Release;  // a random init has no multimodal config to write
  try {
    run_training(o);
    FAIL() << "--hf-format release from a random init must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--hf-format release"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(o.out_dir + "/metrics.jsonl"));
}

TEST(Training, DumpsGradientsOfOneStepInCheckpointLayout) {
  TrainOptions o = tiny_options(temp_dir("dump"));
  o.steps = 2;
  o.dump_grads_step = 1;
  run_training(o);
  const SafetensorsFile f = SafetensorsFile::open(o.out_dir + "/grads_step1.safetensors");
  InklingConfig config = load_inkling_config(o.config_path);
  ParamTable table = ParamTable::for_config(config);
  table.freeze(o.freeze_patterns);
  size_t trainable = 0;
  for (const Param& p : table.params()) {
    if (!p.trainable) {
      EXPECT_FALSE(f.contains(p.name)) << p.name;
      continue;
    }
    ++trainable;
    ASSERT_TRUE(f.contains(p.name)) << p.name;
    EXPECT_EQ(f.entry(p.name).shape, p.shape) << p.name;
    EXPECT_GT(test_sum_squares(f.tensor(p.name)), 0.0) << p.name;
  }
  EXPECT_EQ(f.names().size(), trainable);
}

}  // namespace
}  // namespace quill

namespace quill {
namespace {

// A training checkpoint resumed into another model (here: a narrower dense MLP, the same names) is
// refused naming the tensor and both shapes, not read as a prefix of the other model's values.
TEST(Training, ResumeIntoAnotherModelIsRefusedNamingTheConfigKey) {
  TrainOptions first = tiny_options(temp_dir("other-model-a"));
  first.steps = 2;
  first.save_dir = first.out_dir + "/checkpoint";
  run_training(first);
  nlohmann::json config = nlohmann::json::parse(std::ifstream(first.config_path));
  config["intermediate_size"] = config["intermediate_size"].get<int64_t>() / 2;
  const std::string narrow = temp_dir("other-model-config") + ".json";
  std::ofstream(narrow) << config.dump();
  TrainOptions second = tiny_options(temp_dir("other-model-b"));
  second.config_path = narrow;
  second.steps = 4;
  second.resume_dir = first.save_dir;
  try {
    run_training(second);
    FAIL() << "resumed another model's checkpoint";
  } catch (const Error& e) {
    // Refused by the config it was written for (train/checkpoint_identity.h), key by key, before any tensor.
    EXPECT_NE(std::string(e.what()).find("intermediate_size 96, this run has 48"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("written for another model"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace quill
