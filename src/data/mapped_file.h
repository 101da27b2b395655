// A read-only memory map of a whole file (an empty file maps to nothing): the data build reads
// its JSONL input this way, so every thread can read any line without copies.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace quill {

class MappedFile {
 public:
  // Errors name the file (cannot open, stat or map it).
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  std::string_view view() const { return {data_, size_}; }

 private:
  const char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace quill
