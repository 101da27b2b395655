// `quill train`'s export flags as a user meets them: a bad value or a flag without --save-hf is one
// clear error and no output.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>
#include "util/command.h"

namespace {

namespace fs = std::filesystem;

using Result = quill::test::CommandResult;

Result quill(const std::string& args) { return quill::test::run_command(std::string(QUILL_BINARY) + " " + args); }

std::string train_args(const std::string& out) {
  const std::string src = QUILL_SOURCE_DIR;
  return "train --config " + src + "/configs/tiny.json --rows " + src +
         "/no-rows-needed --steps 1 --global-batch 1 --quiet --out " + out;
}

std::string temp(const std::string& name) {
  const std::string d = (fs::temp_directory_path() / ("quill-hf-flags-" + std::to_string(::getpid()) + "-" + name)).string();
  fs::remove_all(d);
  return d;
}

TEST(HfExportFlags, BadValuesAreNamed) {
  const std::string out = temp("bad");
  Result r = quill(train_args(out) + " --save-hf --hf-format hub");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("--hf-format: 'hub'"), std::string::npos) << r.output;
  r = quill(train_args(out) + " --save-hf --save-hf-dtype fp16");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("--save-hf-dtype: 'fp16'"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out));
}

TEST(HfExportFlags, NeedSaveHf) {
  for (const char* flag : {" --hf-format transformers", " --save-hf-dtype fp32"}) {
    const Result r = quill(train_args(temp("needs")) + flag);
    EXPECT_NE(r.status, 0) << flag;
    EXPECT_NE(r.output.find("--save-hf"), std::string::npos) << flag << ": " << r.output;
  }
}

TEST(HfExportFlags, ReleaseFormFromARandomInitIsRefusedBeforeTraining) {
  const std::string out = temp("release");
  const std::string src = QUILL_SOURCE_DIR;
  const std::string rows = temp("rows");
  ASSERT_EQ(quill("data synth --conversations 20 --row-tokens 64 --out " + rows).status, 0);
  const Result r = quill("train --config " + src + "/configs/tiny.json --rows " + rows +
                         " --steps 1 --global-batch 1 --quiet --save-hf --hf-format release --out " + out);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("--hf-format transformers"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out + "/metrics.jsonl"));
}

}  // namespace
