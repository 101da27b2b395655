// The check of a job in which one rank hangs at the start of step 2 (quill train's hidden
// --stall-rank-at-step 1,2) under --distributed-timeout-minutes 0.05: the watchdog ends it within
// seconds, with a message naming `culprit` (the group and collective the other rank waited in) and the step.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "util/command.h"

namespace quill::test {

inline void expect_watchdog_ends_stalled_job(const std::string& cmd, const std::string& culprit) {
  const auto start = std::chrono::steady_clock::now();
  const CommandResult r = run_command(cmd);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.status, 124) << "the job hung until `timeout` ended it:\n" << r.output;
  EXPECT_NE(r.output.find(culprit), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("did not complete within 3 s during step 2"), std::string::npos) << r.output;
  EXPECT_LT(seconds, 30) << "the 3 s timeout took " << seconds << " s to end the job";
}

}  // namespace quill::test
