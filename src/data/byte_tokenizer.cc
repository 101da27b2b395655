#include "data/byte_tokenizer.h"

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/file_util.h"
#include "data/special_tokens.h"

namespace quill {

std::vector<uint32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<uint32_t> out;
  encode_append(text, out);
  return out;
}

void ByteTokenizer::encode_append(std::string_view text, std::vector<uint32_t>& out) const {
  out.reserve(out.size() + text.size());
  for (char c : text) out.push_back(static_cast<unsigned char>(c));
}

std::string ByteTokenizer::decode(std::span<const uint32_t> ids) const {
  std::string out;
  for (uint32_t id : ids) {
    if (id < kFirstSpecial) {
      out.push_back(static_cast<char>(id));
    } else {
      QUILL_CHECK(id < vocab_size(), "tokenizer {}: id {} is outside the vocabulary of {}", name(), id,
                  vocab_size());
      out += kInklingSpecialTokens[id - kFirstSpecial].spelling;
    }
  }
  return out;
}

std::optional<uint32_t> ByteTokenizer::find_special(std::string_view spelling) const {
  for (size_t i = 0; i < kInklingSpecialTokens.size(); ++i) {
    if (kInklingSpecialTokens[i].spelling == spelling) return kFirstSpecial + static_cast<uint32_t>(i);
  }
  return std::nullopt;
}

int64_t ByteTokenizer::vocab_size() const { return kFirstSpecial + kInklingSpecialTokens.size(); }

std::string ByteTokenizer::definition_json() const {
  nlohmann::json special = nlohmann::json::array();
  for (size_t i = 0; i < kInklingSpecialTokens.size(); ++i) {
    special.push_back({std::string(kInklingSpecialTokens[i].spelling), kFirstSpecial + i});
  }
  nlohmann::json def = {{"name", name()}, {"byte_ids", kFirstSpecial}, {"special", special}};
  return def.dump();
}

std::string ByteTokenizer::definition_sha256() const { return sha256_hex(definition_json()); }

}  // namespace quill
