// Checkpoints that refuse what is not theirs (issue 44, item 3): a resume into another model is
// refused naming the config key, other rows naming rows_sha256 and the flag that accepts them, a
// changed shard naming the file, an edited next_step naming state.json; an --init checkpoint with a
// tensor the model has no place for names it. Each refusal comes before any weight is read.
#include "train/checkpoint_identity.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "data/synthetic.h"
#include "io/safetensors.h"
#include "train/trainer.h"

namespace quill {
namespace {

namespace fs = std::filesystem;

std::string temp_dir(const std::string& name) {
  const std::string d =
      (fs::temp_directory_path() / ("quill-ckpt-id-" + std::to_string(::getpid()) + "-" + name)).string();
  fs::remove_all(d);
  return d;
}

std::string rows_dir(uint64_t seed) {
  const std::string d = temp_dir("rows-" + std::to_string(seed));
  if (!fs::exists(d)) build_synthetic_rows(d, 60, seed, 64, 20);
  return d;
}

TrainOptions tiny(const std::string& out) {
  TrainOptions o;
  o.config_path = std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json";
  o.rows_dir = rows_dir(42);
  o.seed = 5;
  o.steps = 4;
  o.global_batch = 2;
  o.lr.max_lr = 1e-2;
  o.out_dir = out;
  o.quiet = true;
  return o;
}

// A checkpoint of two steps of the tiny model; returns its (iteration) directory.
std::string two_steps(const std::string& name) {
  TrainOptions o = tiny(temp_dir(name));
  o.save_dir = o.out_dir + "/checkpoint";
  o.stop_after = 2;
  run_training(o);
  return o.save_dir + "/iter_0000002";  // --save DIR keeps each checkpoint as DIR/iter_NNNNNNN
}

// Resumes `checkpoint` with `o` changed by the caller; the error's text, "" when it resumed.
std::string resume_error(TrainOptions o, const std::string& checkpoint) {
  o.resume_dir = checkpoint;
  o.out_dir = temp_dir("resumed");
  try {
    run_training(o);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// tiny.json with `edit` applied, written to a file of its own.
std::string edited_config(const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json c = nlohmann::json::parse(std::ifstream(std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json"));
  edit(c);
  const std::string path = temp_dir(name) + ".json";
  std::ofstream(path) << c.dump(2);
  return path;
}

TEST(CheckpointIdentity, AResumeOfAnIntactCheckpointIsAccepted) {
  EXPECT_EQ(resume_error(tiny(""), two_steps("intact")), "");
}

TEST(CheckpointIdentity, SixtyFourFlippedBytesInAShardAreRefusedNamingTheShard) {
  const std::string ckpt = two_steps("flipped");
  const std::string shard = ckpt + "/shard-rank0-of-1.safetensors";
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(fs::file_size(shard) / 2));
    char bytes[64];
    f.read(bytes, 64);
    for (char& b : bytes) b = static_cast<char>(b ^ 0x5a);
    f.seekp(static_cast<std::streamoff>(fs::file_size(shard) / 2));
    f.write(bytes, 64);
  }
  const std::string e = resume_error(tiny(""), ckpt);
  EXPECT_NE(e.find(shard + ": missing, or its bytes do not match the sha256"), std::string::npos) << e;
  EXPECT_NE(e.find("--no-verify-checkpoint"), std::string::npos) << e;
  TrainOptions skip = tiny("");
  skip.verify_checkpoint = false;
  EXPECT_EQ(resume_error(skip, ckpt), "") << "--no-verify-checkpoint resumes it as it is";
}

TEST(CheckpointIdentity, AnEditedNextStepIsRefusedNamingStateJson) {
  const std::string ckpt = two_steps("next-step");
  nlohmann::json state = nlohmann::json::parse(std::ifstream(ckpt + "/state.json"));
  ASSERT_EQ(state["next_step"], 2);
  state["next_step"] = 3;
  std::ofstream(ckpt + "/state.json") << state.dump(2);
  const std::string e = resume_error(tiny(""), ckpt);
  EXPECT_NE(e.find(ckpt + "/state.json: its content does not match its \"sha256\""), std::string::npos) << e;
}

TEST(CheckpointIdentity, ASixLayerCheckpointIntoAFourLayerConfigIsRefusedNamingTheKey) {
  // The deeper model holds every tensor the shallower one needs: only the config tells them apart.
  TrainOptions deep = tiny(temp_dir("six-layers"));
  deep.config_path = edited_config("six", [](nlohmann::json& c) {
    c["num_hidden_layers"] = 6;
    c["layer_types"] = {"hybrid_sliding", "hybrid_sliding", "hybrid", "hybrid_sliding", "hybrid_sliding", "hybrid"};
    c["mlp_layer_types"] = {"dense", "sparse", "sparse", "sparse", "sparse", "sparse"};
  });
  deep.save_dir = deep.out_dir + "/checkpoint";
  deep.stop_after = 1;
  run_training(deep);
  const std::string e = resume_error(tiny(""), deep.save_dir);
  EXPECT_NE(e.find("the checkpoint was written for another model"), std::string::npos) << e;
  EXPECT_NE(e.find("num_hidden_layers 6, this run has 4"), std::string::npos) << e;
}

TEST(CheckpointIdentity, AnotherRmsNormEpsIsRefusedNamingTheKey) {
  const std::string ckpt = two_steps("eps");
  TrainOptions o = tiny("");
  o.config_path = edited_config("eps-config", [](nlohmann::json& c) { c["rms_norm_eps"] = 1e-5; });
  const std::string e = resume_error(o, ckpt);
  EXPECT_NE(e.find("rms_norm_eps 1e-06, this run has 1e-05"), std::string::npos) << e;
}

TEST(CheckpointIdentity, OtherRowsAreRefusedUnlessTheFlagAcceptsThem) {
  const std::string ckpt = two_steps("rows");
  TrainOptions o = tiny("");
  o.rows_dir = rows_dir(43);
  const std::string e = resume_error(o, ckpt);
  EXPECT_NE(e.find("the checkpoint was trained on other rows"), std::string::npos) << e;
  EXPECT_NE(e.find("--no-verify-checkpoint-rows"), std::string::npos) << e;
  o.verify_checkpoint_rows = false;
  EXPECT_EQ(resume_error(o, ckpt), "");
}

TEST(CheckpointIdentity, AnInitCheckpointWithATensorTheModelLacksIsRefusedNamingIt) {
  TrainOptions first = tiny(temp_dir("export"));
  first.steps = 1;
  first.save_hf = true;
  run_training(first);
  const std::string hf = first.out_dir + "/hf";
  // The export again, with one misspelled name beside the real ones.
  const SafetensorsFile file = SafetensorsFile::open(hf + "/model.safetensors");
  std::vector<SafetensorsItem> items;
  for (const std::string& n : file.names()) items.push_back(SafetensorsItem::from_file(n, file, n));
  const std::string extra = file.names().front() + "_typo";
  items.push_back(SafetensorsItem::from_file(extra, file, file.names().front()));
  const std::string init = temp_dir("init");
  fs::create_directories(init);
  fs::copy_file(hf + "/config.json", init + "/config.json");
  write_safetensors(init + "/model.safetensors", items, {{"format", "pt"}});
  TrainOptions o = tiny(temp_dir("from-init"));
  o.config_path = "";
  o.init_dir = init;
  try {
    run_training(o);
    FAIL() << "an --init checkpoint with " << extra << " was loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("1 tensor in the text model's names"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(extra), std::string::npos) << e.what();
  }
}

TEST(CheckpointIdentity, ConfigDifferencesNameEachKeyBothWays) {
  const auto d = config_differences(nlohmann::json{{"a", 1}, {"b", "x"}, {"c", 2}}, nlohmann::json{{"a", 1}, {"b", "y"}, {"d", 3}});
  EXPECT_EQ(d, (std::vector<std::string>{"b x, this run has y", "c 2, this run has (absent)", "d (absent), this run has 3"}));
}

}  // namespace
}  // namespace quill
