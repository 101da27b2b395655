// A synthetic SFT set that a tiny model learns within ~100 steps: short, exactly determined
// answers to five task templates, in the messages format, ASCII only.
//
//   reverse: qkdme        -> emdkq            (3-8 random lowercase letters)
//   upper: xbtr           -> XBTR             (3-8 random lowercase letters)
//   sort: 7 1 4 1         -> 1 1 4 7          (3-6 random digits)
//   add 17 25             -> 42               (two numbers in 0..99)
//   max: 31 90 4          -> 90               (3-6 numbers in 0..99)
//
// Generator (SplitMix64 rng(seed), every draw is rng.below(k), in this order per conversation):
//   below(5) == 0        -> a system message kSyntheticSystemPrompts[below(3)]
//   below(6) == 0 ? 2 : 1   exchanges; per exchange: task = below(5) (order as listed above), its
//                        operands (length below(6)+3 or count below(4)+3, then each letter
//                        below(26) / digit below(10) / number below(100)), then below(4) == 0 ->
//                        the assistant message carries a one-line reasoning_content.
// The bundled data/synthetic/conversations.jsonl is conversations_to_jsonl(
// generate_synthetic_conversations(2000, 42)); a test keeps the two identical.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "data/conversation.h"

namespace quill {

inline constexpr std::array<std::string_view, 3> kSyntheticSystemPrompts = {
    "You are a precise assistant.", "Answer with the result only.", "Be brief and exact."};

// Path of the bundled set relative to the source tree root, and how it was generated.
inline constexpr const char* kSyntheticBundlePath = "data/synthetic/conversations.jsonl";
inline constexpr int64_t kSyntheticBundleConversations = 2000;
inline constexpr uint64_t kSyntheticBundleSeed = 42;

std::vector<Conversation> generate_synthetic_conversations(int64_t n, uint64_t seed);

// Generates n_conversations with `seed`, renders them with the ByteTokenizer (effort high), packs
// them with the same seed and writes a rows directory (with valid_fraction, its held-out split in
// out_dir/valid, as BuildOptions::valid_fraction). Returns the manifest.
nlohmann::json build_synthetic_rows(const std::string& out_dir, int64_t n_conversations, uint64_t seed,
                                    int64_t row_tokens, int64_t max_rows = -1, double valid_fraction = 0);

}  // namespace quill
