#include "data/conversation.h"

#include <fstream>
#include <optional>

#include "base/error.h"

namespace quill {

using nlohmann::json;

std::optional<Role> parse_role(std::string_view role) {
  static constexpr std::pair<std::string_view, Role> kRoles[] = {
      {"system", Role::kSystem}, {"developer", Role::kSystem}, {"user", Role::kUser},
      {"assistant", Role::kModel}, {"model", Role::kModel},     {"tool", Role::kTool},
  };
  for (const auto& [spelling, r] : kRoles) {
    if (spelling == role) return r;
  }
  return std::nullopt;
}

std::string_view role_name(Role role) {
  switch (role) {
    case Role::kSystem: return "system";
    case Role::kUser: return "user";
    case Role::kModel: return "assistant";
    case Role::kTool: return "tool";
  }
  return "?";
}

namespace {

// A string field that may be absent or null (-> empty); anything else must be a string.
std::string optional_string(const json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return {};
  QUILL_CHECK(it->is_string(), "{}: {} must be a string, got {}", where, key, it->type_name());
  return it->get<std::string>();
}

}  // namespace

ToolCall tool_call_from_json(const json& j, const std::string& where) {
  QUILL_CHECK(j.is_object(), "{}: must be an object", where);
  ToolCall call;
  call.id = optional_string(j, "id", where);
  const json& fn = j.contains("function") ? j.at("function") : j;
  QUILL_CHECK(fn.is_object(), "{}.function: must be an object", where);
  call.name = optional_string(fn, "name", where);
  QUILL_CHECK(!call.name.empty(), "{}: missing tool name", where);
  const json* args = nullptr;
  if (fn.contains("args")) args = &fn.at("args");
  else if (fn.contains("arguments")) args = &fn.at("arguments");
  if (args == nullptr || args->is_null()) return call;
  if (args->is_string()) {
    const std::string& text = args->get_ref<const std::string&>();
    if (text.find_first_not_of(" \t\r\n") == std::string::npos) return call;
    try {
      call.args = json::parse(text);
    } catch (const json::parse_error& e) {
      QUILL_FAIL("{}: arguments are not valid JSON ({})", where, e.what());
    }
  } else {
    call.args = *args;
  }
  QUILL_CHECK(call.args.is_object(), "{}: arguments must be a JSON object, got {}", where,
              call.args.type_name());
  return call;
}

namespace {

Message message_from_json(const json& j, const std::string& where) {
  QUILL_CHECK(j.is_object(), "{}: must be an object", where);
  auto role_it = j.find("role");
  QUILL_CHECK(role_it != j.end(), "{}: missing role", where);
  QUILL_CHECK(role_it->is_string(), "{}: role must be a string", where);
  std::optional<Role> role = parse_role(role_it->get<std::string>());
  QUILL_CHECK(role.has_value(), "{}: unknown role \"{}\" (expected system, developer, user, assistant, model or tool)",
              where, role_it->get<std::string>());
  Message m;
  m.role = *role;
  m.reasoning_content = optional_string(j, "reasoning_content", where);
  if (m.reasoning_content.empty()) m.reasoning_content = optional_string(j, "reasoning", where);
  QUILL_CHECK(m.reasoning_content.empty() || m.role == Role::kModel, "{}: reasoning_content on a {} message", where,
              role_name(m.role));
  if (auto calls = j.find("tool_calls"); calls != j.end() && !calls->is_null()) {
    QUILL_CHECK(calls->is_array(), "{}: tool_calls must be a list", where);
    QUILL_CHECK(m.role == Role::kModel || calls->empty(), "{}: tool_calls on a {} message", where, role_name(m.role));
    for (size_t i = 0; i < calls->size(); ++i) {
      m.tool_calls.push_back(tool_call_from_json((*calls)[i], fmt::format("{}.tool_calls[{}]", where, i)));
    }
  }
  bool content_optional = m.role == Role::kModel && (!m.tool_calls.empty() || !m.reasoning_content.empty());
  auto content = j.find("content");
  QUILL_CHECK(content != j.end() || content_optional, "{}: missing content", where);
  if (content != j.end() && !content->is_null()) {
    QUILL_CHECK(content->is_string(), "{}: content must be a string or null, got {}", where, content->type_name());
    m.content = content->get<std::string>();
  }
  m.name = optional_string(j, "name", where);
  m.tool_call_id = optional_string(j, "tool_call_id", where);
  return m;
}

}  // namespace

Conversation conversation_from_json(const json& j, const std::string& where) {
  QUILL_CHECK(j.is_object(), "{}: a conversation must be a JSON object", where);
  auto messages = j.find("messages");
  QUILL_CHECK(messages != j.end(), "{}: missing messages", where);
  QUILL_CHECK(messages->is_array(), "{}: messages must be a list", where);
  Conversation c;
  for (size_t i = 0; i < messages->size(); ++i) {
    c.messages.push_back(message_from_json((*messages)[i], fmt::format("{}: messages[{}]", where, i)));
  }
  if (auto tools = j.find("tools"); tools != j.end() && !tools->is_null()) {
    QUILL_CHECK(tools->is_array(), "{}: tools must be a list", where);
    c.tools = *tools;
  }
  return c;
}

json conversation_to_json(const Conversation& c) {
  json messages = json::array();
  for (const Message& m : c.messages) {
    json jm = {{"role", role_name(m.role)}, {"content", m.content}};
    if (!m.reasoning_content.empty()) jm["reasoning_content"] = m.reasoning_content;
    if (!m.tool_calls.empty()) {
      json calls = json::array();
      for (const ToolCall& call : m.tool_calls) {
        json jc = {{"name", call.name}, {"args", call.args}};
        if (!call.id.empty()) jc["id"] = call.id;
        calls.push_back(std::move(jc));
      }
      jm["tool_calls"] = std::move(calls);
    }
    if (!m.name.empty()) jm["name"] = m.name;
    if (!m.tool_call_id.empty()) jm["tool_call_id"] = m.tool_call_id;
    messages.push_back(std::move(jm));
  }
  json out = {{"messages", std::move(messages)}};
  if (!c.tools.empty()) out["tools"] = c.tools;
  return out;
}

std::vector<Conversation> read_conversations_jsonl(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  QUILL_CHECK(in.good(), "{}: cannot open for reading", path);
  std::vector<Conversation> out;
  std::string line;
  for (int64_t line_no = 1; std::getline(in, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::string where = fmt::format("{}:{}", path, line_no);
    json j;
    try {
      j = json::parse(line);
    } catch (const json::parse_error& e) {
      QUILL_FAIL("{}: malformed JSON ({})", where, e.what());
    }
    out.push_back(conversation_from_json(j, where));
  }
  QUILL_CHECK(!in.bad(), "{}: read error", path);
  return out;
}

std::string conversations_to_jsonl(const std::vector<Conversation>& conversations) {
  std::string out;
  for (const Conversation& c : conversations) {
    out += conversation_to_json(c).dump();
    out += '\n';
  }
  return out;
}

}  // namespace quill
