// The lines of a JSONL file, found in parallel: the text is cut into byte ranges, each thread
// lists the lines that start in its ranges, and the lists are numbered and joined by prefix sums.
// The result depends only on the text, never on the thread count or the range size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "base/thread_pool.h"

namespace quill {

struct JsonlLine {
  size_t offset;   // of its first byte
  size_t length;   // without the '\n'
  int64_t number;  // 1-based, blank lines counted
};

struct JsonlLines {
  std::vector<JsonlLine> lines;  // every line with a byte other than ' ', '\t', '\r', in order
  int64_t total = 0;             // every line, blank or not ("a\n" is one line, "a\nb" two)
};

// range_bytes: the size of the ranges (0: about 8 per thread, at least 1 MiB).
JsonlLines split_jsonl_lines(std::string_view text, ThreadPool& pool, size_t range_bytes = 0);

}  // namespace quill
