#include "data/text_chunks.h"

#include <algorithm>
#include <cstring>

namespace quill {

namespace {

bool ascii_alnum(char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }

}  // namespace

size_t chunk_count(size_t text_size, size_t chunk_bytes) { return (text_size + chunk_bytes - 1) / chunk_bytes; }

size_t first_cut_point(std::string_view text, size_t from, size_t to) {
  to = std::min(to, text.size());
  // A cut point p needs its '\n' at p - 1, in [max(from, 1) - 1, to - 1).
  size_t i = from == 0 ? 0 : from - 1;
  while (i + 1 < to) {
    const void* hit = std::memchr(text.data() + i, '\n', to - 1 - i);
    if (hit == nullptr) break;
    i = static_cast<size_t>(static_cast<const char*>(hit) - text.data());
    if (ascii_alnum(text[i + 1])) return i + 1;
    ++i;
  }
  return to;
}

TextChunk text_chunk(std::string_view text, size_t chunk_bytes, size_t j) {
  const size_t n = text.size(), lo = j * chunk_bytes, hi = std::min(n, lo + chunk_bytes);
  size_t begin = j == 0 ? 0 : first_cut_point(text, lo, hi);
  if (begin >= hi) return {};
  // The next chunk that is not empty begins at the first cut point of the intervals after this one.
  return {begin, hi >= n ? n : first_cut_point(text, hi, n)};
}

}  // namespace quill
