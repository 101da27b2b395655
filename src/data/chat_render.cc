#include "data/chat_render.h"

#include <array>
#include <charconv>
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
  Emitter(const Tokenizer& tok, const std::vector<uint32_t>& ids) : tok_(tok), ids_(ids) {}

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
  MaskedTokens take() { return std::move(out_); }

 private:
  const Tokenizer& tok_;
  const std::vector<uint32_t>& ids_;
  MaskedTokens out_;
};

}  // namespace

std::string effort_level_text(std::string_view effort) {
  for (const auto& [name, value] : kEffortLevels) {
    if (name == effort) return std::string(value);
  }
  double v = 0;
  auto [end, ec] = std::from_chars(effort.data(), effort.data() + effort.size(), v);
  QUILL_CHECK(ec == std::errc() && end == effort.data() + effort.size() && std::isfinite(v) && v >= 0 && v <= 0.99,
              "reasoning_effort \"{}\": expected none, minimal, low, medium, high, max or a number in [0, 0.99]",
              effort);
  std::string s = fmt::format("{:.2f}", v);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

std::string tool_declare_json(const nlohmann::json& tools) {
  QUILL_CHECK(tools.is_array(), "tools must be a list");
  nlohmann::json specs = nlohmann::json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const nlohmann::json& tool = tools[i];
    QUILL_CHECK(tool.is_object(), "tools[{}]: must be an object", i);
    const nlohmann::json& fn = tool.contains("function") ? tool.at("function") : tool;
    QUILL_CHECK(fn.is_object() && fn.contains("name") && fn.at("name").is_string(), "tools[{}]: missing name", i);
    auto or_default = [](const nlohmann::json& obj, const char* key, nlohmann::json fallback) {
      auto it = obj.find(key);
      return (it == obj.end() || it->is_null()) ? fallback : *it;
    };
    specs.push_back({{"description", or_default(fn, "description", "")},
                     {"name", fn.at("name")},
                     {"parameters", or_default(fn, "parameters", nlohmann::json::object())},
                     {"type", or_default(tool, "type", "function")}});
  }
  return specs.dump();
}

std::string tool_call_json(const ToolCall& call) {
  return "{\"name\":" + nlohmann::json(call.name).dump() + ",\"args\":" + call.args.dump() + "}";
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
  Emitter e(tokenizer_, ids_);
  if (!conversation.tools.empty()) e.block(kMsgSystem, kToolDeclareAuthor, kXml, tool_declare_json(conversation.tools));
  bool effort_done = false;
  std::map<std::string, std::string> call_names;  // tool-call id -> tool name
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
        if (name.empty()) {
          auto it = call_names.find(m.tool_call_id);
          if (it != call_names.end()) name = it->second;
        }
        if (!m.content.empty()) e.block(kMsgTool, name, kText, m.content);
        break;
      }
      case Role::kModel: {
        size_t start = e.size();
        if (!m.reasoning_content.empty()) e.block(kMsgModel, "", kThinking, m.reasoning_content);
        if (!m.content.empty()) e.block(kMsgModel, "", kText, m.content);
        for (const ToolCall& call : m.tool_calls) {
          if (!call.id.empty()) call_names[call.id] = call.name;
          e.block(kMsgModel, call.name, kToolJson, tool_call_json(call));
        }
        if (e.size() > start) {
          e.special(kEndSampling);
          e.supervise_from(start + 1);  // the leading <|message_model|> is the generation prompt
        }
        break;
      }
    }
  }
  if (!effort_done) e.block(kMsgSystem, "", kText, effort_line_);
  return e.take();
}

}  // namespace quill
