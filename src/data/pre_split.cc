#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/pre_split.h"

#include <pcre2.h>

#include <array>
#include <atomic>
#include <cstring>
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

namespace {

// Unicode classes of the o200k pattern, per code point: bits of kUniClass. Non-ASCII code points
// are classified on first use by PCRE2 itself (the same library and Unicode tables as the
// pattern), so the hand-written matcher below agrees with PCRE2 by construction.
enum : uint8_t {
  kU = 1,       // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]  (the "upper" run)
  kLw = 2,      // [\p{Ll}\p{Lm}\p{Lo}\p{M}]        (the "lower" run)
  kLet = 4,     // \p{L}
  kNum = 8,     // \p{N}
  kWs = 16,     // White_Space (\s of Rust and Oniguruma)
  kNl = 32,     // \r or \n
  kKnown = 128  // the entry has been computed
};

constexpr std::array<uint8_t, 128> make_ascii_uni() {
  std::array<uint8_t, 128> t{};
  for (int c = 0; c < 128; ++c) {
    uint8_t k = kKnown;
    if (c >= 'A' && c <= 'Z') k |= kU | kLet;
    else if (c >= 'a' && c <= 'z') k |= kLw | kLet;
    else if (c >= '0' && c <= '9') k |= kNum;
    else if (c == '\r' || c == '\n') k |= kWs | kNl;
    else if (c == ' ' || (c >= '\t' && c <= '\f')) k |= kWs;
    t[c] = k;
  }
  return t;
}
constexpr std::array<uint8_t, 128> kAsciiUni = make_ascii_uni();

struct UniClassifier {
  pcre2_code* code[4] = {};
  UniClassifier() {
    const char* patterns[4] = {R"([\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])", R"([\p{Ll}\p{Lm}\p{Lo}\p{M}])", R"(\p{L})", R"(\p{N})"};
    for (int k = 0; k < 4; ++k) {
      int err = 0;
      PCRE2_SIZE offset = 0;
      code[k] = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(patterns[k]), PCRE2_ZERO_TERMINATED,
                              PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &err, &offset, nullptr);
      QUILL_CHECK(code[k] != nullptr, "PCRE2: the class pattern {} does not compile", patterns[k]);
    }
  }
  uint8_t classify(uint32_t cp, const char* utf8, size_t len) const {
    uint8_t bits = kKnown;
    if (cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
        cp == 0x202F || cp == 0x205F || cp == 0x3000) {
      bits |= kWs;
    }
    pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
    const uint8_t flags[4] = {kU, kLw, kLet, kNum};
    for (int k = 0; k < 4; ++k) {
      if (pcre2_match(code[k], reinterpret_cast<PCRE2_SPTR>(utf8), len, 0, PCRE2_NO_UTF_CHECK, md, nullptr) >= 0) {
        bits |= flags[k];
      }
    }
    pcre2_match_data_free(md);
    return bits;
  }
};

std::atomic<uint8_t> g_uni_class[0x110000];

struct UChar {
  uint8_t bits;  // 0 at the end of the text
  uint8_t len;   // bytes; 0 at the end
  uint32_t cp;
};

UChar classify_slow(const uint8_t* p, uint32_t cp, uint8_t len) {
  static const UniClassifier classifier;
  uint8_t bits = classifier.classify(cp, reinterpret_cast<const char*>(p), len);
  g_uni_class[cp].store(bits, std::memory_order_relaxed);
  return {bits, len, cp};
}

