// The Inkling chat renderer and loss mask (docs/model.md §4; recipes-and-measurement.md
// section 6). A conversation becomes token ids plus a mask bit per token:
//
//   [<|message_system|>tool_declare<|content_xml|>{tool specs as JSON}<|end_message|>]   if tools
//   <|message_system|><|content_text|>{system}<|end_message|>        each leading system message
//   <|message_system|><|content_text|>Thinking effort level: 0.9<|end_message|>
//                                  once, just before the first non-system message (or at the end)
//   <|message_user|><|content_text|>{text}<|end_message|>
//   <|message_model|><|content_thinking|>{reasoning}<|end_message|>         if reasoning
//   <|message_model|><|content_text|>{content}<|end_message|>                 if content
//   <|message_model|>{fn}<|content_invoke_tool_json|>{"name":"fn","args":{...}}<|end_message|>
//                                                                             per tool call
//   <|content_model_end_sampling|>              closes every assistant turn that rendered a block
//   <|message_tool|>{tool name}<|content_text|>{result}<|end_message|>
//
// Mask: 1 on every token of an assistant turn after its leading <|message_model|>, through its
// <|content_model_end_sampling|>; 0 elsewhere (tools, system, effort line, user, tool results).
// Text is always plain text (Tokenizer::encode), so special-token spellings in content are not
// special. Empty system, user and assistant content renders no block, and an assistant turn with
// nothing to render emits nothing, not a bare end-of-sampling token; a tool result always renders
// its block, empty or not. This is miles' inkling_fixed.jinja exactly; tests/data/
// chat_render_miles_test.cc compares the text with that template's output.
// A tool message without a name takes the name of the assistant tool call whose id equals its
// tool_call_id (searched over the whole conversation; the last such call wins).
// JSON (tool specs, tool-call args) is written exactly as the template's tojson(sort_keys=True,
// separators=(",", ":")) writes it, i.e. Python's json.dumps(..., ensure_ascii=False): see
// python_json().
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "data/conversation.h"
#include "data/masked_tokens.h"
#include "data/tokenizer.h"

namespace quill {

inline constexpr std::string_view kRendererName = "inkling";
// Bumped whenever any rendered token could change.
// 2: efforts written as Python floats, tool results rendered when empty, tool names looked up
//    over the whole conversation, falsy tool-spec fields defaulted (all as miles' template does).
inline constexpr int kRendererVersion = 2;

struct RenderOptions {
  // none | minimal | low | medium | high | max, or a number in [0, 0.99] written as text.
  std::string reasoning_effort = "high";
};

// The number written after "Thinking effort level: ", as miles' inkling_fixed.jinja writes it:
// none 0, minimal 0.1, low 0.2, medium 0.7, high 0.9, max 0.99 (names may carry surrounding
// spaces); a number in [0, 0.99] is written as Python's str(float) ("0.50" -> "0.5", "0.123" ->
// "0.123", "0.00001" -> "1e-05"), and 0 as "0". Anything else is an error naming the value.
std::string effort_level_text(std::string_view effort);
// Python's repr() of a float (shortest round trip; exponent form outside [1e-4, 1e16)).
std::string python_float_repr(double v);

// Python's json.dumps(j, sort_keys=True, separators=(",", ":"), ensure_ascii=False): compact,
// keys sorted by code point, non-ASCII left as UTF-8, floats as Python's repr (1e15 ->
// "1000000000000000.0", where nlohmann's dump() writes "1e+15"). An integer beyond 64 bits, which
// nlohmann reads as a float, is the one value that cannot match.
std::string python_json(const nlohmann::json& j);
// The tool declaration payload: a JSON list of {description, name, parameters, type} per tool
// (an OpenAI {"type", "function": {...}} spec is flattened; description defaults to "",
// parameters to {}, type to "function"), compact with sorted keys.
std::string tool_declare_json(const nlohmann::json& tools);
// A tool call payload: {"name":<name>,"args":<args, compact, sorted keys>} (name first).
std::string tool_call_json(const ToolCall& call);

class ChatRenderer {
 public:
  explicit ChatRenderer(const Tokenizer& tokenizer, RenderOptions options = {});

  MaskedTokens render(const Conversation& conversation) const;
  // The same into `out`, replacing its contents but keeping its storage (the data build reuses
  // one per slot instead of allocating and freeing two vectors per conversation).
  void render_into(const Conversation& conversation, MaskedTokens& out) const;

  // The kwargs recorded in the rows manifest: {"reasoning_effort": "<as given>"}.
  nlohmann::json template_kwargs() const;
  const Tokenizer& tokenizer() const { return tokenizer_; }

 private:
  const Tokenizer& tokenizer_;
  RenderOptions options_;
  std::string effort_line_;
  std::vector<uint32_t> ids_;  // control-token ids, resolved once (see chat_render.cc)
};

}  // namespace quill
