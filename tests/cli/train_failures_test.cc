// `quill train` when things go wrong around it (issue 15's reliability defects): a kill at any
// rename of a checkpoint or export swap, a full disk, a torn metrics line, a failed data build.
// Each leaves what the next run needs, names the file, and leaves no leftovers.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "io/dir_swap.h"
#include "util/command.h"

namespace {

namespace fs = std::filesystem;

using quill::test::CommandResult;

CommandResult sh(const std::string& cmd) { return quill::test::run_command(cmd); }

CommandResult quill(const std::string& args) { return sh(std::string(QUILL_BINARY) + " " + args); }

std::string temp(const std::string& name) {
  std::string d = (fs::temp_directory_path() / ("quill-fail-" + std::to_string(::getpid()) + "-" + name)).string();
  fs::remove_all(d);
  return d;
}

std::string rows() {
  static const std::string dir = [] {
    const std::string d = temp("rows");
    EXPECT_EQ(quill("data synth --conversations 50 --row-tokens 64 --out " + d).status, 0);
    return d;
  }();
  return dir;
}

std::string train_flags(int steps) {
  return "train --config " + std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json --rows " + rows() +
         " --seed 3 --global-batch 2 --lr 1e-2 --quiet --steps " + std::to_string(steps);
}

int lines_of(const std::string& path) {
  std::ifstream in(path);
  int n = 0;
  for (std::string line; std::getline(in, line);) n += !line.empty();
  return n;
}

bool has_side_dirs(const std::string& parent) {
  for (const fs::directory_entry& e : fs::directory_iterator(parent)) {
    const std::string n = e.path().filename().string();
    if (n.find(".tmp-") != std::string::npos || n.find(".new-") != std::string::npos ||
        n.find(".old-") != std::string::npos)
      return true;
  }
  return false;
}

// A tmpfs of `bytes` mounted for the test's lifetime (root only; the test skips without it).
class SmallDisk {
 public:
  explicit SmallDisk(const std::string& size) : dir_(temp("tmpfs-" + size)) {
    fs::create_directories(dir_);
    mounted_ = ::mount("tmpfs", dir_.c_str(), "tmpfs", 0, ("size=" + size).c_str()) == 0;
  }
  ~SmallDisk() {
    if (mounted_) ::umount(dir_.c_str());
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  bool mounted() const { return mounted_; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  bool mounted_ = false;
};

TEST(TrainFailures, CheckpointsAreWrittenOnlyWhenAsked) {
  // A plain run wrote a full training checkpoint (52 GB for the slice); now only with --save.
  const std::string a = temp("plain"), b = temp("saved");
  ASSERT_EQ(quill(train_flags(3) + " --out " + a).status, 0);
  EXPECT_FALSE(fs::exists(a + "/checkpoint"));
  CommandResult r = quill(train_flags(3) + " --out " + b + " --save " + b + "/ckpt --save-interval 2");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto state = nlohmann::json::parse(std::ifstream(b + "/ckpt/iter_0000003/state.json"));
  EXPECT_TRUE(fs::exists(b + "/ckpt/iter_0000002/state.json"));
  EXPECT_EQ(state["next_step"].get<int>(), 3);
  r = quill(train_flags(3) + " --out " + temp("interval-alone") + " --save-interval 2");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("--save-interval 2 needs --save DIR"), std::string::npos) << r.output;
}

TEST(TrainFailures, AKillAtAnyRenameLeavesAResumableCheckpointAndExport) {
  // Defect 3: killed between moving the old checkpoint aside and renaming the new one in, only the
  // two side directories remained and --resume failed naming a missing state.json. Here the run
  // is killed at each of its renames in turn (strace's fault injection), checkpoint and export swaps
  // included; every time, what is left resumes.
  if (sh("command -v strace").status != 0) GTEST_SKIP() << "strace is not installed";
  if (sh("strace -f -o /dev/null true").status != 0) GTEST_SKIP() << "strace cannot trace here (no ptrace)";
  const std::string base = temp("kill-base");
  const std::string save = " --save " + base + "/checkpoint --save-hf";
  ASSERT_EQ(quill(train_flags(2) + " --out " + base + save).status, 0);
  // The run under test continues it: two more checkpoints (one a step) and a second export.
  auto continue_run = [&](const std::string& out) {
    return train_flags(4) + " --out " + out + " --resume " + out + "/checkpoint --save " + out +
           "/checkpoint --save-interval 1 --save-hf";
  };
  const std::string counted = temp("kill-count");
  fs::copy(base, counted, fs::copy_options::recursive);
  const std::string log = counted + ".strace";
  ASSERT_EQ(sh("strace -f -qq -e trace=rename -o " + log + " " + QUILL_BINARY + " " + continue_run(counted)).status, 0);
  const int renames = lines_of(log);
  ASSERT_GE(renames, 12) << "expected the checkpoint and export swaps' renames";
  for (int n = 1; n <= renames; ++n) {
    const std::string out = temp("kill-" + std::to_string(n));
    fs::copy(base, out, fs::copy_options::recursive);
    const CommandResult killed = sh("strace -f -qq -o /dev/null -e trace=rename -e inject=rename:signal=SIGKILL:when=" +
                                    std::to_string(n) + " " + QUILL_BINARY + " " + continue_run(out));
    ASSERT_NE(killed.status, 0) << "rename " << n << " was not reached";
    // The export: a complete copy is in place or recoverable.
    quill::recover_dir(out + "/hf");
    EXPECT_TRUE(fs::exists(out + "/hf/model.safetensors") && fs::exists(out + "/hf/config.json"))
        << "kill at rename " << n << " lost the export";
    // The checkpoint: the next run recovers it itself and finishes the job.
    const CommandResult resumed = quill(continue_run(out));
    EXPECT_EQ(resumed.status, 0) << "kill at rename " << n << ": " << resumed.output;
    EXPECT_EQ(lines_of(out + "/metrics.jsonl"), 4) << "kill at rename " << n;
    EXPECT_FALSE(has_side_dirs(out)) << "kill at rename " << n << " left side directories behind";
    EXPECT_FALSE(has_side_dirs(out + "/checkpoint")) << "kill at rename " << n << " left a save's side directories behind";
    fs::remove_all(out);
  }
}

TEST(TrainFailures, AFullDiskStopsTheRunNamingTheMetricsFile) {
  // Defect 4: on a 12 KB tmpfs training went on with metrics cut off mid-line at step 45.
  SmallDisk disk("12k");
  if (!disk.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  const std::string out = disk.dir() + "/run";
  const CommandResult r = quill(train_flags(400) + " --out " + out);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find(out + "/metrics.jsonl: write failed (No space left on device)"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("trained 400 steps"), std::string::npos) << r.output;
}

TEST(TrainFailures, AFullDiskDuringACheckpointLeavesNoTemporaryDirectory) {
  // Defect 12: a failed checkpoint write left checkpoint.tmp-PID, a leak the size of the model.
  SmallDisk disk("1m");
  if (!disk.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  const std::string out = disk.dir() + "/run";
  const CommandResult r = quill(train_flags(2) + " --out " + out + " --save " + out + "/checkpoint");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("No space left on device"), std::string::npos) << r.output;
  ASSERT_TRUE(fs::exists(out));
  EXPECT_FALSE(has_side_dirs(out)) << "a temporary checkpoint directory was left";
}

TEST(TrainFailures, ATornMetricsLineIsDroppedOnResumeAndAnotherBadLineNamesTheFile) {
  // Defect 5: resume failed with a bare JSON parse error naming no file.
  const std::string out = temp("torn");
  ASSERT_EQ(quill(train_flags(4) + " --stop-after 2 --out " + out + " --save " + out + "/checkpoint").status, 0);
  { std::ofstream(out + "/metrics.jsonl", std::ios::app) << "{\"step\": 2, \"lo"; }
  const std::string resume = train_flags(4) + " --out " + out + " --resume " + out + "/checkpoint --save " + out + "/checkpoint";
  CommandResult r = quill(resume);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find(out + "/metrics.jsonl: line 3 is torn"), std::string::npos) << r.output;
  EXPECT_EQ(lines_of(out + "/metrics.jsonl"), 4);

  const std::string bad = temp("bad-line");
  ASSERT_EQ(quill(train_flags(4) + " --stop-after 2 --out " + bad + " --save " + bad + "/checkpoint").status, 0);
  { std::ofstream(bad + "/metrics.jsonl") << "{\"step\": 0}\ngarbage\n{\"step\": 1}\n"; }
  r = quill(train_flags(4) + " --out " + bad + " --resume " + bad + "/checkpoint");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find(bad + "/metrics.jsonl: line 2 is not a metrics line"), std::string::npos) << r.output;
}

TEST(TrainFailures, AFailedDataBuildLeavesNoOutputDirectory) {
  // Defect 12: a failed `data build` left an empty --out.
  const std::string input = temp("bad.jsonl"), out = temp("build-out");
  std::ofstream(input) << "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}\nnot json\n";
  const CommandResult r = quill("data build --input " + input + " --tokenizer byte --row-tokens 64 --quiet --out " + out);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find(input + ":2"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out));
}

