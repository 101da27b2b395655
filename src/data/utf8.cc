#include "data/utf8.h"

#include <cstdint>
#include <cstring>

namespace quill {

namespace {

// Length of the well-formed sequence at p[0..n), or 0 with *subpart set to the length of the
// maximal subpart (>= 1) to replace when it is ill-formed.
inline size_t sequence_length(const unsigned char* p, size_t n, size_t* subpart) {
  unsigned char b = p[0];
  size_t len;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) {
    len = 2;
  } else if (b >= 0xE0 && b <= 0xEF) {
    len = 3;
    if (b == 0xE0) lo = 0xA0;       // no overlongs
    else if (b == 0xED) hi = 0x9F;  // no surrogates
  } else if (b >= 0xF0 && b <= 0xF4) {
    len = 4;
    if (b == 0xF0) lo = 0x90;       // no overlongs
    else if (b == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    *subpart = 1;  // 80..C1, F5..FF never start a sequence
    return 0;
  }
  size_t i = 1;
  for (; i < len; ++i) {
    if (i >= n) break;
    unsigned char c = p[i];
    unsigned char l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
    if (c < l || c > h) break;
  }
  if (i == len) return len;
  *subpart = i;
  return 0;
}

// Skips ASCII eight bytes at a time.
inline size_t skip_ascii(const unsigned char* p, size_t i, size_t n) {
  while (i + 8 <= n) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    if (w & 0x8080808080808080ull) break;
    i += 8;
  }
  while (i < n && p[i] < 0x80) ++i;
  return i;
}

}  // namespace

size_t find_invalid_utf8(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  size_t n = text.size(), i = 0, subpart = 0;
  while (true) {
    i = skip_ascii(p, i, n);
    if (i >= n) return kUtf8Valid;
    size_t len = sequence_length(p + i, n - i, &subpart);
    if (len == 0) return i;
    i += len;
  }
}

std::string sanitize_utf8(std::string_view text) {
  size_t first = find_invalid_utf8(text);
  if (first == kUtf8Valid) return std::string(text);
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  size_t n = text.size(), i = first, subpart = 0;
  std::string out(text.substr(0, first));
  out.reserve(text.size() + 16);
  while (i < n) {
    size_t j = skip_ascii(p, i, n);
    out.append(text.data() + i, j - i);
    i = j;
    if (i >= n) break;
    size_t len = sequence_length(p + i, n - i, &subpart);
    if (len > 0) {
      out.append(text.data() + i, len);
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      i += subpart;
    }
  }
  return out;
}

}  // namespace quill
