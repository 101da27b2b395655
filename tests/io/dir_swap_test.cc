// The directory swap behind training checkpoints and Hugging Face exports (io/dir_swap.h): a kill
// at any moment leaves a complete copy that recover_dir puts back, and the leftovers of killed
// writers are removed. The kill windows are made here as a killed process would leave them.
#include "io/dir_swap.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "base/file_util.h"
#include "io/io_test_util.h"

namespace quill {
namespace {

namespace fs = std::filesystem;
using test::ScratchDir;

// A pid that runs no process: the largest pid the kernel hands out, plus one.
std::string dead_pid() { return "4194305"; }

void make_copy(const std::string& dir, const std::string& content) {
  make_dirs(dir);
  write_file_atomic(dir + "/state.json", content);
}

std::string content_of(const std::string& dir) { return read_file(dir + "/state.json"); }

TEST(DirSwap, ReplacesAnExistingDirectoryAndLeavesNoSideDirectory) {
  ScratchDir s;
  const std::string dir = s.path() + "/checkpoint";
  make_copy(dir, "old");
  const std::string tmp = temp_dir_name(dir);
  make_copy(tmp, "new");
  swap_dir_into_place(tmp, dir);
  EXPECT_EQ(content_of(dir), "new");
  EXPECT_EQ(std::distance(fs::directory_iterator(s.path()), fs::directory_iterator()), 1);
}

TEST(DirSwap, KillBetweenMovingTheOldAsideAndTheNewInIsRecovered) {
  // Issue 15, defect 3: killed between "checkpoint -> checkpoint.old-PID" and the new copy's rename,
  // only side directories remain and resume found no state.json.
  ScratchDir s;
  const std::string dir = s.path() + "/checkpoint";
  make_copy(dir + ".old-" + dead_pid(), "old");
  make_copy(dir + ".new-" + dead_pid(), "new");
  ASSERT_FALSE(fs::exists(dir));
  const std::optional<std::string> from = recover_dir(dir);
  ASSERT_TRUE(from.has_value());
  EXPECT_EQ(*from, dir + ".new-" + dead_pid());
  EXPECT_EQ(content_of(dir), "new");
  EXPECT_EQ(remove_stale_side_dirs(dir).size(), 1u);  // the old copy
  EXPECT_EQ(std::distance(fs::directory_iterator(s.path()), fs::directory_iterator()), 1);
}

TEST(DirSwap, APartialTempIsNeverRecoveredButTheOldCopyIs) {
  // What the earlier swap (old-PID + tmp-PID, no DIR) left: tmp may be partial, old is complete.
  ScratchDir s;
  const std::string dir = s.path() + "/hf";
  make_copy(dir + ".old-" + dead_pid(), "old");
  make_dirs(dir + ".tmp-" + dead_pid());
  EXPECT_EQ(recover_dir(dir), dir + ".old-" + dead_pid());
  EXPECT_EQ(content_of(dir), "old");
  EXPECT_EQ(remove_stale_side_dirs(dir), std::vector<std::string>{dir + ".tmp-" + dead_pid()});
}

TEST(DirSwap, NothingToRecoverChangesNothing) {
  ScratchDir s;
  const std::string dir = s.path() + "/checkpoint";
  EXPECT_FALSE(recover_dir(dir).has_value());
  make_dirs(dir + ".tmp-" + dead_pid());
  EXPECT_FALSE(recover_dir(dir).has_value());
  EXPECT_FALSE(fs::exists(dir));
  make_copy(dir, "current");
  make_copy(dir + ".new-" + dead_pid(), "newer but DIR exists");
  EXPECT_FALSE(recover_dir(dir).has_value());
  EXPECT_EQ(content_of(dir), "current");
}

TEST(DirSwap, StaleSideDirectoriesOfLiveProcessesAreKept) {
  ScratchDir s;
  const std::string dir = s.path() + "/checkpoint";
  const std::string live = dir + ".tmp-" + std::to_string(::getppid());  // a process that runs
  const std::string mine = dir + ".tmp-" + std::to_string(::getpid());  // this process, before it writes
  const std::string dead = dir + ".tmp-" + dead_pid();
  const std::string other = dir + "-other.tmp-" + dead_pid();  // another directory's
  for (const std::string& d : {live, mine, dead, other}) make_dirs(d);
  std::vector<std::string> removed = remove_stale_side_dirs(dir);
  std::sort(removed.begin(), removed.end());
  std::vector<std::string> expect{mine, dead};
  std::sort(expect.begin(), expect.end());
  EXPECT_EQ(removed, expect);
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::exists(other));
}

}  // namespace
}  // namespace quill
