#include "data/ids_json.h"

#include <charconv>

namespace quill {

std::string ids_json(std::span<const uint32_t> ids) {
  std::string out;
  out.resize(2 + ids.size() * 11);  // "[" + up to 10 digits and a separator per id + "]"
  char* p = out.data();
  char* const end = out.data() + out.size();
  *p++ = '[';
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) *p++ = ',';
    p = std::to_chars(p, end, ids[i]).ptr;
  }
  *p++ = ']';
  out.resize(static_cast<size_t>(p - out.data()));
  return out;
}

}  // namespace quill
