#include "cli/staged_output_dir.h"

#include <filesystem>
#include <system_error>

#include "base/error.h"
#include "io/dir_swap.h"

namespace quill::cli {

namespace fs = std::filesystem;

StagedOutputDir::StagedOutputDir(std::string dir, const std::string& flag, bool overwrite)
    : dir_(std::move(dir)), staging_(temp_dir_name(dir_)) {
  // A kill in the middle of an earlier swap leaves DIR aside under a side name: put it back first, so
  // that the check below sees what the user has.
  recover_dir(dir_);
  remove_stale_side_dirs(dir_);
  std::error_code ec;
  QUILL_CHECK(!fs::exists(dir_, ec) || fs::is_directory(dir_, ec), "{} {}: exists and is not a directory", flag, dir_);
  QUILL_CHECK(overwrite || !fs::is_directory(dir_, ec) || fs::is_empty(dir_, ec),
              "{} {}: is not empty (it holds earlier output); give --overwrite to replace it, or a new {}", flag, dir_,
              flag);
}

StagedOutputDir::~StagedOutputDir() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(staging_, ec);  // never throws: the command's own error is the one to report
}

void StagedOutputDir::commit() {
  swap_dir_into_place(staging_, dir_);
  committed_ = true;
}

}  // namespace quill::cli
