// A file written by appending, each write flushed to the kernel and checked: a full disk or a failed
// write stops the caller naming the file (and what it was for) instead of leaving it cut off silently.
// Shared by OUT/metrics.jsonl (train/metrics_file.h) and the TensorBoard event file (train/tensorboard.h).
#pragma once

#include <cstdio>
#include <string>

namespace quill {

class AppendFile {
 public:
  // Opens `path` for appending (created when absent). `what` names the contents in a write error
  // ("metrics", "scalars").
  AppendFile(const std::string& path, std::string what);
  ~AppendFile();
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;

  // Appends the bytes and flushes them; a failed write or flush throws naming the file.
  void write(const std::string& bytes);
  // Closes, checking that the last bytes reached the file (idempotent).
  void close();
  const std::string& path() const { return path_; }

 private:
  std::string path_, what_;
  std::FILE* file_ = nullptr;
};

}  // namespace quill
