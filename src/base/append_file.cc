#include "base/append_file.h"

#include <cerrno>
#include <cstring>
#include <utility>

#include "base/error.h"

namespace quill {

AppendFile::AppendFile(const std::string& path, std::string what) : path_(path), what_(std::move(what)) {
  file_ = std::fopen(path.c_str(), "ab");
  QUILL_CHECK(file_ != nullptr, "{}: cannot open for appending ({})", path, std::strerror(errno));
}

AppendFile::~AppendFile() {
  if (file_) std::fclose(file_);
}

void AppendFile::write(const std::string& bytes) {
  QUILL_CHECK(file_ != nullptr, "{}: append after close", path_);
  errno = 0;
  const bool written = std::fwrite(bytes.data(), 1, bytes.size(), file_) == bytes.size();
  const bool flushed = written && std::fflush(file_) == 0;
  QUILL_CHECK(flushed, "{}: write failed ({}); stopping, as the run's {} could not be recorded", path_,
              std::strerror(errno ? errno : EIO), what_);
}

void AppendFile::close() {
  if (!file_) return;
  std::FILE* f = file_;
  file_ = nullptr;
  QUILL_CHECK(std::fclose(f) == 0, "{}: close failed ({})", path_, std::strerror(errno));
}

}  // namespace quill
