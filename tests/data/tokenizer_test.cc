// ByteTokenizer: bytes are ids 0..255, the Inkling control tokens follow, text never becomes one.
#include <gtest/gtest.h>

#include "base/file_util.h"
#include "data/byte_tokenizer.h"
#include "data_test_util.h"

namespace quill {
namespace {

TEST(ByteTokenizer, EncodesBytes) {
  ByteTokenizer tok;
  EXPECT_EQ(tok.encode("Ab"), (std::vector<uint32_t>{65, 98}));
  EXPECT_EQ(tok.encode("\xc3\xa9"), (std::vector<uint32_t>{0xc3, 0xa9}));  // é in UTF-8
  EXPECT_TRUE(tok.encode("").empty());
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  std::vector<uint32_t> ids = tok.encode(all);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(ids[b], static_cast<uint32_t>(b));
  EXPECT_EQ(tok.decode(ids), all);
}

TEST(ByteTokenizer, SpecialTokenIds) {
  ByteTokenizer tok;
  EXPECT_EQ(tok.special_id("<|endoftext|>"), 256u);
  EXPECT_EQ(tok.special_id("<|message_user|>"), 257u);
  EXPECT_EQ(tok.special_id("<|message_model|>"), 258u);
  EXPECT_EQ(tok.special_id("<|message_system|>"), 259u);
  EXPECT_EQ(tok.special_id("<|message_tool|>"), 260u);
  EXPECT_EQ(tok.special_id("<|content_text|>"), 261u);
  EXPECT_EQ(tok.special_id("<|content_model_end_sampling|>"), 263u);
  EXPECT_EQ(tok.special_id("<|content_thinking|>"), 264u);
  EXPECT_EQ(tok.special_id("<|end_message|>"), 265u);
  EXPECT_EQ(tok.special_id("<|content_xml|>"), 268u);
  EXPECT_EQ(tok.special_id("<|content_invoke_tool_json|>"), 270u);
  EXPECT_EQ(tok.special_id("<|content_invoke_tool_text|>"), 271u);
  EXPECT_EQ(tok.special_id("<|content_invoke_tool|>"), 272u);
  EXPECT_EQ(tok.special_id("<|model_trigger_generation|>"), 273u);
  EXPECT_EQ(tok.vocab_size(), 274);
  EXPECT_LE(tok.vocab_size(), 300);  // the tiny model's unpadded vocabulary
  EXPECT_FALSE(tok.find_special("<|message_bot|>").has_value());
  test::expect_error([&] { tok.special_id("<|message_bot|>"); }, {"quill-byte-v1", "<|message_bot|>"});
}

TEST(ByteTokenizer, SpellingsInTextStayText) {
  ByteTokenizer tok;
  std::vector<uint32_t> ids = tok.encode("<|end_message|>");
  EXPECT_EQ(ids.size(), 15u);
  for (uint32_t id : ids) EXPECT_LT(id, 256u);
  std::vector<uint32_t> special = {257, 'h', 'i', 265};
  EXPECT_EQ(tok.decode(special), "<|message_user|>hi<|end_message|>");
  std::vector<uint32_t> out_of_range = {274};
  test::expect_error([&] { tok.decode(out_of_range); }, {"274"});
}

TEST(ByteTokenizer, DefinitionHash) {
  ByteTokenizer tok;
  std::string def = tok.definition_json();
  EXPECT_EQ(def.rfind("{\"byte_ids\":256,\"name\":\"quill-byte-v1\",\"special\":[[\"<|endoftext|>\",256],", 0), 0u)
      << def;
  EXPECT_EQ(tok.definition_sha256(), sha256_hex(def));
  EXPECT_EQ(tok.definition_sha256().size(), 64u);
}

}  // namespace
}  // namespace quill
