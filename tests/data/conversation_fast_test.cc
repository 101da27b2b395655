// parse_conversation_fast against the general path (nlohmann + conversation_from_json): where the
// fast parser gives a conversation it must be the general path's, on hand-written lines, the
// bundled and generated conversations, and many random mutations of them; and it must take the
// ordinary lines (otherwise it would be a slower no-op).
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "base/file_util.h"
#include "base/rng.h"
#include "data/conversation.h"
#include "data/conversation_fast.h"
#include "data/synthetic.h"
#include "data/utf8.h"

namespace quill {
namespace {

// The general path's conversation as JSON text (tools included), or nullopt when it refuses.
std::optional<std::string> general(const std::string& line) {
  try {
    return conversation_to_json(conversation_from_json(nlohmann::json::parse(line), "line")).dump();
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// Checks the property on one line; true when the fast parser took it.
bool agrees(const std::string& line) {
  std::optional<Conversation> fast = parse_conversation_fast(line);
  if (!fast) return false;
  std::optional<std::string> want = general(line);
  EXPECT_TRUE(want.has_value()) << "the fast parser took a line the general path refuses: " << line;
  if (want) EXPECT_EQ(conversation_to_json(*fast).dump(), *want) << line;
  return true;
}

const std::vector<std::string>& ordinary_lines() {
  static const std::vector<std::string> lines = {
      R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]})",
      R"({"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"a\"b\\c\/d\b\f\n\r\t"}]})",
      R"(  {"messages": [{"role": "developer", "content": "x", "extra": {"a": [1, -2, true, false, null, "s"]}}]} )",
      R"({"id": 17, "messages": [{"role": "user", "content": "caf\u00e9 \u4e2d\u6587 \ud83d\ude00 \u0000 end"}]})",
      R"({"messages": [{"role": "assistant", "content": null, "reasoning_content": "think"}]})",
      R"({"messages": [{"role": "model", "reasoning": "r", "content": "c"}], "tools": null})",
      R"({"messages": [{"role": "tool", "content": "42", "name": "calc", "tool_call_id": "call_1"}]})",
      R"({"messages": [{"role": "user", "content": "first"}, {"role": "user", "content": "dup", "content": "last"}]})",
      R"({"messages": [{"role": "assistant", "content": "", "tool_calls": [{"name": "f", "args": {"x": 1}}]}]})",
      R"({"messages": [{"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "g", "arguments": "{\"q\": \"z\"}"}}]}]})",
      R"({"messages": [{"role": "user", "content": "use a tool"}], "tools": [{"name": "f", "description": "d", "parameters": {"type": "object"}}]})",
      R"({"messages": []})",
      "{\"messages\": [{\"role\": \"user\", \"content\": \"\xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80\"}]}\r",
  };
  return lines;
}

TEST(ConversationFast, TakesOrdinaryLinesAndAgrees) {
  for (const std::string& line : ordinary_lines()) EXPECT_TRUE(agrees(line)) << "not taken: " << line;
}

// Lines the general path refuses, or reads in ways this parser leaves to it: never taken.
TEST(ConversationFast, LeavesTheRestToTheGeneralPath) {
  const std::vector<std::string> lines = {
      R"({"messages": [{"role": "user", "content": "x"}]} trailing)",
      R"({"messages": [{"role": "user", "content": "x"}],})",
      R"({"messages": [{"role": "user", "content": "x",}]})",
      R"({"messages": [{"role": "usr", "content": "x"}]})",
      R"({"messages": [{"role": "user"}]})",
      R"({"messages": [{"role": "user", "content": 5}]})",
      R"({"messages": [{"role": null, "content": "x"}]})",
      R"({"messages": [{"role": "user", "content": "x", "reasoning_content": "r"}]})",
      R"({"messages": [{"role": "user", "content": "bad \x escape"}]})",
      R"({"messages": [{"role": "user", "content": "lone \ud800 surrogate"}]})",
      R"({"messages": [{"role": "user", "content": "lone \udc00 low"}]})",
      "{\"messages\": [{\"role\": \"user\", \"content\": \"raw \t tab\"}]}",
      R"({"messages": [{"role": "user", "content": "x", "n": 1.5}]})",
      R"({"messages": [{"role": "user", "content": "x", "n": 1e5}]})",
      R"({"messages": [{"role": "user", "content": "x", "n": 012}]})",
      R"({"messages": [{"role": "user", "content": "x", "n": 1234567890123456789012345}]})",
      R"({"messages": [{"role": "user", "content": "x", "n": nul}]})",
      R"({"messages": [{"role": "user", "content": "x"}], "tools": {"not": "a list"}})",
      R"({"messages": [{"role": "user", "content": "x", "tool_calls": [{"name": "f"}]}]})",
      R"({"messages": [{"role": "assistant", "tool_calls": []}]})",
      R"({"messages": {"role": "user"}})",
      R"({"msgs": []})",
      R"([{"role": "user", "content": "x"}])",
      "\xef\xbb\xbf{\"messages\": []}",
      "",
  };
  for (const std::string& line : lines) {
    EXPECT_FALSE(parse_conversation_fast(line).has_value()) << line;
  }
}

// The bundled conversations, generated ones (tool calls, reasoning, tools), and random
// mutations of all of them (a byte deleted, replaced or inserted, JSON punctuation mostly):
// whatever the fast parser takes, the general path gives the same.
TEST(ConversationFast, AgreesOnMutatedConversations) {
  std::vector<std::string> lines = ordinary_lines();
  std::string bundled = read_file(std::string(QUILL_SOURCE_DIR) + "/data/synthetic/conversations.jsonl");
  for (size_t i = 0, j; i < bundled.size(); i = j + 1) {
    j = bundled.find('\n', i);
    if (j == std::string::npos) j = bundled.size();
    if (j > i) lines.push_back(bundled.substr(i, j - i));
  }
  for (const Conversation& c : generate_synthetic_conversations(200, 5)) lines.push_back(conversation_to_json(c).dump());
  size_t taken = 0;
  for (const std::string& line : lines) taken += agrees(line);
  EXPECT_EQ(taken, lines.size()) << "every well-formed line should be taken";
  const std::string alphabet = "{}[]\":,\\ unlrtfe0123456789.-+aE\n\t";
  SplitMix64 rng(99);
  size_t mutated_taken = 0;
  for (int k = 0; k < 20000; ++k) {
    std::string line = lines[rng.below(lines.size())];
    for (int edits = 1 + static_cast<int>(rng.below(3)); edits > 0 && !line.empty(); --edits) {
      size_t at = rng.below(line.size());
      char c = alphabet[rng.below(alphabet.size())];
      switch (rng.below(3)) {
        case 0: line.erase(at, 1); break;
        case 1: line[at] = c; break;
        default: line.insert(line.begin() + static_cast<long>(at), c); break;
      }
    }
    if (!is_valid_utf8(line)) continue;  // the caller checks UTF-8 first
    mutated_taken += agrees(line);
  }
  EXPECT_GT(mutated_taken, 1000u);  // many mutations (inside strings) stay well-formed
}

}  // namespace
}  // namespace quill
