// The tokenizer interface the data build uses. encode() treats every byte of its input as plain
// text: a special token's spelling inside content becomes ordinary text tokens, never the special
// token (recipes-and-measurement.md section 6). Special tokens are only reachable by spelling
// through special_id(). The byte tokenizer implements it now; the Hugging Face BPE tokenizer
// plugs in later.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace quill {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // A short stable name recorded in the rows manifest ("quill-byte-v1", ...).
  virtual std::string name() const = 0;
  // Plain-text encoding (no special-token parsing).
  virtual std::vector<uint32_t> encode(std::string_view text) const = 0;
  // Ids back to text; special tokens come back as their spelling. Unknown ids are an error.
  virtual std::string decode(std::span<const uint32_t> ids) const = 0;
  // Id of a special token by its spelling ("<|message_user|>"), or nullopt if it has none.
  virtual std::optional<uint32_t> find_special(std::string_view spelling) const = 0;
  // Number of ids (every id is < vocab_size()).
  virtual int64_t vocab_size() const = 0;
  // Lowercase hex SHA-256 of the tokenizer's definition (what fixes every id), for the manifest.
  virtual std::string definition_sha256() const = 0;

  // Like find_special, but an unknown spelling is an error naming the token and the tokenizer.
  uint32_t special_id(std::string_view spelling) const;
  // Appends encode(text) to `out` (the renderer's hot path; the default calls encode()).
  virtual void encode_append(std::string_view text, std::vector<uint32_t>& out) const;
};

}  // namespace quill