// The character at t[i] of valid UTF-8.
inline UChar uchar_at(std::string_view t, size_t i) {
  if (i >= t.size()) return {0, 0, 0};
  const auto* p = reinterpret_cast<const uint8_t*>(t.data()) + i;
  uint8_t b = p[0];
  if (b < 0x80) return {kAsciiUni[b], 1, b};
  uint32_t cp;
  uint8_t len;
  if (b < 0xE0) {
    cp = ((b & 0x1Fu) << 6) | (p[1] & 0x3Fu);
    len = 2;
  } else if (b < 0xF0) {
    cp = ((b & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
    len = 3;
  } else {
    cp = ((b & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu);
    len = 4;
  }
  uint8_t bits = g_uni_class[cp].load(std::memory_order_relaxed);
  if (bits == 0) [[unlikely]] return classify_slow(p, cp, len);
  return {bits, len, cp};
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d)? at m: its end, or m. Under Unicode case folding only 's has a
// non-ASCII spelling (U+017F, the long s).
size_t contraction_u(std::string_view t, size_t m) {
  if (m >= t.size() || t[m] != '\'') return m;
  UChar a = uchar_at(t, m + 1);
  if (a.len == 0) return m;
  uint32_t c = a.cp < 128 ? static_cast<uint32_t>(lower(static_cast<char>(a.cp))) : a.cp;
  if (c == 's' || c == 't' || c == 'm' || c == 'd' || c == 0x17F) return m + 1 + a.len;
  if ((c == 'r' || c == 'v' || c == 'l') && m + 2 < t.size()) {
    char b = lower(t[m + 2]);
    if ((c == 'l' && b == 'l') || (c != 'l' && b == 'e')) return m + 3;
  }
  return m;
}

// Alternative 1 from j (after the optional prefix): [U]*[Lw]+ contraction?; 0 when it fails.
// The greedy U* gives back characters until Lw+ can start: the last Lw start in the U run.
size_t word_upper_lower(std::string_view t, size_t j) {
  size_t k = j, last = std::string_view::npos;
  UChar u = uchar_at(t, k);
  for (; u.bits & kU; u = uchar_at(t, k)) {
    if (u.bits & kLw) last = k;
    k += u.len;
  }
  if (u.bits & kLw) last = k;
  if (last == std::string_view::npos) return 0;
  size_t m = last;
  for (u = uchar_at(t, m); u.bits & kLw; u = uchar_at(t, m)) m += u.len;
  return contraction_u(t, m);
}

// Alternative 2 from j: [U]+[Lw]* contraction?; 0 when it fails.
size_t word_upper(std::string_view t, size_t j) {
  size_t k = j;
  UChar u = uchar_at(t, k);
  for (; u.bits & kU; u = uchar_at(t, k)) k += u.len;
  if (k == j) return 0;
  for (; u.bits & kLw; u = uchar_at(t, k)) k += u.len;
  return contraction_u(t, k);
}

}  // namespace

size_t o200k_piece(std::string_view t, size_t i) {
  if (size_t e = o200k_ascii_piece(t, i); e > i) return e;
  const UChar c = uchar_at(t, i);
  if (c.len == 0) return 0;
  const bool prefix = !(c.bits & (kLet | kNum | kNl));  // [^\r\n\p{L}\p{N}]
  size_t e;
  if (prefix && (e = word_upper_lower(t, i + c.len))) return e;
  if ((e = word_upper_lower(t, i))) return e;
  if (prefix && (e = word_upper(t, i + c.len))) return e;
  if ((e = word_upper(t, i))) return e;
  if (c.bits & kNum) {  // \p{N}{1,3}
    size_t k = i + c.len;
    for (int count = 1; count < 3; ++count) {
      UChar u = uchar_at(t, k);
      if (!(u.bits & kNum)) break;
      k += u.len;
    }
    return k;
  }
  // ` ?[^\s\p{L}\p{N}]+[\r\n/]*`
  size_t k = t[i] == ' ' ? i + 1 : i;
  UChar u = uchar_at(t, k);
  if (u.len != 0 && !(u.bits & (kWs | kLet | kNum))) {
    for (; u.len != 0 && !(u.bits & (kWs | kLet | kNum)); u = uchar_at(t, k)) k += u.len;
    while (k < t.size() && (t[k] == '\r' || t[k] == '\n' || t[k] == '/')) ++k;
    return k;
  }
  // \s*[\r\n]+ | \s+(?!\S) | \s+ on the whitespace run [i, end).
  size_t end = i, last_start = i, last_newline = std::string_view::npos, count = 0;
  for (u = uchar_at(t, end); u.bits & kWs; u = uchar_at(t, end)) {
    if (u.bits & kNl) last_newline = end;
    last_start = end;
    end += u.len;
    ++count;
  }
  if (count == 0) return 0;  // unreachable: every character starts some alternative
  if (last_newline != std::string_view::npos) return last_newline + 1;
  if (end >= t.size()) return end;
  if (count >= 2) return last_start;
  return end;
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
    if (size_t e = o200k_piece(text, start); e > start) {
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
