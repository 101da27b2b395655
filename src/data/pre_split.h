// The pre-tokenizer split of byte-level BPE: a regular expression cuts text into pieces, and BPE
// runs inside each piece. Patterns are written in the syntax tiktoken and Hugging Face use (Rust
// regex / Oniguruma) and run on PCRE2 (JIT-compiled, UTF and Unicode-property mode). The o200k
// pattern is matched by hand instead (o200k_piece), with PCRE2's own Unicode classes.
//
// Exactness: the one construct whose meaning differs between those engines and PCRE2 is \s. With
// PCRE2_UCP, PCRE2's \s is "Z or tab/LF/VT/FF/CR", which leaves out U+0085; Rust's and
// Oniguruma's \s is the Unicode White_Space property. The constructor therefore rewrites \s and
// \S into the explicit White_Space class before compiling. Letter, number and mark classes
// (\p{L}, \p{N}, \p{M}, ...) follow the Unicode version of the PCRE2 library (10.42: Unicode 14);
// characters first assigned in a later Unicode version can be classified differently than by a
// newer tiktoken build.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace quill {

// tiktoken's o200k_base pattern (tiktoken_ext/openai_public.py), also the pre-tokenizer of
// o200k-style tokenizer.json files.
inline constexpr std::string_view kO200kPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n/]*)"
    R"(|\s*[\r\n]+)"
    R"(|\s+(?!\S))"
    R"(|\s+)";

// The GPT-2 pattern that Hugging Face's ByteLevel pre-tokenizer applies when use_regex is true.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// The pattern with \s and \S replaced by the White_Space class (see above). Other text is copied.
// A \S inside a character class is an error (no pattern we load has one).
std::string pcre2_pattern_from_rust(std::string_view pattern);

class PreSplitRegex {
 public:
  // Compiles `pattern` (Rust syntax); errors name the pattern and the PCRE2 message.
  explicit PreSplitRegex(std::string_view pattern);
  ~PreSplitRegex();
  PreSplitRegex(const PreSplitRegex&) = delete;
  PreSplitRegex& operator=(const PreSplitRegex&) = delete;

  // The next match in text at or after `start`: true with its [begin, end). `text` must be valid
  // UTF-8 (the JIT matcher does not check). Safe to call from many threads at once.
  bool find(std::string_view text, size_t start, size_t* begin, size_t* end) const;

  const std::string& pattern() const { return pattern_; }
  bool jit() const { return jit_; }
  // With the o200k pattern, pieces that lie in ASCII text are cut by a hand-written matcher
  // (o200k_ascii_piece) and PCRE2 sees only the rest; `fast` false turns that off (for tests).
  void set_ascii_fast_path(bool fast) { ascii_fast_ = fast && pattern_ == kO200kPattern; }

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8
  bool jit_ = false;
  bool ascii_fast_ = false;
};

// The o200k piece that starts at text[i], when deciding it needs no character outside ASCII:
// its end (> i); 0 when a non-ASCII byte could change the answer (PCRE2 decides those). This is
// the o200k pattern's alternatives worked out for ASCII: letters are [A-Z] (upper) and [a-z]
// (lower), digits [0-9], whitespace \t \n \v \f \r and space, everything else (punctuation,
// symbols, control characters) is "other". Measured: PCRE2 JIT is ~20% of encode time on code and
// this cuts most of it (docs/tokenizer.md); tests compare it with PCRE2 on random text.
size_t o200k_ascii_piece(std::string_view text, size_t i);

// The o200k piece that starts at text[i] for any valid UTF-8 (0 only at the end): the pattern's
// alternatives worked out by hand for all of Unicode (o200k_ascii_piece first). The classes of
// non-ASCII characters (\p{Lu}..., \p{N}, White_Space) are asked of PCRE2 on first sight and kept
// in a table, so they are PCRE2's. v4: PCRE2 JIT was ~20% of encode time on mixed text.
size_t o200k_piece(std::string_view text, size_t i);

}  // namespace quill
