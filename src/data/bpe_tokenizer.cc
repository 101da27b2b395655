#include "data/bpe_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <future>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "base/error.h"
#include "base/file_util.h"
#include "data/mapped_file.h"
#include "base/thread_pool.h"
#include "data/bpe_table_file.h"
#include "data/rank_file.h"
#include "data/utf8.h"

namespace quill {

using nlohmann::json;

namespace {

// GPT-2's bytes_to_unicode: the printable bytes map to themselves, the other 68 to U+0100.. in
// byte order. Returns the byte of a code point, or -1.
int byte_of_code_point(uint32_t cp) {
  static const std::vector<int> table = [] {
    std::vector<int> t(512, -1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      t[printable ? b : next++] = b;
    }
    return t;
  }();
  return cp < table.size() ? table[cp] : -1;
}

// Decodes one code point of valid UTF-8 at s[i], advancing i.
uint32_t next_code_point(std::string_view s, size_t& i) {
  auto b = static_cast<unsigned char>(s[i]);
  int len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  uint32_t cp = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
  for (int k = 1; k < len && i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += len;
  return cp;
}

// A byte-level vocabulary string back to bytes; false when a character is outside the alphabet.
bool byte_level_to_bytes(std::string_view s, std::string& out) {
  out.clear();
  if (!is_valid_utf8(s)) return false;
  for (size_t i = 0; i < s.size();) {
    int b = byte_of_code_point(next_code_point(s, i));
    if (b < 0) return false;
    out.push_back(static_cast<char>(b));
  }
  return true;
}

size_t utf8_char_length(std::string_view text, size_t i) {
  auto b = static_cast<unsigned char>(text[i]);
  size_t len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  return std::min(len, text.size() - i);
}

std::string string_field(const json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  QUILL_CHECK(it != obj.end() && it->is_string(), "{}: missing string field {}", where, key);
  return it->get<std::string>();
}

bool null_or_empty(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() || (it->is_string() && it->get_ref<const std::string&>().empty());
}

struct HfSplit {
  std::string pattern;
  bool keep_gaps;  // Isolated keeps the text between matches as pieces; Removed + invert drops it
};

// Reads the pattern out of a tokenizer.json pre_tokenizer (see bpe_tokenizer.h).
HfSplit hf_pattern(const json& pre, const std::string& where) {
  QUILL_CHECK(pre.is_object(), "{}: pre_tokenizer must be an object (a byte-level BPE needs ByteLevel)", where);
  std::string type = string_field(pre, "type", where + ".pre_tokenizer");
  auto check_byte_level = [&](const json& bl, const std::string& w, bool want_regex) {
    QUILL_CHECK(!bl.value("add_prefix_space", false), "{}: add_prefix_space true is not supported", w);
    QUILL_CHECK(bl.value("use_regex", true) == want_regex, "{}: use_regex {} is not supported here", w,
                bl.value("use_regex", true));
  };
  if (type == "ByteLevel") {
    check_byte_level(pre, where + ".pre_tokenizer", true);
    return {std::string(kGpt2Pattern), true};
  }
  QUILL_CHECK(type == "Sequence", "{}: pre_tokenizer type {} is not supported (Sequence or ByteLevel)", where, type);
  const json& list = pre.at("pretokenizers");
  QUILL_CHECK(list.is_array() && list.size() == 2,
              "{}: pre_tokenizer Sequence must be [Split(Regex), ByteLevel(use_regex false)]", where);
  std::string w0 = where + ".pre_tokenizer.pretokenizers[0]", w1 = where + ".pre_tokenizer.pretokenizers[1]";
  const json& split = list[0];
  QUILL_CHECK(split.is_object() && split.value("type", "") == "Split", "{}: expected a Split", w0);
  std::string behavior = split.value("behavior", "");
  bool invert = split.value("invert", false);
  QUILL_CHECK((behavior == "Isolated" && !invert) || (behavior == "Removed" && invert),
              "{}: behavior {} with invert {} is not supported (Isolated, or Removed with invert true)", w0, behavior,
              invert);
  const json& pat = split.at("pattern");
  QUILL_CHECK(pat.is_object() && pat.contains("Regex") && pat.at("Regex").is_string(),
              "{}: pattern must be {{\"Regex\": ...}}", w0);
  QUILL_CHECK(list[1].is_object() && list[1].value("type", "") == "ByteLevel", "{}: expected a ByteLevel", w1);
  check_byte_level(list[1], w1, false);
  return {pat.at("Regex").get<std::string>(), behavior == "Isolated"};
}

}  // namespace

std::unique_ptr<BpeTokenizer> BpeTokenizer::from_tiktoken(const std::string& path, std::vector<SpecialToken> specials,
                                                          std::string_view pattern, int threads,
                                                          const TableFilePolicy& table_file) {
  MappedFile file(path);
  std::string_view text = file.view();
  ThreadPool pool(threads);
  // The file's SHA-256 (the definition's, and the table file's key) is one serial pass of a few
  // milliseconds: on a thread of its own while the pool reads the table file or parses, unless
  // the load is to use one thread.
  std::future<std::string> sha_job;
  if (pool.threads() > 1) sha_job = std::async(std::launch::async, [text] { return sha256_hex(text); });
  std::string ranks_sha;
  auto sha = [&]() -> std::string {
    if (ranks_sha.empty()) ranks_sha = sha_job.valid() ? sha_job.get() : sha256_hex(text);
    return ranks_sha;
  };
  auto tok = std::unique_ptr<BpeTokenizer>(new BpeTokenizer());
  tok->kind_ = "tiktoken";
  tok->name_ = "tiktoken:" + std::filesystem::path(path).filename().string();
  auto check_specials = [&](size_t ids, auto&& bytes_of) {
    for (const SpecialToken& s : specials) {
      QUILL_CHECK(s.id >= ids || bytes_of(s.id).empty(), "{}: special token {} has id {}, which is a rank of the file",
                  path, s.spelling, s.id);
    }
  };
  const bool use_table_file = table_file.enabled && text.size() >= table_file.min_rank_file_bytes;
  const std::string table_path = bpe_table_file_path(path);
  std::optional<BpeCore> core;
  if (use_table_file) core = read_bpe_table_file(table_path, sha, text.size(), pool);
  if (core) {
    check_specials(core->id_count(), [&](uint32_t id) { return core->token_bytes(id); });
    tok->core_ = std::move(*core);
  } else {
    TokenBytes tokens = parse_rank_file(text, path, pool);
    check_specials(tokens.size(), [&](uint32_t id) { return tokens.at(id); });
    tok->core_ = BpeCore::from_ranks(std::move(tokens), path, &pool);
    if (use_table_file) write_bpe_table_file(table_path, tok->core_, sha(), text.size());
  }
  tok->splitter_ = std::make_unique<PreSplitRegex>(pattern);
  tok->keep_gaps_ = false;
  tok->specials_ = std::move(specials);
  json special = json::array();
  std::vector<SpecialToken> sorted = tok->specials_;
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  for (const SpecialToken& s : sorted) special.push_back({s.spelling, s.id});
  json def = {{"kind", "tiktoken"},
              {"ranks_sha256", sha()},
              {"pattern", pattern},
              {"special", special}};
  tok->sha256_ = sha256_hex(def.dump());
  tok->finish_setup(path);
  return tok;
}

std::unique_ptr<BpeTokenizer> BpeTokenizer::from_hf_json(const std::string& path, int threads) {
  std::string text = read_file(path);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    QUILL_FAIL("{}: malformed JSON ({})", path, e.what());
  }
  QUILL_CHECK(j.is_object() && j.contains("model") && j.at("model").is_object(), "{}: missing model", path);
  const json& model = j.at("model");
  std::string mw = path + ": model";
  QUILL_CHECK(model.value("type", "BPE") == "BPE", "{}.type is {}; only BPE is supported", mw, model.value("type", "?"));
  QUILL_CHECK(model.value("dropout", json()).is_null(), "{}.dropout must be null", mw);
  QUILL_CHECK(!model.value("byte_fallback", false), "{}.byte_fallback true is not supported (byte-level BPE)", mw);
  QUILL_CHECK(null_or_empty(model, "continuing_subword_prefix"), "{}.continuing_subword_prefix is not supported", mw);
  QUILL_CHECK(null_or_empty(model, "end_of_word_suffix"), "{}.end_of_word_suffix is not supported", mw);
  QUILL_CHECK(!j.contains("normalizer") || j.at("normalizer").is_null(),
              "{}: normalizer {} is not supported (byte-level BPE has none)", path, j.value("normalizer", json()).dump());
  HfSplit split = hf_pattern(j.value("pre_tokenizer", json()), path);

