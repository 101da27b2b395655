// What a job under mpirun prints (issue 45): the run's closing lines once, by the lead rank; an error every
// rank shares once, by rank 0 (before or after MPI's start-up); an error of one rank with its rank.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "util/run_dir.h"

namespace {

using quill::test::CommandResult;
using quill::test::fresh_temp_dir;

CommandResult sh(const std::string& cmd) { return quill::test::run_command("timeout 120 " + cmd); }

std::string rows() {
  static const std::string dir = [] {
    const std::string d = fresh_temp_dir("lead", "rows");
    EXPECT_EQ(sh(std::string(QUILL_BINARY) + " data synth --conversations 40 --row-tokens 32 --max-rows 8 --out " + d).status, 0);
    return d;
  }();
  return dir;
}

std::string train(const std::string& rows_dir, const std::string& out) {
  return std::string(QUILL_BINARY) + " train --config " + QUILL_SOURCE_DIR + "/configs/tiny.json --rows " + rows_dir +
         " --seed 5 --steps 2 --global-batch 2 --dp 2 --quiet --out " + out;
}

size_t lines_with(const std::string& text, const std::string& what) {
  size_t n = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) n += line.find(what) != std::string::npos;
  return n;
}

TEST(LeadRankOutput, ClosingLinesOnce) {
  const CommandResult r = sh(quill::test::mpirun_command(2) + train(rows(), fresh_temp_dir("lead", "ok")));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(lines_with(r.output, "trained 2 steps"), 1u) << r.output;
  EXPECT_EQ(lines_with(r.output, "/summary.json"), 1u) << r.output;
}

TEST(LeadRankOutput, AnErrorEveryRankSharesIsPrintedOnce) {
  // After MPI's start-up (the rows are opened by the trainer), and before it (a flag's value).
  for (const std::string& bad : {train(fresh_temp_dir("lead", "no-rows"), fresh_temp_dir("lead", "a")),
                                 train(rows(), fresh_temp_dir("lead", "b")) + " --loss-vocab bogus"}) {
    const CommandResult r = sh(quill::test::mpirun_command(2) + bad);
    EXPECT_NE(r.status, 0) << r.output;
    EXPECT_EQ(lines_with(r.output, "error:"), 1u) << r.output;
    EXPECT_EQ(lines_with(r.output, "quill: error: "), 1u) << r.output;
  }
}

TEST(LeadRankOutput, AnErrorOfOneRankNamesItsRank) {
  // Rank 1 alone is given rows that do not exist: rank 0 waits for it in a collective, and is ended by the
  // launcher once rank 1 has reported.
  const std::string good = train(rows(), fresh_temp_dir("lead", "c"));
  const std::string bad = train(fresh_temp_dir("lead", "missing"), fresh_temp_dir("lead", "c"));
  const std::string mpmd = std::string(QUILL_MPIEXEC) + " -np 1 " + good + " : -np 1 " + bad;
  const CommandResult r = sh(mpmd);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_EQ(lines_with(r.output, "quill: rank 1 of 2: error: "), 1u) << r.output;
  EXPECT_EQ(lines_with(r.output, "quill: error: "), 0u) << r.output;
}

}  // namespace