TEST(TrainFailures, ABadFlagWritesNothing) {
  // Defect 11: --lr-decay-style bogus was refused only after OUT/metrics.jsonl existed.
  const std::string out = temp("bad-flag");
  const CommandResult r = quill(train_flags(2) + " --lr-decay-style bogus --out " + out);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("--lr-decay-style 'bogus'"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out));
}

TEST(TrainFailures, GpuOnlyKernelChoicesAreRefusedOnTheCpu) {
  // The typed kernel options of the CUDA backend name the flag on the CPU, before anything is written.
  for (const auto& [flag, said] : std::vector<std::pair<std::string, std::string>>{
           {"--attention-dq-order arrival", "--attention-dq-order arrival: the CPU backend's sums have one order"},
           {"--grouped-gemm-kernel wgmma", "--grouped-gemm-kernel wgmma: a GPU kernel"},
           {"--grouped-wgrad-kernel wgmma", "--grouped-wgrad-kernel wgmma: a GPU kernel"},
           {"--grouped-wgrad-kernel cublaslt", "--grouped-wgrad-kernel cublaslt: a GPU kernel"},
           {"--grouped-wgrad-form pingpong", "--grouped-wgrad-form pingpong: a GPU kernel on trial"},
           {"--attention-bias-rows kernels", "--attention-bias-rows kernels: a GPU kernel on trial"},
           {"--attention-forward-form wide", "--attention-forward-form wide: a GPU kernel on trial"},
           {"--attention-backward-form producer", "--attention-backward-form producer: a GPU kernel on trial"}}) {
    const std::string out = temp("gpu-only");
    const CommandResult r = quill(train_flags(2) + " " + flag + " --out " + out);
    EXPECT_EQ(r.status, 1) << flag;
    EXPECT_NE(r.output.find(said), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(out)) << flag;
  }
}