  const json& vocab = model.at("vocab");
  QUILL_CHECK(vocab.is_object(), "{}.vocab must be an object", mw);
  std::vector<std::string> tokens;
  std::map<uint32_t, std::string> literal;  // vocabulary entries outside the byte-level alphabet
  std::unordered_map<std::string, uint32_t> id_of;
  std::string bytes;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    QUILL_CHECK(it->is_number_unsigned() && it->get<uint64_t>() < (1ull << 31), "{}.vocab[{}]: bad id", mw, it.key());
    uint32_t id = it->get<uint32_t>();
    id_of[it.key()] = id;
    if (id >= tokens.size()) tokens.resize(id + 1);
    if (byte_level_to_bytes(it.key(), bytes) && !bytes.empty()) {
      QUILL_CHECK(tokens[id].empty(), "{}.vocab: id {} appears twice", mw, id);
      tokens[id] = bytes;
    } else {
      literal[id] = it.key();
    }
  }
  std::vector<std::pair<uint32_t, uint32_t>> merges;
  const json& jm = model.at("merges");
  QUILL_CHECK(jm.is_array(), "{}.merges must be a list", mw);
  merges.reserve(jm.size());
  for (size_t r = 0; r < jm.size(); ++r) {
    std::string a, b;
    const json& m = jm[r];
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      size_t space = s.find(' ');
      QUILL_CHECK(space != std::string::npos && s.find(' ', space + 1) == std::string::npos,
                  "{}.merges[{}]: \"{}\" is not \"left right\"", mw, r, s);
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else {
      QUILL_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(),
                  "{}.merges[{}]: expected \"left right\" or [left, right]", mw, r);
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    }
    auto ia = id_of.find(a), ib = id_of.find(b);
    QUILL_CHECK(ia != id_of.end() && ib != id_of.end(), "{}.merges[{}]: {} or {} is not in the vocabulary", mw, r, a, b);
    merges.push_back({ia->second, ib->second});
  }

  auto tok = std::unique_ptr<BpeTokenizer>(new BpeTokenizer());
  tok->kind_ = "hf-tokenizer.json";
  tok->name_ = "hf:" + std::filesystem::path(path).filename().string();
  ThreadPool pool(threads);
  tok->core_ = BpeCore::from_merges(std::move(tokens), merges, model.value("ignore_merges", false), path, &pool);
  tok->splitter_ = std::make_unique<PreSplitRegex>(split.pattern);
  tok->keep_gaps_ = split.keep_gaps;
  if (auto added = j.find("added_tokens"); added != j.end() && !added->is_null()) {
    QUILL_CHECK(added->is_array(), "{}: added_tokens must be a list", path);
    for (size_t i = 0; i < added->size(); ++i) {
      const json& a = (*added)[i];
      std::string w = fmt::format("{}: added_tokens[{}]", path, i);
      QUILL_CHECK(a.is_object() && a.contains("id") && a.at("id").is_number_unsigned(), "{}: missing id", w);
      tok->specials_.push_back({string_field(a, "content", w), a.at("id").get<uint32_t>()});
    }
  }
  for (const SpecialToken& s : tok->specials_) literal.erase(s.id);
  for (auto& [id, s] : literal) tok->specials_.push_back({s, id});  // decodable, never produced by encode
  tok->sha256_ = sha256_hex(text);
  tok->finish_setup(path);
  return tok;
}

