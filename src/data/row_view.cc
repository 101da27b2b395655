#include "data/row_view.h"

#include "base/error.h"
#include "data/utf8.h"

namespace quill {

std::string render_row_for_reading(const Tokenizer& tokenizer, std::span<const uint32_t> tokens,
                                   std::span<const uint8_t> mask, bool color) {
  QUILL_CHECK(tokens.size() == mask.size(), "row view: {} tokens but {} mask bytes", tokens.size(), mask.size());
  const char* open = color ? "\033[32m" : "[[";
  const char* close = color ? "\033[0m" : "]]";
  std::string out;
  for (size_t i = 0; i < tokens.size();) {
    size_t j = i;
    while (j < tokens.size() && (mask[j] != 0) == (mask[i] != 0)) ++j;
    std::string text = sanitize_utf8(tokenizer.decode(tokens.subspan(i, j - i)));
    if (mask[i]) out += open + text + close;
    else out += text;
    i = j;
  }
  return out;
}

}  // namespace quill
