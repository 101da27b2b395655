// For commands that write into a directory they may create (`data build --out`): when the command
// fails, a directory it created and left empty is removed, so a failed command leaves nothing.
#pragma once

#include <filesystem>
#include <string>
#include <system_error>

namespace quill::cli {

class CreatedDirGuard {
 public:
  explicit CreatedDirGuard(std::string dir) : dir_(std::move(dir)), existed_(std::filesystem::exists(dir_)) {}
  ~CreatedDirGuard() {
    if (existed_ || done_) return;
    std::error_code ec;
    if (std::filesystem::is_directory(dir_, ec) && std::filesystem::is_empty(dir_, ec)) std::filesystem::remove(dir_, ec);
  }
  CreatedDirGuard(const CreatedDirGuard&) = delete;
  CreatedDirGuard& operator=(const CreatedDirGuard&) = delete;
  // The command succeeded: keep the directory.
  void keep() { done_ = true; }

 private:
  std::string dir_;
  bool existed_;
  bool done_ = false;
};

}  // namespace quill::cli