void BpeTokenizer::finish_setup(const std::string& source) {
  vocab_size_ = static_cast<int64_t>(core_.id_count());
  for (const SpecialToken& s : specials_) {
    auto [it, inserted] = special_by_spelling_.emplace(s.spelling, s.id);
    QUILL_CHECK(inserted || it->second == s.id, "{}: special token {} has two ids ({} and {})", source, s.spelling,
                it->second, s.id);
    special_by_id_[s.id] = s.spelling;
    vocab_size_ = std::max<int64_t>(vocab_size_, static_cast<int64_t>(s.id) + 1);
  }
  safe_cuts_ = splitter_->pattern() == kO200kPattern || splitter_->pattern() == kGpt2Pattern;
}

std::vector<uint32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<uint32_t> out;
  encode_append(text, out);
  return out;
}

void BpeTokenizer::encode_append(std::string_view text, std::vector<uint32_t>& out) const {
  if (is_valid_utf8(text)) {
    encode_valid(text, out);
  } else {
    std::string clean = sanitize_utf8(text);
    encode_valid(clean, out);
  }
}

void BpeTokenizer::encode_valid(std::string_view text, std::vector<uint32_t>& out) const {
  const size_t n = text.size();
  size_t done = 0, search = 0, b = 0, e = 0;  // done: end of the text already encoded
  while (search < n) {
    bool found = splitter_->find(text, search, &b, &e);
    if (found && e == b) {  // an empty match: its character joins the gap before the next match
      search = b + utf8_char_length(text, b);
      continue;
    }
    if (!found) b = e = n;
    if (b > done && keep_gaps_) core_.encode_piece(text.substr(done, b - done), out);
    if (!found) {
      done = n;
      break;
    }
    core_.encode_piece(text.substr(b, e - b), out);
    done = search = e;
  }
  if (done < n && keep_gaps_ && search >= n) core_.encode_piece(text.substr(done), out);
}

std::string BpeTokenizer::decode(std::span<const uint32_t> ids) const {
  std::string out;
  for (uint32_t id : ids) {
    if (!special_by_id_.empty()) {
      auto it = special_by_id_.find(id);
      if (it != special_by_id_.end()) {
        out += it->second;
        continue;
      }
    }
    std::string_view bytes = core_.token_bytes(id);
    QUILL_CHECK(!bytes.empty(), "tokenizer {}: id {} is no token (vocabulary of {})", name_, id, vocab_size_);
    out += bytes;
  }
  return out;
}

std::optional<uint32_t> BpeTokenizer::find_special(std::string_view spelling) const {
  auto it = special_by_spelling_.find(spelling);
  if (it == special_by_spelling_.end()) return std::nullopt;
  return it->second;
}

}  // namespace quill
