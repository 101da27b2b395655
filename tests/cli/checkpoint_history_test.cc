// `quill train --save DIR` keeping checkpoints as Megatron does (issue 44, item 3), through the binary:
// DIR/iter_NNNNNNN and the latest file; --load resumes the latest bit-identically (one rank, DP2, PP2);
// --async-save writes the same bytes as a synchronous save, and a run killed while it writes leaves the
// previous checkpoint to resume; a SIGTERM waits for it; --keep-last-checkpoints; --load of a directory
// without a checkpoint and --ckpt-step of a missing iteration are refused, each naming what to give.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "base/file_util.h"
#include "util/command.h"
#include "util/run_dir.h"
#include "util/background.h"

namespace {

using quill::test::Background;

namespace fs = std::filesystem;

using quill::test::CommandResult;

std::string temp(const std::string& name) { return quill::test::fresh_temp_dir("history", name); }

CommandResult sh(const std::string& cmd) { return quill::test::run_command(cmd + " < /dev/null"); }

const std::string& rows() {
  static const std::string dir = [] {
    const std::string d = temp("rows");
    EXPECT_EQ(sh(std::string(QUILL_BINARY) + " data synth --conversations 40 --row-tokens 32 --max-rows 24 --out " + d)
                  .status,
              0);
    return d;
  }();
  return dir;
}

// The tiny model, `steps` steps of 2 rows; a checkpoint every `interval` steps into OUT/ck.
std::string train(const std::string& out, int steps = 6, int interval = 2) {
  return std::string(QUILL_BINARY) + " train --config " + QUILL_SOURCE_DIR + "/configs/tiny.json --rows " + rows() +
         " --seed 3 --global-batch 2 --lr 1e-2 --min-lr 1e-3 --quiet --steps " + std::to_string(steps) + " --out " +
         out + " --save " + out + "/ck --save-interval " + std::to_string(interval);
}

void run_ok(const std::string& cmd) {
  const CommandResult r = sh(cmd);
  ASSERT_EQ(r.status, 0) << cmd << "\n" << r.output;
}

// Every file of two checkpoint directories equal byte for byte (shards and state.json).
void expect_same_files(const std::string& a, const std::string& b) {
  std::vector<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(a)) names.push_back(e.path().filename().string());
  ASSERT_FALSE(names.empty()) << a;
  for (const std::string& n : names) {
    ASSERT_TRUE(fs::exists(b + "/" + n)) << b << " lacks " << n;
    EXPECT_TRUE(quill::read_file(a + "/" + n) == quill::read_file(b + "/" + n)) << a << "/" << n << " differs from " << b;
  }
  EXPECT_EQ(std::distance(fs::directory_iterator(b), fs::directory_iterator()), static_cast<long>(names.size())) << b;
}

// Two runs' losses and gradient norms equal step for step, bit for bit.
void expect_same_metrics(const std::string& out, const std::string& ref) {
  const auto a = quill::test::read_metrics(out), b = quill::test::read_metrics(ref);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]["loss"].get<double>(), b[i]["loss"].get<double>()) << "step " << i;
    EXPECT_EQ(a[i]["grad_norm"].get<double>(), b[i]["grad_norm"].get<double>()) << "step " << i;
  }
}

// A run stopped after 3 steps and continued with --load equals one uninterrupted run (with --async-save:
// the same files as the synchronous saves), under `launch` and `layout`.
void resume_equals_whole(const std::string& launch, const std::string& layout, const std::string& tag) {
  const std::string whole = temp("whole" + tag), parts = temp("parts" + tag);
  run_ok(launch + train(whole) + layout + " --async-save");
  EXPECT_EQ(quill::saved_iterations(whole + "/ck"), (std::vector<int64_t>{2, 4, 6}));
  EXPECT_EQ(quill::latest_iteration(whole + "/ck"), 6);
  run_ok(launch + train(parts) + layout + " --stop-after 3");
  EXPECT_EQ(quill::latest_iteration(parts + "/ck"), 3);
  run_ok(launch + train(parts) + layout + " --load " + parts + "/ck");
  EXPECT_EQ(quill::saved_iterations(parts + "/ck"), (std::vector<int64_t>{2, 3, 4, 6}));
  expect_same_metrics(parts, whole);
  for (int64_t it : {2, 4, 6}) expect_same_files(quill::iteration_dir(parts + "/ck", it), quill::iteration_dir(whole + "/ck", it));
}

