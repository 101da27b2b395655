#include "data/chat_render.h"

#include <array>
#include <charconv>
#include <cctype>
#include <cmath>
#include <map>

#include "base/error.h"

namespace quill {

namespace {

// The control tokens the renderer emits, resolved to ids once per renderer.
enum Tok : int {
  kMsgSystem,
  kMsgUser,
  kMsgModel,
  kMsgTool,
  kText,
  kThinking,
  kXml,
  kToolJson,
  kEndMessage,
  kEndSampling,
  kTokCount
};

constexpr std::array<std::string_view, kTokCount> kTokSpelling = {
    "<|message_system|>", "<|message_user|>", "<|message_model|>",         "<|message_tool|>",
    "<|content_text|>",   "<|content_thinking|>", "<|content_xml|>",       "<|content_invoke_tool_json|>",
    "<|end_message|>",    "<|content_model_end_sampling|>",
};

// Message token per Role (indexed by the enum's value).
constexpr std::array<Tok, 4> kRoleMessage = {kMsgSystem, kMsgUser, kMsgModel, kMsgTool};
static_assert(static_cast<int>(Role::kSystem) == 0 && static_cast<int>(Role::kUser) == 1 &&
              static_cast<int>(Role::kModel) == 2 && static_cast<int>(Role::kTool) == 3);

constexpr std::pair<std::string_view, std::string_view> kEffortLevels[] = {
    {"none", "0"}, {"minimal", "0.1"}, {"low", "0.2"}, {"medium", "0.7"}, {"high", "0.9"}, {"max", "0.99"},
};

constexpr std::string_view kToolDeclareAuthor = "tool_declare";
constexpr std::string_view kEffortPrefix = "Thinking effort level: ";

class Emitter {
 public:
  Emitter(const Tokenizer& tok, const std::vector<uint32_t>& ids, MaskedTokens& out) : tok_(tok), ids_(ids), out_(out) {
    out_.tokens.clear();
    out_.mask.clear();
  }

  void special(Tok t) {
    out_.tokens.push_back(ids_[t]);
    out_.mask.push_back(0);
  }
  void text(std::string_view s) {
    tok_.encode_append(s, out_.tokens);
    out_.mask.resize(out_.tokens.size(), 0);
  }
  // <message>[author]<content>{body}<|end_message|>
  void block(Tok message, std::string_view author, Tok content, std::string_view body) {
    special(message);
    if (!author.empty()) text(author);
    special(content);
    text(body);
    special(kEndMessage);
  }
  void supervise_from(size_t begin) {
    for (size_t i = begin; i < out_.mask.size(); ++i) out_.mask[i] = 1;
  }
  size_t size() const { return out_.tokens.size(); }

 private:
  const Tokenizer& tok_;
  const std::vector<uint32_t>& ids_;
  MaskedTokens& out_;
};

}  // namespace

std::string python_float_repr(double v) {
  QUILL_CHECK(std::isfinite(v), "python_float_repr: {} is not finite", v);
  if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, std::fabs(v), std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));  // shortest round trip: d[.ddd]e±XX
  size_t epos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, epos)) {
    if (c != '.') digits += c;
  }
  int exp = std::stoi(std::string(sci.substr(epos + 1)));
  std::string out = v < 0 ? "-" : "";
  if (exp >= -4 && exp < 16) {  // Python's repr switches to exponent notation outside [1e-4, 1e16)
    if (exp < 0) {
      out += "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else {
      size_t int_len = static_cast<size_t>(exp) + 1;
      if (digits.size() <= int_len) {
        out += digits + std::string(int_len - digits.size(), '0') + ".0";
      } else {
        out += digits.substr(0, int_len) + "." + digits.substr(int_len);
      }
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    out += fmt::format("e{}{:02d}", exp < 0 ? '-' : '+', std::abs(exp));
  }
  return out;
}

std::string effort_level_text(std::string_view effort) {
  std::string_view key = effort;
  while (!key.empty() && std::isspace(static_cast<unsigned char>(key.front()))) key.remove_prefix(1);
  while (!key.empty() && std::isspace(static_cast<unsigned char>(key.back()))) key.remove_suffix(1);
  for (const auto& [name, value] : kEffortLevels) {
    if (name == key) return std::string(value);
  }
  double v = 0;
  auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), v);
  QUILL_CHECK(!key.empty() && ec == std::errc() && end == key.data() + key.size() && std::isfinite(v) && v >= 0 &&
                  v <= 0.99,
              "reasoning_effort \"{}\": expected none, minimal, low, medium, high, max or a number in [0, 0.99]",
              effort);
  return v == 0 ? "0" : python_float_repr(v);
}

