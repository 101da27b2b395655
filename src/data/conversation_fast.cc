#include "data/conversation_fast.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace quill {

namespace {

// Values nested deeper than this in skipped fields go to the general path (no recursion limit
// to think about here).
constexpr int kMaxDepth = 64;

// The end of the run at p of bytes that a JSON string copies as they are: up to the first '"',
// '\\' or control character (or `end`). Sixteen bytes at a time where SSE2 is there.
inline const char* plain_run_end(const char* p, const char* end) {
#if defined(__SSE2__)
  const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(0x20);
  const __m128i flip = _mm_set1_epi8(static_cast<char>(0x80));  // unsigned < as signed <
  while (end - p >= 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i stop = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
                                      _mm_cmplt_epi8(_mm_xor_si128(v, flip), _mm_xor_si128(space, flip)));
    const int mask = _mm_movemask_epi8(stop);
    if (mask != 0) return p + __builtin_ctz(static_cast<unsigned>(mask));
    p += 16;
  }
#endif
  while (p < end && *p != '"' && *p != '\\' && static_cast<unsigned char>(*p) >= 0x20) ++p;
  return p;
}

class FastParser {
 public:
  explicit FastParser(std::string_view s) : p_(s.data()), end_(s.data() + s.size()) {}

  std::optional<Conversation> conversation() {
    Conversation c;
    bool have_messages = false;
    skip_ws();
    if (!take('{')) return std::nullopt;
    skip_ws();
    if (!take('}')) {
      for (;;) {
        std::string key;
        if (!string(key) || !colon()) return std::nullopt;
        if (key == "messages") {
          c.messages.clear();
          if (!messages(c)) return std::nullopt;
          have_messages = true;
        } else if (key == "tools") {
          std::string_view raw;
          if (!raw_value(raw)) return std::nullopt;
          tools = raw;
        } else if (!skip_value(0)) {
          return std::nullopt;
        }
        skip_ws();
        if (take('}')) break;
        if (!take(',')) return std::nullopt;
        skip_ws();
      }
    }
    skip_ws();
    if (p_ != end_ || !have_messages) return std::nullopt;
    // Tools and tool calls are small: their JSON text goes through nlohmann, as in the general
    // path (the same parser on the same text gives the same values); any error: the general path.
    try {
      if (tools.data() != nullptr && tools != "null") {
        nlohmann::json t = nlohmann::json::parse(tools);
        if (!t.is_array()) return std::nullopt;
        c.tools = std::move(t);
      }
      for (size_t i = 0; i < c.messages.size(); ++i) {
        if (calls_[i].data() == nullptr || calls_[i] == "null") continue;
        nlohmann::json calls = nlohmann::json::parse(calls_[i]);
        Message& m = c.messages[i];
        if (!calls.is_array() || (m.role != Role::kModel && !calls.empty())) return std::nullopt;
        for (const nlohmann::json& call : calls) m.tool_calls.push_back(tool_call_from_json(call, "tool_calls"));
        if (!has_content_[i] && m.tool_calls.empty() && m.reasoning_content.empty()) return std::nullopt;
      }
    } catch (const std::exception&) {
      return std::nullopt;
    }
    return c;
  }

