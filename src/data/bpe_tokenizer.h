// Byte-level BPE tokenizers: tiktoken rank files and Hugging Face tokenizer.json.
//
//   tiktoken rank file   one "<base64 token> <rank>" per line (o200k_base.tiktoken, Inkling's
//                        tiktoken/tokenizer.model); id = rank; the pattern is given (o200k_base's
//                        by default); special tokens come separately (SpecialTokenSet).
//   tokenizer.json       model.type BPE with vocab, merges ("a b" strings or [a, b] pairs) and
//                        ignore_merges; pre_tokenizer Split(Regex, Isolated, or Removed with
//                        invert true) + ByteLevel(use_regex false), or ByteLevel(use_regex true)
//                        alone (the GPT-2 pattern);
//                        added_tokens are the special tokens. Anything else (a normalizer,
//                        dropout, byte_fallback, a subword prefix, add_prefix_space) is refused
//                        with an error naming the field, rather than encoded differently.
//
// encode() = tiktoken's encode_ordinary: text is valid-UTF-8-sanitized (ill-formed bytes become
// U+FFFD, see utf8.h), cut by the pattern, and each piece is BPE-encoded (bpe.h). Special-token
// spellings in the text are ordinary text. Ids are exactly tiktoken's for o200k_base
// (tests/data/bpe_o200k_test.cc checks a 1 MB corpus against tiktoken's ids).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/bpe.h"
#include "data/bpe_table_file.h"
#include "data/parallel_encode.h"
#include "data/pre_split.h"
#include "data/tokenizer.h"

namespace quill {

struct SpecialToken {
  std::string spelling;
  uint32_t id;
};

class BpeTokenizer final : public Tokenizer {
 public:
  // Loads a tiktoken rank file. `specials` are added as special tokens (their ids may not be
  // ranks of the file). Errors name the file and the line. The tables are built on `threads`
  // threads (0: all cores), or read from the rank file's table file when it matches
  // (bpe_table_file.h; written after a build); the tokenizer and any error are the same whatever
  // the count and whether the table file was used.
  static std::unique_ptr<BpeTokenizer> from_tiktoken(const std::string& path, std::vector<SpecialToken> specials,
                                                     std::string_view pattern = kO200kPattern, int threads = 0,
                                                     const TableFilePolicy& table_file = TableFilePolicy::from_env());
  // Loads a Hugging Face tokenizer.json (see above). Errors name the file and the field.
  static std::unique_ptr<BpeTokenizer> from_hf_json(const std::string& path, int threads = 0);

  std::string name() const override { return name_; }
  std::vector<uint32_t> encode(std::string_view text) const override;
  void encode_append(std::string_view text, std::vector<uint32_t>& out) const override;
  std::string decode(std::span<const uint32_t> ids) const override;
  std::optional<uint32_t> find_special(std::string_view spelling) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  std::string definition_sha256() const override { return sha256_; }

  // encode() on several threads (options: parallel_encode.h), cutting the text only where a piece
  // boundary is certain (text_chunks.h: after a '\n' that an ASCII letter or digit follows), so
  // the ids are exactly encode()'s whatever the thread count, chunk size or cache sizes. `out` is
  // replaced and its storage reused: a caller that encodes into the same vector again allocates
  // nothing. Patterns other than o200k's and GPT-2's are encoded on one thread.
  void encode_parallel(std::string_view text, const ParallelEncodeOptions& options, std::vector<uint32_t>& out) const;
  // The same on `threads` threads (<= 0: all cores) into a new vector, whose zero-fill is serial.
  std::vector<uint32_t> encode_parallel(std::string_view text, int threads) const;

  // The sizes of encode's per-thread caches (bpe_cache_sizes.h; QUILL_BPE_* by default). The ids
  // do not depend on them. Not while another thread encodes with this tokenizer.
  void set_cache_sizes(const BpeCacheSizes& sizes) { core_.set_cache_sizes(sizes); }

  const std::string& pattern() const { return splitter_->pattern(); }
  bool jit() const { return splitter_->jit(); }
  const BpeCore& core() const { return core_; }
  const std::vector<SpecialToken>& specials() const { return specials_; }
  // "tiktoken" or "hf-tokenizer.json".
  const std::string& kind() const { return kind_; }

 private:
  BpeTokenizer() = default;
  void finish_setup(const std::string& source);
  void encode_valid(std::string_view text, std::vector<uint32_t>& out) const;

  std::string kind_, name_, sha256_;
  BpeCore core_;
  std::unique_ptr<PreSplitRegex> splitter_;
  bool keep_gaps_ = false;   // text the pattern skips: a piece of its own (HF) or dropped (tiktoken)
  bool safe_cuts_ = false;   // the pattern allows encode_parallel's cuts
  std::vector<SpecialToken> specials_;
  std::map<std::string, uint32_t, std::less<>> special_by_spelling_;
  std::map<uint32_t, std::string> special_by_id_;
  int64_t vocab_size_ = 0;
};

}  // namespace quill