TEST(CheckpointHistoryRuns, LoadResumesTheLatestBitIdenticallyAndAsyncSavesWriteTheSameBytes) {
  resume_equals_whole("", "", "1");
}

TEST(CheckpointHistoryRuns, Dp2LoadResumesTheLatestBitIdenticallyAndAsyncSavesWriteTheSameBytes) {
  resume_equals_whole("timeout 120 " + quill::test::mpirun_command(2), " --dp 2", "dp2");
}

TEST(CheckpointHistoryRuns, Pp2LoadResumesTheLatestBitIdenticallyAndAsyncSavesWriteTheSameBytes) {
  resume_equals_whole("timeout 120 " + quill::test::mpirun_command(2), " --pp 2", "pp2");
}

TEST(CheckpointHistoryRuns, KeepLastCheckpointsKeepsExactlyTheNewestN) {
  const std::string out = temp("keep");
  const CommandResult r = sh(train(out, 6, 1) + " --keep-last-checkpoints 2");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(quill::saved_iterations(out + "/ck"), (std::vector<int64_t>{5, 6}));
  EXPECT_EQ(quill::latest_iteration(out + "/ck"), 6);
  EXPECT_EQ(std::distance(fs::directory_iterator(out + "/ck"), fs::directory_iterator()), 3) << "nothing else is left";
  // Back to iteration 5 (--ckpt-step), keeping one: the new 6 replaces the old, and only it stays.
  const CommandResult back = sh(train(out, 6, 1) + " --load " + out + "/ck --ckpt-step 5 --keep-last-checkpoints 1");
  ASSERT_EQ(back.status, 0) << back.output;
  EXPECT_EQ(quill::saved_iterations(out + "/ck"), (std::vector<int64_t>{6}));
  const CommandResult zero = sh(train(temp("keep-bad")) + " --keep-last-checkpoints -1");
  EXPECT_EQ(zero.status, 1);
  EXPECT_NE(zero.output.find("--keep-last-checkpoints -1: must be >= 0"), std::string::npos) << zero.output;
}

TEST(CheckpointHistoryRuns, LoadWithoutACheckpointIsRefusedUnlessAFreshStartIsChosen) {
  const std::string out = temp("fresh"), empty = temp("fresh-empty");
  fs::create_directories(empty);
  const CommandResult refused = sh(train(out) + " --load " + empty);
  EXPECT_EQ(refused.status, 1);
  EXPECT_NE(refused.output.find("--load " + empty + ": no checkpoint there"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("give --start-fresh-if-no-checkpoint"), std::string::npos) << refused.output;
  EXPECT_FALSE(fs::exists(out)) << "nothing is written";
  // A job script that always passes the same flags (a Slurm requeue): the first start begins fresh, the
  // second continues from the first's checkpoint.
  const std::string job = train(out) + " --load " + out + "/ck --start-fresh-if-no-checkpoint";
  const CommandResult first = sh(std::string(job).replace(job.find(" --quiet"), 8, "") + " --stop-after 2");
  ASSERT_EQ(first.status, 0) << first.output;
  EXPECT_NE(first.output.find("no checkpoint there yet: starting fresh"), std::string::npos) << first.output;
  EXPECT_NE(first.output.find("saved checkpoint " + quill::iteration_dir(out + "/ck", 2) + " (step 2): "),
            std::string::npos) << "the save's line (bytes, time, MB/s)\n" << first.output;
  EXPECT_NE(first.output.find(" MB/s)"), std::string::npos) << first.output;
  run_ok(job);
  EXPECT_EQ(quill::test::read_metrics(out).size(), 6u);
  EXPECT_EQ(quill::latest_iteration(out + "/ck"), 6);
}

TEST(CheckpointHistoryRuns, CkptStepOfAMissingIterationIsRefusedNamingIt) {
  const std::string out = temp("step");
  run_ok(train(out, 4));
  const CommandResult r = sh(train(out, 4) + " --load " + out + "/ck --ckpt-step 3");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("--ckpt-step 3: --load " + out + "/ck holds no complete iter_0000003 (its checkpoints: "
                          "iterations 2, 4; latest: 4)"),
            std::string::npos)
      << r.output;
  const CommandResult alone = sh(train(temp("step-alone"), 4) + " --ckpt-step 2");
  EXPECT_EQ(alone.status, 1);
  EXPECT_NE(alone.output.find("--ckpt-step 2 needs --load DIR"), std::string::npos) << alone.output;
}

