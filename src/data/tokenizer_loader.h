// Opening a tokenizer from the command line's --tokenizer and --special-tokens.
//
//   --tokenizer byte            the built-in byte tokenizer (byte_tokenizer.h)
//   --tokenizer FILE            a Hugging Face tokenizer.json (the file starts with '{'), or else a
//                               tiktoken rank file (o200k_base.tiktoken, tiktoken/tokenizer.model)
//   --special-tokens SPEC       for a rank file only (tokenizer.json has its added_tokens):
//       inkling   (default)     the Inkling control tokens with known ids (docs/model.md
//                               section 4, special_tokens.h), e.g. <|message_user|> = 200000
//       o200k                   tiktoken's o200k_base specials: <|endoftext|> 199999,
//                               <|endofprompt|> 200018
//       none                    no special tokens
//       FILE.json               {"<|spelling|>": id, ...}
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/bpe_tokenizer.h"
#include "data/tokenizer.h"

namespace quill {

inline constexpr const char* kDefaultSpecialTokens = "inkling";

// The special tokens a SPEC names (see above). Errors name the spec or the file.
std::vector<SpecialToken> special_token_set(const std::string& spec);

// Opens the tokenizer (see above); an empty special_tokens means the default. A BPE tokenizer's
// tables are built on `threads` threads (0: all cores), with the same result whatever the count.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path, const std::string& special_tokens = "",
                                          int threads = 0);

// What a rows manifest records so that `quill data inspect` can reopen the tokenizer:
// {"path": absolute path (or "byte"), "special_tokens": spec}.
nlohmann::json tokenizer_source_json(const std::string& path, const std::string& special_tokens = "");

}  // namespace quill
