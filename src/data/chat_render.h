// The Inkling chat renderer and loss mask (inkling-small.md section 4; recipes-and-measurement.md
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
// special. Empty content renders no block at all (this includes a tool result with empty content,
// and an assistant turn with nothing to render emits nothing, not a bare end-of-sampling token).
// JSON (tool specs, tool-call args) is compact with sorted keys: nlohmann's dump(), which like
// Python's json.dumps(..., ensure_ascii=False) leaves non-ASCII UTF-8 unescaped.
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
inline constexpr int kRendererVersion = 1;

struct RenderOptions {
  // none | minimal | low | medium | high | max, or a number in [0, 0.99] written as text.
  std::string reasoning_effort = "high";
};

// The number written after "Thinking effort level: ": none 0, minimal 0.1, low 0.2, medium 0.7,
// high 0.9, max 0.99; a number is rounded to two decimals with trailing zeros (and a trailing
// point) removed ("0.50" -> "0.5", "0" -> "0"). Anything else is an error naming the value.
std::string effort_level_text(std::string_view effort);

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
