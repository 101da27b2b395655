// A tiny tokenizer for the demo and the tests: ids 0..255 are the bytes of the UTF-8 text, and
// ids 256..273 are the Inkling special tokens in the order of kInklingSpecialTokens
// (special_tokens.h): 256 <|endoftext|>, 257 <|message_user|>, ..., 272 <|content_invoke_tool|>,
// 273 <|model_trigger_generation|>. vocab_size() is 274, which fits the tiny model's unpadded
// vocabulary of 300.
#pragma once

#include "data/tokenizer.h"

namespace quill {

class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr uint32_t kFirstSpecial = 256;

  std::string name() const override { return "quill-byte-v1"; }
  std::vector<uint32_t> encode(std::string_view text) const override;
  void encode_append(std::string_view text, std::vector<uint32_t>& out) const override;
  std::string decode(std::span<const uint32_t> ids) const override;
  std::optional<uint32_t> find_special(std::string_view spelling) const override;
  int64_t vocab_size() const override;
  // SHA-256 of definition_json().
  std::string definition_sha256() const override;
  // The canonical definition: {"name":"quill-byte-v1","byte_ids":256,"special":[[spelling,id],...]}
  // as compact JSON with sorted keys.
  std::string definition_json() const;
};

}  // namespace quill
