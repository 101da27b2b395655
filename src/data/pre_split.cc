#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/pre_split.h"

#include <pcre2.h>

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
}

PreSplitRegex::~PreSplitRegex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

bool PreSplitRegex::find(std::string_view text, size_t start, size_t* begin, size_t* end) const {
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
