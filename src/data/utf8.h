// UTF-8 checks for the tokenizer and the data build. Well-formed means the Unicode definition
// (table 3-7 of the standard): no overlong forms, no surrogates (U+D800..U+DFFF), nothing above
// U+10FFFF.
//
// sanitize_utf8 replaces each ill-formed sequence with U+FFFD using the "maximal subpart"
// practice of the standard (section 3.9, also W3C/WHATWG): a lead byte followed by a valid but
// truncated continuation is one U+FFFD; every other stray byte is its own U+FFFD. It is the same
// policy as Python's bytes.decode("utf-8", errors="replace"), so a corpus read that way by
// tiktoken gives the same text.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace quill {

inline constexpr size_t kUtf8Valid = static_cast<size_t>(-1);

// Byte offset of the first ill-formed sequence, or kUtf8Valid.
size_t find_invalid_utf8(std::string_view text);
inline bool is_valid_utf8(std::string_view text) { return find_invalid_utf8(text) == kUtf8Valid; }

// The text with every ill-formed sequence replaced by U+FFFD (EF BF BD); valid text is unchanged.
std::string sanitize_utf8(std::string_view text);

}  // namespace quill
