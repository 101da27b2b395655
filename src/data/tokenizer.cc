#include "data/tokenizer.h"

#include "base/error.h"

namespace quill {

uint32_t Tokenizer::special_id(std::string_view spelling) const {
  std::optional<uint32_t> id = find_special(spelling);
  QUILL_CHECK(id.has_value(), "tokenizer {}: no special token {}", name(), spelling);
  return *id;
}

void Tokenizer::encode_append(std::string_view text, std::vector<uint32_t>& out) const {
  std::vector<uint32_t> ids = encode(text);
  out.insert(out.end(), ids.begin(), ids.end());
}

}  // namespace quill
