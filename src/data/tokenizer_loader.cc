#include "data/tokenizer_loader.h"

#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "base/file_util.h"
#include "data/byte_tokenizer.h"
#include "data/special_tokens.h"

namespace quill {

std::vector<SpecialToken> special_token_set(const std::string& spec) {
  std::string s = spec.empty() ? kDefaultSpecialTokens : spec;
  std::vector<SpecialToken> out;
  if (s == "inkling") {
    for (const SpecialTokenInfo& t : kInklingSpecialTokens) {
      if (t.inkling_id >= 0) out.push_back({std::string(t.spelling), static_cast<uint32_t>(t.inkling_id)});
    }
    return out;
  }
  if (s == "o200k") return {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}};
  if (s == "none") return out;
  QUILL_CHECK(path_exists(s), "special tokens \"{}\": expected inkling, o200k, none or a JSON file", s);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(s));
  } catch (const nlohmann::json::parse_error& e) {
    QUILL_FAIL("{}: malformed JSON ({})", s, e.what());
  }
  QUILL_CHECK(j.is_object(), "{}: expected an object {{\"<|spelling|>\": id, ...}}", s);
  for (auto it = j.begin(); it != j.end(); ++it) {
    QUILL_CHECK(it->is_number_unsigned() && it->get<uint64_t>() < (1ull << 31), "{}: {} must have a non-negative id", s,
                it.key());
    out.push_back({it.key(), it->get<uint32_t>()});
  }
  return out;
}

namespace {

// A tokenizer.json starts with '{'; a rank file with base64.
bool is_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  QUILL_CHECK(in.good(), "{}: cannot open the tokenizer", path);
  char first = 0;
  while (in.get(first) && std::isspace(static_cast<unsigned char>(first))) {
  }
  return first == '{';
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path, const std::string& special_tokens, int threads) {
  if (path == "byte") {
    QUILL_CHECK(special_tokens.empty(), "--special-tokens does not apply to the byte tokenizer");
    return std::make_unique<ByteTokenizer>();
  }
  if (is_json_file(path)) {
    QUILL_CHECK(special_tokens.empty() || special_tokens == "none",
                "{}: a tokenizer.json brings its own special tokens (added_tokens); drop --special-tokens", path);
    return BpeTokenizer::from_hf_json(path, threads);
  }
  return BpeTokenizer::from_tiktoken(path, special_token_set(special_tokens), kO200kPattern, threads);
}

nlohmann::json tokenizer_source_json(const std::string& path, const std::string& special_tokens) {
  if (path == "byte") return {{"path", "byte"}};
  std::string abs = std::filesystem::absolute(path).lexically_normal().string();
  if (is_json_file(path)) return {{"path", abs}};
  std::string spec = special_tokens.empty() ? kDefaultSpecialTokens : special_tokens;
  if (spec != "inkling" && spec != "o200k" && spec != "none") spec = std::filesystem::absolute(spec).string();
  return {{"path", abs}, {"special_tokens", spec}};
}

}  // namespace quill
