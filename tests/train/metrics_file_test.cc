// OUT/metrics.jsonl: write failures stop the run naming the file (issue 15, defect 4), and a resume
// reads the earlier lines back, dropping a torn last line and naming the file for anything else
// (defect 5).
#include "train/metrics_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "base/error.h"
#include "base/file_util.h"
#include "util/test_util.h"

namespace quill {
namespace {

namespace fs = std::filesystem;

std::string temp_file(const std::string& name) {
  const std::string d = (fs::temp_directory_path() / ("quill-metrics-test-" + std::to_string(::getpid()))).string();
  make_dirs(d);
  return d + "/" + name;
}

using test::error_of;
const char* kThree = "{\"step\":0,\"loss\":5}\n{\"step\":1,\"loss\":4}\n{\"step\":2,\"loss\":3}\n";

TEST(MetricsFile, AFullDeviceStopsNamingTheFile) {
  // /dev/full fails every write with ENOSPC, as a full disk does.
  std::FILE* probe = std::fopen("/dev/full", "a");
  if (!probe) GTEST_SKIP() << "no /dev/full here";
  std::fclose(probe);
  const std::string e = error_of([] {
    MetricsFile f("/dev/full");
    f.append("{\"step\":0}");
  });
  EXPECT_NE(e.find("/dev/full: write failed (No space left on device)"), std::string::npos) << e;
}

TEST(MetricsFile, AppendsWholeLines) {
  const std::string path = temp_file("append.jsonl");
  write_file_atomic(path, "{\"step\":0}\n");
  MetricsFile f(path);
  f.append("{\"step\":1}");
  f.close();
  EXPECT_EQ(read_file(path), "{\"step\":0}\n{\"step\":1}\n");
}

TEST(MetricsFile, KeepsTheLinesBeforeTheCheckpointsStep) {
  const std::string path = temp_file("keep.jsonl");
  write_file_atomic(path, kThree);
  const KeptMetrics k = metrics_before_step(path, 2);
  EXPECT_EQ(k.text, "{\"step\":0,\"loss\":5}\n{\"step\":1,\"loss\":4}\n");
  EXPECT_TRUE(k.warnings.empty());
  EXPECT_EQ(metrics_before_step(temp_file("absent.jsonl"), 2).text, "");
}

TEST(MetricsFile, ATornLastLinePastTheCheckpointIsDroppedWithAWarning) {
  const std::string path = temp_file("torn.jsonl");
  write_file_atomic(path, std::string(kThree) + "{\"step\":3,\"lo");
  const KeptMetrics k = metrics_before_step(path, 3);
  EXPECT_EQ(k.text, kThree);
  ASSERT_EQ(k.warnings.size(), 1u);
  EXPECT_NE(k.warnings[0].find(path + ": line 4 is torn"), std::string::npos) << k.warnings[0];
}

TEST(MetricsFile, ATornLineTheCheckpointCoversOrABadMiddleLineNamesTheFile) {
  const std::string path = temp_file("bad.jsonl");
  write_file_atomic(path, "{\"step\":0,\"loss\":5}\n{\"step\":1,\"lo");
  std::string e = error_of([&] { metrics_before_step(path, 3); });
  EXPECT_NE(e.find(path + ": line 2 is torn, and it holds step 1"), std::string::npos) << e;
  write_file_atomic(path, "{\"step\":0,\"loss\":5}\nnot json\n{\"step\":2,\"loss\":3}\n");
  e = error_of([&] { metrics_before_step(path, 3); });
  EXPECT_NE(e.find(path + ": line 2 is not a metrics line"), std::string::npos) << e;
}

}  // namespace
}  // namespace quill