 private:
  void skip_ws() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\n' || *p_ == '\r')) ++p_;
  }
  bool take(char c) {
    if (p_ < end_ && *p_ == c) {
      ++p_;
      return true;
    }
    return false;
  }
  bool colon() {
    skip_ws();
    if (!take(':')) return false;
    skip_ws();
    return true;
  }
  bool literal(const char* word) {
    const size_t n = std::strlen(word);
    if (static_cast<size_t>(end_ - p_) < n || std::memcmp(p_, word, n) != 0) return false;
    p_ += n;
    return true;
  }
  bool null() { return literal("null"); }

  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  bool hex4(uint32_t& v) {
    if (end_ - p_ < 4) return false;
    v = 0;
    for (int k = 0; k < 4; ++k) {
      int h = hex(p_[k]);
      if (h < 0) return false;
      v = (v << 4) | static_cast<uint32_t>(h);
    }
    p_ += 4;
    return true;
  }
  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  // A JSON string at p_ into out (replacing it). The text between escapes is copied in runs; a
  // raw control character, a bad escape or a lone surrogate is an error (as in nlohmann).
  bool string(std::string& out) {
    if (!take('"')) return false;
    out.clear();
    for (;;) {
      const char* run = p_;
      p_ = plain_run_end(p_, end_);
      out.append(run, static_cast<size_t>(p_ - run));
      if (p_ == end_ || static_cast<unsigned char>(*p_) < 0x20) return false;
      if (*p_++ == '"') return true;
      if (p_ == end_) return false;
      const char e = *p_++;
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = 0;
          if (!hex4(cp)) return false;
          if (cp >= 0xDC00 && cp <= 0xDFFF) return false;  // a low surrogate first
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t lo = 0;
            if (!take('\\') || !take('u') || !hex4(lo) || lo < 0xDC00 || lo > 0xDFFF) return false;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default: return false;
      }
    }
  }
  // A string, or null (-> empty) when null_ok.
  bool string_or_null(std::string& out, bool null_ok) {
    if (null_ok && null()) {
      out.clear();
      return true;
    }
    return p_ < end_ && *p_ == '"' && string(out);
  }

  // Integers of up to 18 digits only (a fraction, an exponent or more digits: the general path
  // decides how it reads them; nlohmann reads a longer integer as a double, which can overflow).
  bool integer() {
    take('-');
    if (p_ == end_ || *p_ < '0' || *p_ > '9') return false;
    if (*p_ == '0') {
      ++p_;
    } else {
      const char* first = p_;
      while (p_ < end_ && *p_ >= '0' && *p_ <= '9') ++p_;
      if (p_ - first > 18) return false;
    }
    return p_ == end_ || (*p_ != '.' && *p_ != 'e' && *p_ != 'E' && !(*p_ >= '0' && *p_ <= '9'));
  }
  bool skip_value(int depth) {
    if (p_ == end_ || depth > kMaxDepth) return false;
    std::string scratch;
    switch (*p_) {
      case '"': return string(scratch);
      case 'n': return literal("null");
      case 't': return literal("true");
      case 'f': return literal("false");
      case '[': {
        ++p_;
        skip_ws();
        if (take(']')) return true;
        for (;;) {
          if (!skip_value(depth + 1)) return false;
          skip_ws();
          if (take(']')) return true;
          if (!take(',')) return false;
          skip_ws();
        }
      }
      case '{': {
        ++p_;
        skip_ws();
        if (take('}')) return true;
        for (;;) {
          if (!string(scratch) || !colon() || !skip_value(depth + 1)) return false;
          skip_ws();
          if (take('}')) return true;
          if (!take(',')) return false;
          skip_ws();
        }
      }
      default: return integer();
    }
  }

  // A value's JSON text, checked as skip_value checks it.
  bool raw_value(std::string_view& raw) {
    const char* start = p_;
    if (!skip_value(0)) return false;
    raw = std::string_view(start, static_cast<size_t>(p_ - start));
    return true;
  }

  bool messages(Conversation& c) {
    calls_.clear();
    has_content_.clear();
    if (!take('[')) return false;
    skip_ws();
    if (take(']')) return true;
    for (;;) {
      if (!message(c.messages.emplace_back())) return false;
      skip_ws();
      if (take(']')) return true;
      if (!take(',')) return false;
      skip_ws();
    }
  }

  // One message, checked as message_from_json checks it (any failure: the general path, which
  // reports it).
  bool message(Message& m) {
    if (!take('{')) return false;
    bool have_role = false, have_content = false;
    std::string role, reasoning_content, reasoning, key;
    std::string_view calls;  // the tool_calls text (null data: none)
    skip_ws();
    if (!take('}')) {
      for (;;) {
        if (!string(key) || !colon()) return false;
        bool ok;
        if (key == "role") ok = have_role = string_or_null(role, false);
        else if (key == "content") ok = have_content = string_or_null(m.content, true);
        else if (key == "reasoning_content") ok = string_or_null(reasoning_content, true);
        else if (key == "reasoning") ok = string_or_null(reasoning, true);
        else if (key == "name") ok = string_or_null(m.name, true);
        else if (key == "tool_call_id") ok = string_or_null(m.tool_call_id, true);
        else if (key == "tool_calls") ok = raw_value(calls);
        else ok = skip_value(0);
        if (!ok) return false;
        skip_ws();
        if (take('}')) break;
        if (!take(',')) return false;
        skip_ws();
      }
    }
    if (!have_role) return false;
    std::optional<Role> r = parse_role(role);
    if (!r) return false;
    m.role = *r;
    m.reasoning_content = reasoning_content.empty() ? std::move(reasoning) : std::move(reasoning_content);
    if (!m.reasoning_content.empty() && m.role != Role::kModel) return false;
    calls_.push_back(calls);
    has_content_.push_back(have_content);
    // Without content, tool calls may make it optional: decided once they are read.
    const bool may_have_calls = m.role == Role::kModel && calls.data() != nullptr && calls != "null";
    return have_content || may_have_calls || (m.role == Role::kModel && !m.reasoning_content.empty());
  }

  const char* p_;
  const char* end_;
  std::string_view tools;              // the top-level tools text (null data: none)
  std::vector<std::string_view> calls_;  // per message: its tool_calls text (null data: none)
  std::vector<bool> has_content_;
};

}  // namespace

std::optional<Conversation> parse_conversation_fast(std::string_view line) {
  return FastParser(line).conversation();
}

}  // namespace quill
