#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/pre_split.h"

#include <pcre2.h>

#include <array>
#include <cstdint>

#include "base/error.h"

namespace quill {

namespace {

// Unicode White_Space, the meaning of \s in Rust's regex crate and in Oniguruma.
constexpr std::string_view kWhiteSpaceItems =
    R"(\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  int n = pcre2_get_error_message(code, buf, sizeof buf);
  return n < 0 ? fmt::format("PCRE2 error {}", code) : std::string(reinterpret_cast<char*>(buf));
}

// Per-thread match state: independent of the pattern, so one per thread serves every regex.
struct MatchScratch {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  MatchScratch() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    // Long whitespace runs backtrack over \s+(?!\S); 32 KiB to 8 MiB is plenty for any piece.
    stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    QUILL_CHECK(data && context && stack, "PCRE2: out of memory for match state");
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~MatchScratch() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

MatchScratch& scratch() {
  thread_local MatchScratch s;
  return s;
}

}  // namespace

std::string pcre2_pattern_from_rust(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char e = p[i + 1];
      ++i;
      if (e == 's') {
        if (in_class) out += kWhiteSpaceItems;
        else out += "[" + std::string(kWhiteSpaceItems) + "]";
      } else if (e == 'S') {
        QUILL_CHECK(!in_class, "pre-tokenizer pattern: \\S inside a character class is not supported: {}", p);
        out += "[^" + std::string(kWhiteSpaceItems) + "]";
      } else {
        out += '\\';
        out += e;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal, not the end of the class.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

namespace {

enum : uint8_t { kOther = 0, kUpper = 1, kLower = 2, kDigit = 3, kSpace = 4, kNewline = 5, kHigh = 6 };

constexpr std::array<uint8_t, 256> make_ascii_classes() {
  std::array<uint8_t, 256> t{};
  for (int c = 0; c < 256; ++c) {
    uint8_t k = kOther;
    if (c >= 0x80) k = kHigh;
    else if (c >= 'A' && c <= 'Z') k = kUpper;
    else if (c >= 'a' && c <= 'z') k = kLower;
    else if (c >= '0' && c <= '9') k = kDigit;
    else if (c == '\r' || c == '\n') k = kNewline;
    else if (c == ' ' || c == '\t' || c == '\v' || c == '\f') k = kSpace;
    t[c] = k;
  }
  return t;
}
constexpr std::array<uint8_t, 256> kClass = make_ascii_classes();

inline uint8_t klass(std::string_view t, size_t i) {
  return i < t.size() ? kClass[static_cast<uint8_t>(t[i])] : static_cast<uint8_t>(kOther);
}
inline bool at_end(std::string_view t, size_t i) { return i >= t.size(); }
inline char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; }

// (?i:'s|'t|'re|'ve|'m|'ll|'d)? at i: the end of the contraction, i when there is none, or 0
// when a non-ASCII byte decides (U+017F, the long s, matches 's).
size_t contraction(std::string_view t, size_t i) {
  if (at_end(t, i) || t[i] != '\'') return i;
  if (klass(t, i + 1) == kHigh) return 0;
  if (at_end(t, i + 1)) return i;
  char a = lower(t[i + 1]);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
  if (a == 'r' || a == 'v' || a == 'l') {
    if (klass(t, i + 2) == kHigh) return 0;
    if (at_end(t, i + 2)) return i;
    char b = lower(t[i + 2]);
    if ((a == 'l' && b == 'l') || (a != 'l' && b == 'e')) return i + 3;
  }
  return i;
}

}  // namespace

size_t o200k_ascii_piece(std::string_view t, size_t i) {
  const uint8_t c = klass(t, i);
  if (c == kHigh || at_end(t, i)) return 0;
  // Alternatives 1 and 2: an optional prefix (anything but a letter, digit, \r or \n), then
  // upper* lower+ or upper+ lower*, then an optional contraction.
  size_t j = i;
  if (c == kOther || c == kSpace) {
    j = i + 1;
    if (klass(t, j) == kHigh) return 0;
  }
  if (c == kUpper || c == kLower || j > i) {
    size_t k = j;
    while (klass(t, k) == kUpper) ++k;
    size_t m = k;
    while (klass(t, m) == kLower) ++m;
    if (klass(t, m) == kHigh) return 0;  // a letter or mark could continue the word
    if (m > j) return contraction(t, m);
  }
  // Alternative 3: one to three digits.
  if (c == kDigit) {
    size_t k = i;
    while (k < i + 3 && klass(t, k) == kDigit) ++k;
    if (k < i + 3 && klass(t, k) == kHigh) return 0;  // a non-ASCII digit could continue
    return k;
  }
  // Alternative 4: an optional space, other+, then [\r\n/]*.
  size_t k = (c == kSpace && t[i] == ' ') ? i + 1 : i;
  if (klass(t, k) == kOther && !at_end(t, k)) {
    while (!at_end(t, k) && klass(t, k) == kOther) ++k;
    if (klass(t, k) == kHigh) return 0;  // a symbol could continue
    while (!at_end(t, k) && (t[k] == '\r' || t[k] == '\n' || t[k] == '/')) ++k;
    return k;
  }
  if (c == kOther) return 0;  // unreachable for ASCII (alternative 4 takes it); be safe
  // Alternatives 5 to 7 on the whitespace run [i, e).
  size_t e = i, last_newline = 0;
  bool newline = false;
  while (!at_end(t, e) && (klass(t, e) == kSpace || klass(t, e) == kNewline)) {
    if (klass(t, e) == kNewline) {
      newline = true;
      last_newline = e;
    }
    ++e;
  }
  if (klass(t, e) == kHigh) return 0;  // U+00A0, U+3000, ... could continue the run
  if (newline) return last_newline + 1;     // \s*[\r\n]+
  if (at_end(t, e)) return e;               // \s+(?!\S) at the end
  if (e - i >= 2) return e - 1;             // \s+(?!\S): leave the last one
  return e;                                 // \s+
}

PreSplitRegex::PreSplitRegex(std::string_view pattern) : pattern_(pattern) {
  std::string translated = pcre2_pattern_from_rust(pattern);
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
  QUILL_CHECK(code != nullptr, "pre-tokenizer pattern does not compile ({} at offset {}): {}", pcre2_message(err),
              offset, pattern);
  code_ = code;
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  set_ascii_fast_path(true);
}

PreSplitRegex::~PreSplitRegex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

bool PreSplitRegex::find(std::string_view text, size_t start, size_t* begin, size_t* end) const {
  if (ascii_fast_) {
    if (size_t e = o200k_ascii_piece(text, start); e > start) {
      *begin = start;
      *end = e;
      return true;
    }
  }
  MatchScratch& s = scratch();
  auto* code = static_cast<const pcre2_code*>(code_);
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  int rc = jit_ ? pcre2_jit_match(code, subject, text.size(), start, 0, s.data, s.context)
                : pcre2_match(code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, s.data, s.context);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  QUILL_CHECK(rc >= 0, "pre-tokenizer match failed ({}) at byte {}", pcre2_message(rc), start);
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.data);
  *begin = ov[0];
  *end = ov[1];
  return true;
}

}  // namespace quill