std::string python_json(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::number_float: {
      double v = j.get<double>();
      if (std::isnan(v)) return "NaN";
      if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
      return python_float_repr(v);
    }
    case nlohmann::json::value_t::array: {
      std::string out = "[";
      for (size_t i = 0; i < j.size(); ++i) {
        if (i) out += ',';
        out += python_json(j[i]);
      }
      return out + "]";
    }
    case nlohmann::json::value_t::object: {  // nlohmann's std::map keeps keys in UTF-8 byte = code point order
      std::string out = "{";
      bool first = true;
      for (auto it = j.begin(); it != j.end(); ++it) {
        if (!first) out += ',';
        first = false;
        out += nlohmann::json(it.key()).dump() + ":" + python_json(it.value());
      }
      return out + "}";
    }
    default:  // null, booleans, integers and strings print as Python prints them
      return j.dump();
  }
}

std::string tool_declare_json(const nlohmann::json& tools) {
  QUILL_CHECK(tools.is_array(), "tools must be a list");
  nlohmann::json specs = nlohmann::json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const nlohmann::json& tool = tools[i];
    QUILL_CHECK(tool.is_object(), "tools[{}]: must be an object", i);
    const nlohmann::json& fn = tool.contains("function") ? tool.at("function") : tool;
    QUILL_CHECK(fn.is_object() && fn.contains("name") && fn.at("name").is_string(), "tools[{}]: missing name", i);
    // The template's `x if x is defined and x else default`: absent, null, false, 0, "" and
    // empty containers all take the default.
    auto or_default = [](const nlohmann::json& obj, const char* key, nlohmann::json fallback) {
      auto it = obj.find(key);
      if (it == obj.end()) return fallback;
      const nlohmann::json& v = *it;
      bool falsy = v.is_null() || (v.is_boolean() && !v.get<bool>()) || (v.is_number() && v.get<double>() == 0) ||
                   (v.is_string() && v.get_ref<const std::string&>().empty()) ||
                   ((v.is_array() || v.is_object()) && v.empty());
      return falsy ? fallback : v;
    };
    specs.push_back({{"description", or_default(fn, "description", "")},
                     {"name", fn.at("name")},
                     {"parameters", or_default(fn, "parameters", nlohmann::json::object())},
                     {"type", or_default(tool, "type", "function")}});
  }
  return python_json(specs);
}

std::string tool_call_json(const ToolCall& call) {
  return "{\"name\":" + nlohmann::json(call.name).dump() + ",\"args\":" + python_json(call.args) + "}";
}

ChatRenderer::ChatRenderer(const Tokenizer& tokenizer, RenderOptions options)
    : tokenizer_(tokenizer), options_(std::move(options)) {
  effort_line_ = std::string(kEffortPrefix) + effort_level_text(options_.reasoning_effort);
  for (std::string_view spelling : kTokSpelling) ids_.push_back(tokenizer_.special_id(spelling));
}

nlohmann::json ChatRenderer::template_kwargs() const {
  return {{"reasoning_effort", options_.reasoning_effort}};
}

MaskedTokens ChatRenderer::render(const Conversation& conversation) const {
  MaskedTokens out;
  render_into(conversation, out);
  return out;
}

void ChatRenderer::render_into(const Conversation& conversation, MaskedTokens& out) const {
  Emitter e(tokenizer_, ids_, out);
  if (!conversation.tools.empty()) e.block(kMsgSystem, kToolDeclareAuthor, kXml, tool_declare_json(conversation.tools));
  bool effort_done = false;
  // Tool-call id -> tool name over the whole conversation, the last call with an id winning (the
  // template searches every assistant message for a tool message without a name).
  std::map<std::string, std::string> call_names;
  for (const Message& m : conversation.messages) {
    if (m.role != Role::kModel) continue;
    for (const ToolCall& call : m.tool_calls) {
      if (!call.id.empty()) call_names[call.id] = call.name;
    }
  }
  for (const Message& m : conversation.messages) {
    if (m.role != Role::kSystem && !effort_done) {
      e.block(kMsgSystem, "", kText, effort_line_);
      effort_done = true;
    }
    switch (m.role) {
      case Role::kSystem:
      case Role::kUser:
        if (!m.content.empty()) e.block(kRoleMessage[static_cast<int>(m.role)], "", kText, m.content);
        break;
      case Role::kTool: {
        std::string name = m.name;
        if (name.empty() && !m.tool_call_id.empty()) {
          auto it = call_names.find(m.tool_call_id);
          if (it != call_names.end()) name = it->second;
        }
        e.block(kMsgTool, name, kText, m.content);  // a tool result renders even when empty
        break;
      }
      case Role::kModel: {
        size_t start = e.size();
        if (!m.reasoning_content.empty()) e.block(kMsgModel, "", kThinking, m.reasoning_content);
        if (!m.content.empty()) e.block(kMsgModel, "", kText, m.content);
        for (const ToolCall& call : m.tool_calls) e.block(kMsgModel, call.name, kToolJson, tool_call_json(call));
        if (e.size() > start) {
          e.special(kEndSampling);
          e.supervise_from(start + 1);  // the leading <|message_model|> is the generation prompt
        }
        break;
      }
    }
  }
  if (!effort_done) e.block(kMsgSystem, "", kText, effort_line_);
}

}  // namespace quill
