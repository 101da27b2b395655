// Cutting a text into byte ranges of whole lines, for files read on several threads (the data
// build's JSONL, tiktoken rank files): range r holds the lines that start in
// [r * range_bytes, (r + 1) * range_bytes), which depends only on the text and the range size.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string_view>
#include <utility>

namespace quill {

// The first line start at or after `pos` (a line starts at 0 and after every '\n'), or
// text.size() when none is left.
inline size_t line_start_at_or_after(std::string_view text, size_t pos) {
  if (pos == 0 || pos >= text.size()) return std::min(pos, text.size());
  if (text[pos - 1] == '\n') return pos;
  const void* nl = std::memchr(text.data() + pos, '\n', text.size() - pos);
  return nl ? static_cast<size_t>(static_cast<const char*>(nl) - text.data()) + 1 : text.size();
}

// [begin, end) of range r: from the first line start at or after r * range_bytes to the first
// at or after (r + 1) * range_bytes.
inline std::pair<size_t, size_t> line_range(std::string_view text, size_t range_bytes, size_t r) {
  return {line_start_at_or_after(text, std::min(text.size(), r * range_bytes)),
          line_start_at_or_after(text, std::min(text.size(), (r + 1) * range_bytes))};
}

// The end of the line starting at `pos` (its '\n', or `end`); `end` is a line start or the
// end of the text.
inline size_t line_end(std::string_view text, size_t pos, size_t end) {
  const void* nl = std::memchr(text.data() + pos, '\n', end - pos);
  return nl ? static_cast<size_t>(static_cast<const char*>(nl) - text.data()) : end;
}

}  // namespace quill
