// A --save directory kept as Megatron keeps it (issue 44, item 3): iter_NNNNNNN directories and the latest
// file; which checkpoint --load and --ckpt-step choose and what they refuse; the retention; the tidying of
// what a killed save left. On directories made by hand (a state.json marks a complete checkpoint), so
// each case is exact and quick; tests/cli/checkpoint_history_test.cc trains through them.
#include "train/checkpoint_history.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/file_util.h"
#include "util/test_util.h"

namespace quill {
namespace {

namespace fs = std::filesystem;

// A pid no process has (above Linux's largest pid_max), for side directories of a killed writer.
constexpr const char* kDeadPid = "99999999";

std::string fresh(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("quill-history-" + std::to_string(::getpid()) + "-" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

// A complete checkpoint directory as far as the history is concerned: it holds a state.json.
void complete(const std::string& dir) {
  fs::create_directories(dir);
  std::ofstream(dir + "/state.json") << "{}";
}

using test::error_of;
TEST(CheckpointHistory, NamesAreMegatronsSevenDigitIterations) {
  EXPECT_EQ(iteration_dir_name(42), "iter_0000042");
  EXPECT_EQ(iteration_dir("/a/b", 0), "/a/b/iter_0000000");
  EXPECT_EQ(iteration_dir_name(12345678), "iter_12345678");
}

TEST(CheckpointHistory, TheLatestFileIsWrittenWholeAndAMalformedOneIsRefusedNamingIt) {
  const std::string root = fresh("latest");
  EXPECT_FALSE(latest_iteration(root).has_value());
  write_latest_iteration(root, 40);
  EXPECT_EQ(read_file(root + "/latest_checkpointed_iteration.txt"), "40\n");
  EXPECT_EQ(latest_iteration(root), 40);
  for (const fs::directory_entry& e : fs::directory_iterator(root))
    EXPECT_EQ(e.path().filename(), "latest_checkpointed_iteration.txt") << "no temporary file is left";
  std::ofstream(root + "/latest_checkpointed_iteration.txt") << "release";
  const std::string e = error_of([&] { latest_iteration(root); });
  EXPECT_NE(e.find(root + "/latest_checkpointed_iteration.txt: holds 'release', not an iteration number"),
            std::string::npos)
      << e;
}

TEST(CheckpointHistory, LoadTakesTheLatestOrCkptStepAndRefusesAMissingIterationNamingIt) {
  const std::string root = fresh("choose");
  complete(iteration_dir(root, 2));
  complete(iteration_dir(root, 4));
  fs::create_directories(iteration_dir(root, 6));  // no state.json: not a checkpoint
  write_latest_iteration(root, 4);
  CheckpointChoice c = choose_checkpoint(root, -1, false, "--load");
  EXPECT_EQ(c.dir, iteration_dir(root, 4));
  EXPECT_EQ(c.iteration, 4);
  EXPECT_EQ(c.note, "");
  c = choose_checkpoint(root, 2, false, "--load");
  EXPECT_EQ(c.dir, iteration_dir(root, 2));
  EXPECT_NE(c.note.find("resuming iteration 2 (--ckpt-step), not the latest 4"), std::string::npos) << c.note;
  for (int64_t missing : {3, 6}) {
    const std::string e = error_of([&] { choose_checkpoint(root, missing, true, "--load"); });
    EXPECT_NE(e.find("--ckpt-step " + std::to_string(missing) + ": --load " + root + " holds no complete " +
                     iteration_dir_name(missing) + " (its checkpoints: iterations 2, 4; latest: 4)"),
              std::string::npos)
        << e;
  }
  // The latest file naming a directory that is gone: refused, naming both.
  write_latest_iteration(root, 6);
  const std::string e = error_of([&] { choose_checkpoint(root, -1, true, "--load"); });
  EXPECT_NE(e.find("latest_checkpointed_iteration.txt names iteration 6, but iter_0000006 is not there or not complete"),
            std::string::npos)
      << e;
}

TEST(CheckpointHistory, ADirectoryWithoutACheckpointIsRefusedUnlessAFreshStartWasChosen) {
  for (const std::string& root : {fresh("empty"), fresh("missing") + "/never-made"}) {
    const std::string e = error_of([&] { choose_checkpoint(root, -1, false, "--load"); });
    EXPECT_NE(e.find("--load " + root + ": no checkpoint there"), std::string::npos) << e;
    EXPECT_NE(e.find("--start-fresh-if-no-checkpoint"), std::string::npos) << e;
    const CheckpointChoice c = choose_checkpoint(root, -1, true, "--load");
    EXPECT_EQ(c.dir, "");
    EXPECT_NE(c.note.find("starting fresh"), std::string::npos) << c.note;
    // Asked for one iteration, a fresh start is no answer.
    EXPECT_NE(error_of([&] { choose_checkpoint(root, 3, true, "--load"); }).find("--ckpt-step 3"), std::string::npos);
  }
}

TEST(CheckpointHistory, OneCheckpointDirectoryAndAnUnnamedCompleteIterationAreResumed) {
  const std::string single = fresh("single");
  complete(single);  // --resume DIR of a checkpoint itself (the form before iterations)
  EXPECT_EQ(choose_checkpoint(single, -1, false, "--resume").dir, single);
  EXPECT_NE(error_of([&] { choose_checkpoint(single, 2, false, "--resume"); }).find("is one checkpoint"),
            std::string::npos);
  // A save killed after its directory was renamed into place but before the latest file was written.
  const std::string root = fresh("unnamed");
  complete(iteration_dir(root, 3));
  complete(iteration_dir(root, 5));
  const CheckpointChoice c = choose_checkpoint(root, -1, false, "--load");
  EXPECT_EQ(c.dir, iteration_dir(root, 5));
  EXPECT_NE(c.note.find("resuming the newest complete one, iteration 5"), std::string::npos) << c.note;
}

TEST(CheckpointHistory, RetentionKeepsExactlyNWithTheLatestAmongThem) {
  const std::string root = fresh("retain");
  for (int it = 1; it <= 5; ++it) complete(iteration_dir(root, it));
  // Latest 3 (a run went on from --ckpt-step 3 after 4 and 5 were written): 3 and the newest below it stay.
  const std::vector<std::string> removed = retire_checkpoints(root, 2, 3);
  EXPECT_EQ(removed.size(), 3u);
  EXPECT_EQ(saved_iterations(root), (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(retire_checkpoints(root, 0, 3).empty()) << "0 keeps every checkpoint";
  EXPECT_TRUE(retire_checkpoints(root, 5, 3).empty());
  retire_checkpoints(root, 1, 3);
  EXPECT_EQ(saved_iterations(root), (std::vector<int64_t>{3}));
  for (const fs::directory_entry& e : fs::directory_iterator(root))
    EXPECT_EQ(e.path().filename(), "iter_0000003") << "nothing is left aside";
}

TEST(CheckpointHistory, TidyingRecoversAnInterruptedSwapAndRemovesAKilledSavesTemporaryDirectory) {
  const std::string root = fresh("tidy");
  complete(iteration_dir(root, 2));
  complete(iteration_dir(root, 4) + ".new-" + kDeadPid);  // killed between its swap's renames
  fs::create_directories(iteration_dir(root, 6) + ".tmp-" + kDeadPid);  // killed while writing
  std::ofstream(root + "/latest_checkpointed_iteration.txt.tmp." + kDeadPid) << "6";
  write_latest_iteration(root, 2);
  // Before tidying, the recoverable copy already counts for --ckpt-step (the load tidies first).
  EXPECT_EQ(choose_checkpoint(root, 4, false, "--load").dir, iteration_dir(root, 4));
  const std::vector<std::string> notes = tidy_checkpoint_history(root);
  EXPECT_EQ(notes.size(), 2u);
  EXPECT_EQ(saved_iterations(root), (std::vector<int64_t>{2, 4}));
  std::vector<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(root)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"iter_0000002", "iter_0000004", "latest_checkpointed_iteration.txt"}));
  EXPECT_EQ(latest_iteration(root), 2) << "tidying never moves the latest file";
}

}  // namespace
}  // namespace quill