TEST(TrainFailures, AWeightGradientFormWithoutItsKernelIsRefused) {
  // A form of quill's kernel with cuBLASLt chosen for the weight gradient would be recorded and never run.
  const std::string out = temp("form-without-kernel");
  const CommandResult r =
      quill(train_flags(2) + " --grouped-wgrad-form pingpong --grouped-wgrad-kernel cublaslt --out " + out);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("--grouped-wgrad-form pingpong chooses the form of quill's weight-gradient kernel, which "
                          "--grouped-wgrad-kernel cublaslt never runs"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(out));
}

TEST(TrainFailures, TheKernelChoicesAreRecordedInTheSummary) {
  // The CPU's one path under each choice's default name, as a GPU run records the choice it ran (ops/kernel_trials.h).
  const std::string out = temp("kernel-choices");
  const CommandResult r = quill(train_flags(1) + " --out " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  const auto summary = nlohmann::json::parse(std::ifstream(out + "/summary.json"));
  EXPECT_EQ(summary["grouped_wgrad_kernel"], "auto");
  EXPECT_EQ(summary["grouped_wgrad_form"], "half");
  EXPECT_EQ(summary["attention_bias_rows"], "cublaslt");
  EXPECT_EQ(summary["attention_forward_form"], "narrow");
  EXPECT_EQ(summary["attention_backward_form"], "consumers");
}

TEST(TrainFailures, AnUnwritableSaveOutOrTensorBoardDirIsRefusedBeforeTraining) {
  // Issue 44: --save /proc/nope trained every step and only then failed, "cannot create directory"; --out
  // and --tensorboard-dir there failed after the model was loaded, naming no flag. /proc takes no new
  // files even from root, whom access(2) lets through.
  const std::string out = temp("unwritable");
  for (const auto& [flags, said] :
       {std::pair<std::string, std::string>{" --out " + out + " --save /proc/quill-nope",
                                            "--save /proc/quill-nope: cannot create a file in /proc"},
        {" --out " + out + " --save /proc/quill-nope/ckpt", "--save /proc/quill-nope/ckpt: cannot create a file in /proc"},
        {" --out /proc/quill-nope", "--out /proc/quill-nope: cannot create a file in /proc"},
        {" --out " + out + " --tensorboard-dir /proc/quill-nope", "--tensorboard-dir /proc/quill-nope: cannot create a file in /proc"}}) {
    const CommandResult r = quill(train_flags(2) + flags);
    EXPECT_EQ(r.status, 1) << flags;
    EXPECT_NE(r.output.find("quill: error: " + said), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("trained"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(out)) << flags << ": nothing is written (no step ran)";
  }
  // A save directory to be made inside a writable place is accepted, and the probe leaves nothing.
  const std::string parent = temp("writable");
  fs::create_directories(parent);
  ASSERT_EQ(quill(train_flags(1) + " --out " + out + " --save " + parent + "/new/ckpt").status, 0);
  EXPECT_TRUE(fs::exists(parent + "/new/ckpt/latest_checkpointed_iteration.txt"));
  EXPECT_EQ(std::distance(fs::directory_iterator(parent), fs::directory_iterator()), 1);
}

TEST(TrainFailures, AMissingOrWrongRoutingFileIsRefusedBeforeTraining) {
  // Issue 44: --replay-routing FILE with no such file failed at step K, leaving OUT/metrics.jsonl.
  const std::string out = temp("routing");
  const std::string dump = train_flags(2) + " --out " + out + " --dump-grads-step 1 --replay-routing ";
  CommandResult r = quill(dump + out + "-missing.safetensors");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("quill: error: --replay-routing " + out + "-missing.safetensors: no such file"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(out)) << "nothing is written";
  // A safetensors file without the routing tensors: refused naming the first one missing.
  const std::string other = temp("other.safetensors");
  {
    const std::string header = R"({"x":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})";
    std::ofstream f(other, std::ios::binary);
    const uint64_t n = header.size();
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << header << std::string(4, '\0');
  }
  r = quill(dump + other);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("--replay-routing: " + other + ": tensor model.llm.layers.1.mlp.gate.topk missing"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(out));
}

TEST(TrainFailures, AnIncompleteInitDirectoryIsRefusedNamingTheMissingFile) {
  // Issue 44: --init DIR with model.safetensors but no config.json said "DIR: malformed JSON" (the
  // directory read as an empty config file); so did --config DIR of a directory without one.
  const std::string base = temp("init");
  const std::string weights_only = base + "/weights-only", config_only = base + "/config-only", empty = base + "/empty";
  fs::create_directories(weights_only);
  fs::create_directories(config_only);
  fs::create_directories(empty);
  std::ofstream(weights_only + "/model.safetensors") << "not read";
  fs::copy_file(std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json", config_only + "/config.json");
  const std::string job = " --rows " + rows() + " --steps 1 --global-batch 1 --quiet --out " + base + "/out";
  for (const auto& [flags, said] : std::vector<std::pair<std::string, std::string>>{
           {"--init " + weights_only, "--init " + weights_only + ": no config.json (the model's shape)"},
           {"--init " + empty, "--init " + empty + ": no config.json (the model's shape)"},
           {"--init " + config_only,
            "--init " + config_only + ": no model.safetensors and no model.safetensors.index.json: not a Hugging Face"},
           {"--init " + base + "/missing", "--init " + base + "/missing: no such directory"},
           {"--init " + config_only + "/config.json", "--init " + config_only + "/config.json: not a directory"},
           {"--config " + empty, empty + ": no config.json in this directory"}}) {
    const CommandResult r = quill("train " + flags + job);
    EXPECT_EQ(r.status, 1) << flags;
    EXPECT_NE(r.output.find("quill: error: " + said), std::string::npos) << flags << "\n" << r.output;
    EXPECT_FALSE(fs::exists(base + "/out"));
  }
}

}  // namespace
