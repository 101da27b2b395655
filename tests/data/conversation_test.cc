// Conversations JSONL: accepted shapes, round trip, and errors naming file and line.
#include <gtest/gtest.h>

#include "base/file_util.h"
#include "data/conversation.h"
#include "data_test_util.h"

namespace quill {
namespace {

using test::expect_error;
using test::TempDir;

std::string write_jsonl(const TempDir& tmp, const std::string& text) {
  std::string path = tmp.sub("c.jsonl");
  write_file_atomic(path, text);
  return path;
}

TEST(Conversations, ReadsMessagesFormat) {
  TempDir tmp;
  std::string path = write_jsonl(tmp,
      "{\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\",\"content\":\"q\"},"
      "{\"role\":\"assistant\",\"content\":\"a\",\"reasoning_content\":\"r\"}]}\n"
      "\n"
      "{\"messages\":[{\"role\":\"developer\",\"content\":\"d\"},{\"role\":\"model\",\"content\":null,"
      "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"b\\\":1,\\\"a\\\":[2]}\"}}]},"
      "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"ok\"},"
      "{\"role\":\"assistant\",\"reasoning\":\"only thinking\"}],"
      "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}\n");
  std::vector<Conversation> cs = read_conversations_jsonl(path);
  ASSERT_EQ(cs.size(), 2u);
  ASSERT_EQ(cs[0].messages.size(), 3u);
  EXPECT_EQ(cs[0].messages[0].role, Role::kSystem);
  EXPECT_EQ(cs[0].messages[2].role, Role::kModel);
  EXPECT_EQ(cs[0].messages[2].reasoning_content, "r");
  const Conversation& c = cs[1];
  EXPECT_EQ(c.messages[0].role, Role::kSystem);
  EXPECT_EQ(c.messages[1].content, "");
  ASSERT_EQ(c.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(c.messages[1].tool_calls[0].name, "f");
  EXPECT_EQ(c.messages[1].tool_calls[0].id, "c1");
  EXPECT_EQ(c.messages[1].tool_calls[0].args, nlohmann::json::parse("{\"a\":[2],\"b\":1}"));
  EXPECT_EQ(c.messages[2].tool_call_id, "c1");
  EXPECT_EQ(c.messages[3].reasoning_content, "only thinking");
  EXPECT_EQ(c.tools.size(), 1u);
}

TEST(Conversations, JsonlRoundTrip) {
  Conversation c;
  c.messages.push_back({Role::kUser, "reverse: abc", {}, {}, {}, {}});
  c.messages.push_back({Role::kModel, "cba", "backwards", {}, {}, {}});
  c.messages.push_back({Role::kModel, "", {}, {ToolCall{"f", {{"x", 1}}, "id9"}}, {}, {}});
  c.messages.push_back({Role::kTool, "done", {}, {}, "f", "id9"});
  std::string text = conversations_to_jsonl({c, c});
  EXPECT_EQ(text.substr(0, text.find('\n')),
            "{\"messages\":[{\"content\":\"reverse: abc\",\"role\":\"user\"},"
            "{\"content\":\"cba\",\"reasoning_content\":\"backwards\",\"role\":\"assistant\"},"
            "{\"content\":\"\",\"role\":\"assistant\",\"tool_calls\":[{\"args\":{\"x\":1},\"id\":\"id9\",\"name\":\"f\"}]},"
            "{\"content\":\"done\",\"name\":\"f\",\"role\":\"tool\",\"tool_call_id\":\"id9\"}]}");
  TempDir tmp;
  std::vector<Conversation> back = read_conversations_jsonl(write_jsonl(tmp, text));
  EXPECT_EQ(conversations_to_jsonl(back), text);
}

TEST(Conversations, ErrorsNameFileAndLine) {
  TempDir tmp;
  std::string good = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}\n";
  std::string path = write_jsonl(tmp, good + "{\"messages\": [\n");
  expect_error([&] { read_conversations_jsonl(path); }, {path + ":2", "malformed JSON"});
  path = write_jsonl(tmp, good + good + "{\"messages\":[{\"role\":\"bot\",\"content\":\"x\"}]}\n");
  expect_error([&] { read_conversations_jsonl(path); }, {path + ":3", "messages[0]", "unknown role \"bot\""});
  path = write_jsonl(tmp, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\"}]}\n");
  expect_error([&] { read_conversations_jsonl(path); }, {path + ":1", "messages[1]", "missing content"});
  path = write_jsonl(tmp, "{\"messages\":[{\"content\":\"x\"}]}\n");
  expect_error([&] { read_conversations_jsonl(path); }, {path + ":1", "missing role"});
  path = write_jsonl(tmp, "{\"conversation\":[]}\n");
  expect_error([&] { read_conversations_jsonl(path); }, {path + ":1", "missing messages"});
  path = write_jsonl(tmp, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\"}]}]}\n");
  expect_error([&] { read_conversations_jsonl(path); }, {path + ":1", "content must be a string"});
  path = write_jsonl(tmp,
      "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"{bad\"}}]}]}\n");
  expect_error([&] { read_conversations_jsonl(path); }, {path + ":1", "tool_calls[0]", "not valid JSON"});
  expect_error([&] { read_conversations_jsonl(tmp.sub("absent.jsonl")); }, {"absent.jsonl", "cannot open"});
}

}  // namespace
}  // namespace quill
