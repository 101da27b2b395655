// Differential test of the renderer: quill's rendered text against miles' inkling_fixed.jinja.
// fixtures/render/conversations.jsonl holds the conversations (and template kwargs);
// fixtures/render/miles_rendered.jsonl holds what the template rendered for each, made by
// tools/tokenizer/render_miles_template.py (transformers' render_jinja_template, as miles calls
// it). Only the rendered outputs are kept, not the template.
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "data/byte_tokenizer.h"
#include "data/chat_render.h"
#include "data/conversation.h"
#include "data_test_util.h"

namespace quill {
namespace {

std::string fixture(const std::string& name) { return std::string(QUILL_SOURCE_DIR) + "/tests/data/fixtures/render/" + name; }

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

// The template's reasoning_effort kwarg as quill's option: a name as is, a number as its JSON text.
std::string effort_option(const nlohmann::json& conv) {
  if (!conv.contains("kwargs") || !conv["kwargs"].contains("reasoning_effort")) return "high";
  const nlohmann::json& e = conv["kwargs"]["reasoning_effort"];
  return e.is_string() ? e.get<std::string>() : e.dump();
}

TEST(ChatRenderMiles, SameTextAsTheTemplate) {
  std::vector<nlohmann::json> convs = read_jsonl(fixture("conversations.jsonl"));
  std::vector<nlohmann::json> rendered = read_jsonl(fixture("miles_rendered.jsonl"));
  ASSERT_GE(convs.size(), 30u);
  ASSERT_EQ(rendered.size(), convs.size() + 1) << "a header line, then one line per conversation";
  EXPECT_TRUE(rendered[0].contains("renderer")) << rendered[0];
  std::map<std::string, nlohmann::json> by_id;
  for (size_t i = 1; i < rendered.size(); ++i) by_id[rendered[i]["id"].get<std::string>()] = rendered[i];
  ByteTokenizer tok;
  for (const nlohmann::json& conv : convs) {
    std::string id = conv["id"];
    SCOPED_TRACE(id);
    ASSERT_TRUE(by_id.count(id)) << "no rendering for " << id;
    const nlohmann::json& want = by_id[id];
    ASSERT_FALSE(want.contains("error")) << "the template refused " << id << ": " << want["error"];
    Conversation c = conversation_from_json(conv, "conversations.jsonl " + id);
    MaskedTokens r = ChatRenderer(tok, RenderOptions{effort_option(conv)}).render(c);
    EXPECT_EQ(tok.decode(r.tokens), want["text"].get<std::string>());
  }
}

}  // namespace
}  // namespace quill