// Polls until the latest file of `save` names `iteration` (false after a minute).
bool wait_for_latest(const std::string& save, int64_t iteration) {
  for (int i = 0; i < 6000; ++i) {
    try {
      if (quill::latest_iteration(save) == iteration) return true;
    } catch (const std::exception&) {
      // Read between the temporary file's rename and nothing: never torn, but keep polling.
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// Polls until `save` holds a directory whose name starts with `prefix` (false after a minute).
bool wait_for_entry(const std::string& save, const std::string& prefix) {
  for (int i = 0; i < 6000; ++i) {
    std::error_code ec;
    for (const std::filesystem::directory_entry& e : std::filesystem::directory_iterator(save, ec))
      if (e.path().filename().string().starts_with(prefix)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// Many steps; background saves that take a second and a half each (the writer sleeps first), so that
// iteration 4's is in flight when iteration 2 has just become the latest.
std::string slow_async(const std::string& out) {
  return train(out, 400) + " --async-save --test-async-save-delay 1.5";
}

TEST(CheckpointHistoryRuns, AKillDuringAnAsyncSaveLeavesThePreviousCheckpointToResume) {
  const std::string out = temp("kill");
  Background run(slow_async(out), out + ".log");
  ASSERT_TRUE(wait_for_latest(out + "/ck", 2));
  // Iteration 4's snapshot made its temporary directory at the step boundary; its writer now sleeps 1.5 s.
  ASSERT_TRUE(wait_for_entry(out + "/ck", "iter_0000004.tmp-"));
  ::kill(run.pid(), SIGKILL);
  EXPECT_EQ(run.finish().status, 128 + SIGKILL);
  EXPECT_EQ(quill::latest_iteration(out + "/ck"), 2);
  EXPECT_EQ(quill::saved_iterations(out + "/ck"), (std::vector<int64_t>{2})) << "iteration 4 was still being written";
  // The same command with --load: the killed save's directory is removed, iteration 2 resumes, and two
  // more steps equal an uninterrupted run's four.
  const std::string again = slow_async(out) + " --load " + out + "/ck --stop-after 2";
  const CommandResult resumed = sh(std::string(again).replace(again.find(" --quiet"), 8, ""));
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("left by a save that did not finish"), std::string::npos) << resumed.output;
  const std::string ref = temp("kill-ref");
  run_ok(train(ref, 400) + " --stop-after 4");
  expect_same_metrics(out, ref);
  expect_same_files(quill::iteration_dir(out + "/ck", 4), quill::iteration_dir(ref + "/ck", 4));
}

TEST(CheckpointHistoryRuns, ASigtermDuringAnAsyncSaveWaitsForItThenSavesTheStopStep) {
  const std::string out = temp("term");
  Background run(slow_async(out), out + ".log");
  ASSERT_TRUE(wait_for_latest(out + "/ck", 2));
  ::kill(run.pid(), SIGTERM);
  const CommandResult stopped = run.finish();
  EXPECT_EQ(stopped.status, 143) << stopped.output;
  const int64_t k = static_cast<int64_t>(quill::test::read_metrics(out).size());
  EXPECT_EQ(quill::latest_iteration(out + "/ck"), k);
  const std::vector<int64_t> saved = quill::saved_iterations(out + "/ck");
  EXPECT_TRUE(std::find(saved.begin(), saved.end(), 4) != saved.end()) << "the save in flight was finished";
  EXPECT_NE(stopped.output.find("--load " + out + "/ck"), std::string::npos) << stopped.output;
}

}  // namespace
