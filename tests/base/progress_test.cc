// The progress line (base/progress.h): its figures, nothing from quick work, a closing line after a
// shown one, and nothing at all when disabled.
#include "base/progress.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace quill {
namespace {

TEST(Progress, LineHasDoneTotalRateAndEta) {
  Progress counted("quill tune: projecting layouts", ProgressOptions::counting(true, "layouts"));
  EXPECT_EQ(counted.line(30, 120, "", 10, false),
            "quill tune: projecting layouts: 30/120 layouts (25.0%) | 3 layouts/s | 10s | ETA 30s");
  EXPECT_EQ(counted.line(120, 120, "", 40, true),
            "quill tune: projecting layouts: 120/120 layouts (100.0%) | 3 layouts/s | done in 40s");
  Progress bytes("saving out/hf", ProgressOptions::in_bytes(true));
  EXPECT_EQ(bytes.line(3'000'000'000, 12'000'000'000, "", 60, false),
            "saving out/hf: 3.00 GB of 12.00 GB (25%) | 50.0 MB/s | 1m00s | ETA 3m00s");
  Progress plain("data build: rendering", ProgressOptions::counting(true, ""));
  plain.set_bytes(20'000'000);
  EXPECT_EQ(plain.line(5, 0, "rows 4", 2, false), "data build: rendering: 5 | rows 4 | 10.0 MB/s | 2s");
  EXPECT_EQ(Progress::format_duration(3725), "1h02m");
}

TEST(Progress, QuickWorkShowsNothingAndDisabledNeverShows) {
  testing::internal::CaptureStderr();
  {
    Progress quick("loading x", ProgressOptions::counting(true, "parameters"));
    quick.update(1, 2);
    quick.update(2, 2, "", /*force=*/true);  // still within silent_s
  }
  {
    ProgressOptions o = ProgressOptions::counting(false, "parameters");
    o.silent_s = 0;
    Progress off("loading y", o);
    off.update(1, 2, "", true);
  }
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

TEST(Progress, ShownWorkEndsWithAClosingLine) {
  ProgressOptions o = ProgressOptions::counting(true, "tensors");
  o.silent_s = 0.05;
  testing::internal::CaptureStderr();
  {
    Progress slow("loading checkpoint c", o);
    slow.update(1, 4);  // before silent_s: nothing
    std::this_thread::sleep_for(std::chrono::milliseconds(80));
    slow.update(2, 4);  // shown
    slow.update(3, 4);  // rate-limited
    slow.update(4, 4);
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("loading checkpoint c: 2/4 tensors (50.0%)"), std::string::npos) << err;
  EXPECT_NE(err.find("ETA"), std::string::npos) << err;
  EXPECT_EQ(err.find("3/4"), std::string::npos) << err;
  EXPECT_NE(err.find("loading checkpoint c: 4/4 tensors (100.0%)"), std::string::npos) << err;
  EXPECT_NE(err.find("done in"), std::string::npos) << err;
}

}  // namespace
}  // namespace quill
