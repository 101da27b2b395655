// What a command that uses no GPU loads: not cuBLASLt. Its static initializer allocates and
// touches ~200 MB when the library is loaded, which was ~80% of a quill process that does nothing
// (bench/tokenizer/results/2026-12-04-local-startup.txt); the CUDA backend opens it when it is
// created (src/ops/cuda/cublaslt_library.h). The dynamic loader lists every object it maps under
// LD_DEBUG=files, dlopen included, so a library linked again, or opened early, shows up here.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "util/command.h"

namespace {

namespace fs = std::filesystem;

using quill::test::CommandResult;

// The loader's trace of `args`: stderr (LD_DEBUG's output) and stdout together.
CommandResult traced(const std::string& args) {
  return quill::test::run_command("LD_DEBUG=files " + std::string(QUILL_BINARY) + " " + args);
}

void expect_no_cublaslt(const CommandResult& r) {
  // The trace is really there (else the check below would pass on nothing): the loader names
  // the C++ runtime, which quill links.
  ASSERT_NE(r.output.find("file=libstdc++"), std::string::npos) << "LD_DEBUG=files gave no trace:\n" << r.output;
  EXPECT_EQ(r.output.find("libcublasLt"), std::string::npos) << "quill loaded cuBLASLt:\n" << r.output;
}

TEST(StartupLibraries, HelpLoadsNoCublasLt) {
  CommandResult r = traced("data build --help");
  ASSERT_EQ(r.status, 0) << r.output;
  expect_no_cublaslt(r);
}

TEST(StartupLibraries, DataSynthLoadsNoCublasLt) {
  const std::string out = (fs::temp_directory_path() / ("quill-startup-libs-" + std::to_string(::getpid()))).string();
  fs::remove_all(out);
  CommandResult r = traced("data synth --conversations 5 --row-tokens 64 --out " + out);
  fs::remove_all(out);
  ASSERT_EQ(r.status, 0) << r.output;
  expect_no_cublaslt(r);
}

}  // namespace
