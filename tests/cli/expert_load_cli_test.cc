// Expert load as quill train shows it (issue 45): the log line's worst layer max/mean, and the warning
// when experts receive no token for --moe-idle-expert-warning-steps steps in a row (none with 0). The tiny
// model's routing with seed 4 leaves experts idle within 20 steps (7 of 24 by step 20 at a limit of 10).
#include <gtest/gtest.h>

#include <string>

#include "util/command.h"
#include "util/run_dir.h"

namespace {

const std::string kQuill = QUILL_BINARY, kSrc = QUILL_SOURCE_DIR;

TEST(ExpertLoadCli, LogLineShowsTheWorstLayerAndIdleExpertsAreWarnedOf) {
  const std::string rows = quill::test::fresh_temp_dir("expert-load", "rows");
  ASSERT_EQ(quill::test::run_command(kQuill + " data synth --conversations 300 --row-tokens 32 --max-rows 64 --out " + rows).status, 0);
  const std::string train = kQuill + " train --config " + kSrc + "/configs/tiny.json --rows " + rows +
                            " --seed 4 --steps 20 --global-batch 4 --lr 1e-2";
  const quill::test::CommandResult warned =
      quill::test::run_command(train + " --moe-idle-expert-warning-steps 5 --out " + quill::test::fresh_temp_dir("expert-load", "on"));
  ASSERT_EQ(warned.status, 0) << warned.output;
  EXPECT_NE(warned.output.find("expert load max/mean: "), std::string::npos) << warned.output;
  EXPECT_NE(warned.output.find("received no token for 5 steps in a row"), std::string::npos) << warned.output;
  const quill::test::CommandResult quiet = quill::test::run_command(
      train + " --quiet --moe-idle-expert-warning-steps 0 --out " + quill::test::fresh_temp_dir("expert-load", "off"));
  ASSERT_EQ(quiet.status, 0) << quiet.output;
  EXPECT_EQ(quiet.output.find("warning:"), std::string::npos) << quiet.output;
  EXPECT_EQ(quiet.output.find("expert load"), std::string::npos) << "--quiet prints no step lines";
  const quill::test::CommandResult negative = quill::test::run_command(
      train + " --moe-idle-expert-warning-steps -1 --out " + quill::test::fresh_temp_dir("expert-load", "negative"));
  EXPECT_EQ(negative.status, 1) << negative.output;
  EXPECT_NE(negative.output.find("--moe-idle-expert-warning-steps -1: give 0 (never warn) or a number of steps"),
            std::string::npos)
      << negative.output;
}

}  // namespace
