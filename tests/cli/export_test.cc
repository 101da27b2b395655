// `quill export` (a Hugging Face checkpoint from a training checkpoint) and the in-run `--save-hf` as a
// user meets them: the export of a checkpoint on 1, 2 and 3 ranks is byte-identical to the run's own
// export, for a run on one rank and for TP2 x PP2 and EP2 x DP2 layouts (bf16 and fp32, frozen
// tensors); a run's --save DIR gives its latest iteration or --ckpt-step's, as --load does; bad input is refused with one message naming the file (a missing directory, a directory
// that is not a training checkpoint, a corrupted shard, an edited state.json, another model's
// --config, a non-empty --out) and leaves no --out; `quill plan` counts the export's host memory.
// Every mpirun has its standard input closed and a time limit.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/file_util.h"
#include "util/command.h"
#include "util/run_dir.h"

namespace {

namespace fs = std::filesystem;

const std::string kQuill = QUILL_BINARY, kSrc = QUILL_SOURCE_DIR;
const std::string kTiny = kSrc + "/configs/tiny.json";

std::string temp(const std::string& name) { return quill::test::fresh_temp_dir("export", name); }

quill::test::CommandResult run(const std::string& cmd) { return quill::test::run_command(cmd); }

void run_ok(const std::string& cmd) {
  const quill::test::CommandResult r = run(cmd);
  ASSERT_EQ(r.status, 0) << cmd << "\n" << r.output;
}

std::string launch(int ranks) {
  return ranks == 1 ? kQuill : "timeout -k 10 240 " + quill::test::mpirun_command(ranks) + kQuill;
}

// Every file of two directories, byte for byte (names and contents), as cmp would.
void expect_same_files(const std::string& a, const std::string& b) {
  std::vector<std::string> na, nb;
  for (const auto& e : fs::directory_iterator(a)) na.push_back(e.path().filename().string());
  for (const auto& e : fs::directory_iterator(b)) nb.push_back(e.path().filename().string());
  std::sort(na.begin(), na.end());
  std::sort(nb.begin(), nb.end());
  ASSERT_EQ(na, nb) << a << " vs " << b;
  for (const std::string& n : na) EXPECT_TRUE(quill::read_file(a + "/" + n) == quill::read_file(b + "/" + n)) << a << "/" << n << " differs from " << b;
}

std::string rows_dir() {
  static const std::string rows = [] {
    const std::string r = temp("rows");
    run_ok(kQuill + " data synth --conversations 200 --row-tokens 32 --max-rows 64 --out " + r);
    return r;
  }();
  return rows;
}

// A run with --save and --save-hf; returns its --out.
std::string train(const std::string& name, int ranks, const std::string& layout, const std::string& extra) {
  const std::string out = temp(name);
  run_ok(launch(ranks) + " train --config " + kTiny + " --rows " + rows_dir() +
         " --seed 3 --steps 2 --global-batch 4 --lr 1e-2 --quiet --save-hf " + layout + " " + extra + " --out " + out +
         " --save " + out + "/checkpoint");
  return out;
}

TEST(Export, CheckpointOnAnyRanksEqualsTheInRunExport) {
  struct Run {
    const char* name;
    int ranks;
    std::string layout, extra;
  };
  for (const Run& r : {Run{"one", 1, "", "--save-hf-dtype bf16"},
                       Run{"tp2pp2", 4, "--tp 2 --pp 2 --pp-layers 1,3", "--save-hf-dtype fp32 --freeze-preset miles"},
                       Run{"ep2dp2", 2, "--ep 2 --dp 2", "--freeze-preset miles"}}) {
    SCOPED_TRACE(r.name);
    const std::string out = train(r.name, r.ranks, r.layout, r.extra);
    const std::string dtype = r.extra.find("fp32") != std::string::npos ? "fp32" : "bf16";
    for (int ranks : {1, 2, 3}) {
      SCOPED_TRACE(ranks);
      const std::string exported = temp(std::string(r.name) + "-export" + std::to_string(ranks));
      run_ok(launch(ranks) + " export --checkpoint " + out + "/checkpoint --out " + exported + " --config " + kTiny +
             " --save-hf-dtype " + dtype + " --quiet");
      expect_same_files(out + "/hf", exported);
    }
  }
}

TEST(Export, BadInputIsRefusedNamingTheFile) {
  const std::string out = train("bad", 1, "", "");
  const std::string dest = temp("bad-dest");
  auto refused = [&](const std::string& args, const std::string& expect) {
    const quill::test::CommandResult r = run(kQuill + " export " + args + " --out " + dest + " --quiet");
    EXPECT_EQ(r.status, 1) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(expect), std::string::npos) << args << "\n" << r.output;
    EXPECT_FALSE(fs::exists(dest)) << args;
  };
  refused("--checkpoint " + out + "/missing", out + "/missing: no such directory");
  // The Hugging Face export is a directory, but not a training checkpoint.
  refused("--checkpoint " + out + "/hf", out + "/hf/state.json: missing");
  // A directory of per-iteration saves whose latest file names an iteration that is not there: named, with
  // the iterations that are.
  const std::string saves = temp("saves");
  fs::create_directories(saves);
  std::ofstream(saves + "/latest_checkpointed_iteration.txt") << "5\n";
  refused("--checkpoint " + saves, "--checkpoint " + saves +
                                       ": latest_checkpointed_iteration.txt names iteration 5, but iter_0000005 is not "
                                       "there or not complete (its checkpoints: iterations none)");
  // The run's one checkpoint (--save DIR holds iter_0000002), copied and damaged below.
  const std::string saved = out + "/checkpoint/iter_0000002";
  // A shard with changed bytes, named.
  const std::string broken = temp("broken");
  fs::copy(saved, broken);
  {
    std::fstream f(broken + "/shard-rank0-of-1.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-64, std::ios::end);
    const std::string junk(16, '\x7f');
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  refused("--checkpoint " + broken, broken + "/shard-rank0-of-1.safetensors: missing, or its bytes do not match");
  // ... which --no-verify-checkpoint exports as it is.
  run_ok(kQuill + " export --checkpoint " + broken + " --out " + temp("unverified") + " --no-verify-checkpoint --quiet");
  // An edited state.json.
  const std::string edited = temp("edited");
  fs::copy(saved, edited);
  {
    std::string state = quill::read_file(edited + "/state.json");
    const size_t at = state.find("\"next_step\": 2");
    ASSERT_NE(at, std::string::npos) << state;
    state.replace(at, 14, "\"next_step\": 1");
    std::ofstream(edited + "/state.json") << state;
  }
  refused("--checkpoint " + edited, edited + "/state.json: its content does not match");
  // Another model's config.
  refused("--checkpoint " + out + "/checkpoint --config " + kSrc + "/tests/fixtures/configs/tiny-tp4.json",
          "the checkpoint was written for another model");
  // A non-empty --out.
  const quill::test::CommandResult r =
      run(kQuill + " export --checkpoint " + out + "/checkpoint --out " + out + " --quiet");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find(out + ": exists and is not empty"), std::string::npos) << r.output;
}

// quill export takes a run's --save DIR as quill train --load does: the iteration the latest file names,
// or --ckpt-step N's; an iteration directory given itself is exported as it is.
TEST(Export, SaveDirectoryGivesItsLatestOrTheCkptStep) {
  const std::string out = train("history", 1, "", "--save-interval 1 --save-hf-dtype fp32");
  ASSERT_TRUE(fs::exists(out + "/checkpoint/iter_0000001/state.json"));
  ASSERT_EQ(quill::read_file(out + "/checkpoint/latest_checkpointed_iteration.txt"), "2\n");
  const std::string flags = " --config " + kTiny + " --save-hf-dtype fp32 --quiet";
  // The latest, on one rank and on two: the run's own export, and the closing line names the iteration.
  for (int ranks : {1, 2}) {
    SCOPED_TRACE(ranks);
    const std::string latest = temp("history-latest" + std::to_string(ranks));
    const quill::test::CommandResult r =
        run(launch(ranks) + " export --checkpoint " + out + "/checkpoint --out " + latest + flags);
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("exported " + out + "/checkpoint/iter_0000002 (saved after 2 steps)"), std::string::npos)
        << r.output;
    expect_same_files(out + "/hf", latest);
  }
  // --ckpt-step 1: the older iteration, the same files as naming its directory.
  const std::string step1 = temp("history-step1"), named1 = temp("history-named1");
  run_ok(kQuill + " export --checkpoint " + out + "/checkpoint --ckpt-step 1 --out " + step1 + flags);
  run_ok(kQuill + " export --checkpoint " + out + "/checkpoint/iter_0000001 --out " + named1 + flags);
  expect_same_files(step1, named1);
  EXPECT_NE(quill::read_file(step1 + "/model.safetensors"), quill::read_file(out + "/hf/model.safetensors"))
      << "iteration 1 exported the weights of iteration 2";
  // Refusals name the flag and what is there; nothing is written.
  const std::string dest = temp("history-refused");
  for (const auto& [args, said] : std::vector<std::pair<std::string, std::string>>{
           {"--checkpoint " + out + "/checkpoint --ckpt-step 3",
            "--ckpt-step 3: --checkpoint " + out + "/checkpoint holds no complete iter_0000003 (its checkpoints: "
            "iterations 1, 2; latest: 2)"},
           {"--checkpoint " + out + "/checkpoint/iter_0000001 --ckpt-step 1",
            "--ckpt-step 1: --checkpoint " + out + "/checkpoint/iter_0000001 is one checkpoint"},
           {"--checkpoint " + out + "/checkpoint --ckpt-step -2", "--ckpt-step -2: must be >= 0"},
           // The run's --out: the message names its --save directory.
           {"--checkpoint " + out, "--checkpoint " + out + ": holds a run's outputs, not its checkpoints; give "
                                   "--checkpoint " + out + "/checkpoint"}}) {
    const quill::test::CommandResult r = run(kQuill + " export " + args + " --out " + dest + " --quiet");
    EXPECT_EQ(r.status, 1) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(said), std::string::npos) << args << "\n" << r.output;
    EXPECT_FALSE(fs::exists(dest)) << args;
  }
}

TEST(Export, PlanCountsTheExportsHostMemory) {
  const quill::test::CommandResult r =
      run(kQuill + " plan --config " + kTiny + " --row-tokens 32 --global-batch 4 --tp 2 --dp 2 --device cpu");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("host: Hugging Face export buffers (streamed)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("host memory per node during the Hugging Face export"), std::string::npos) << r.output;
}

}  // namespace
