// Conversations as the data build reads them: one JSON object per line with "messages" (and
// optionally "tools"), in the OpenAI-style messages format that SFT sets such as Tulu 3 use.
//
// Accepted per message:
//   role               "system" | "developer" (= system) | "user" | "assistant" | "model" | "tool"
//   content            string or null (null = empty). Required, except on an assistant message
//                      that carries tool_calls or reasoning.
//   reasoning_content  string (alias "reasoning"), assistant only
//   tool_calls         [{"name": ..., "args": {...}}] or OpenAI [{"id": ..., "type": "function",
//                      "function": {"name": ..., "arguments": "<JSON text>" or {...}}}]
//   name, tool_call_id tool messages: the tool's name, or the id of the call it answers
// Top level "tools": a list of tool specs, flat {name, description, parameters, type} or OpenAI
// {"type": "function", "function": {...}}.
#pragma once

#include <cstdint>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace quill {

enum class Role { kSystem, kUser, kModel, kTool };

struct ToolCall {
  std::string name;
  nlohmann::json args = nlohmann::json::object();  // always a JSON object
  std::string id;                                   // optional; tool messages may refer to it
};

struct Message {
  Role role = Role::kUser;
  std::string content;
  std::string reasoning_content;  // empty: none
  std::vector<ToolCall> tool_calls;
  std::string name;          // tool messages: the tool's name (may be empty)
  std::string tool_call_id;  // tool messages: the call answered (may be empty)
};

struct Conversation {
  std::vector<Message> messages;
  nlohmann::json tools = nlohmann::json::array();  // tool specs as given
};

// "user" -> kUser, "assistant"/"model" -> kModel, "system"/"developer" -> kSystem, "tool" -> kTool;
// nullopt for anything else.
std::optional<Role> parse_role(std::string_view role);
// The canonical spelling written back to JSON: "system", "user", "assistant", "tool".
std::string_view role_name(Role role);

// One tool call of a message's tool_calls list (either spelling above).
ToolCall tool_call_from_json(const nlohmann::json& j, const std::string& where);
// One conversation from its JSON object. Errors are prefixed with `where` ("file:line 3").
Conversation conversation_from_json(const nlohmann::json& j, const std::string& where);
// The JSON object of a conversation: messages with "role", "content" and, when present,
// "reasoning_content", "tool_calls" [{"name","args"[,"id"]}], "name", "tool_call_id"; "tools"
// only when non-empty.
nlohmann::json conversation_to_json(const Conversation& c);

// Reads a JSONL file; blank lines are skipped. Errors name the file and the 1-based line
// (malformed JSON, missing or unknown role, missing content, ...).
std::vector<Conversation> read_conversations_jsonl(const std::string& path);
// One compact JSON object per line (keys sorted), each line ending in '\n'.
std::string conversations_to_jsonl(const std::vector<Conversation>& conversations);

}  // namespace quill
