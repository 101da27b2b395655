// A JSONL line of the usual shape parsed straight into a Conversation, for `quill data build`.
//
// Why: nlohmann's parser reads a character at a time and builds a DOM (a std::map per message),
// whose strings conversation_from_json then copies again; on the cold benchmark's 17.6 MB of
// JSONL that was ~0.17 s of a 1-thread build of ~1 s on the 16-core host (the encode ~0.54 s).
// This parser copies each string once, in runs between escapes.
//
// It takes the common shape: a top-level object whose "messages" is a list of objects with
// "role", "content", "reasoning_content"/"reasoning", "name", "tool_call_id" (strings, or null
// where conversation_from_json allows null), other keys of any value being skipped; "tools" and
// "tool_calls" (small) are cut out as JSON text and read by nlohmann and tool_call_from_json.
// Anything else (numbers with a fraction or an exponent or more than 18 digits, a byte-order
// mark, deep nesting, any error or doubt) returns nullopt, and the caller
// takes the general path (nlohmann + conversation_from_json), which gives the same conversation
// or the error. So where this returns a conversation, it is the one the general path gives
// (tests/data/conversation_fast_test.cc checks both on many lines).
#pragma once

#include <optional>
#include <string_view>

#include "data/conversation.h"

namespace quill {

// `line` must be valid UTF-8 (the caller checks it first, as the general path does).
std::optional<Conversation> parse_conversation_fast(std::string_view line);

}  // namespace quill
