// A rows-file row made readable for a person (`quill data inspect`): the row decoded through its
// tokenizer, with the supervised tokens (mask 1) marked, either by ANSI color (green, for a
// terminal) or by [[ ]] brackets (plain text).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "data/tokenizer.h"

namespace quill {

// Consecutive tokens with the same mask bit are decoded together (so a character split over
// tokens stays whole); bytes that are still not valid UTF-8 show as U+FFFD.
std::string render_row_for_reading(const Tokenizer& tokenizer, std::span<const uint32_t> tokens,
                                   std::span<const uint8_t> mask, bool color);

}  // namespace quill
