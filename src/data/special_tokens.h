// The Inkling control tokens (docs/model.md §4), spelled as in the Inkling vocabulary.
// One table, so every tokenizer and the renderer agree on spellings; `inkling_id` is the id in the
// real 200,058-token vocabulary (-1 where no public source lists it).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace quill {

struct SpecialTokenInfo {
  std::string_view spelling;
  int64_t inkling_id;
};

inline constexpr std::array<SpecialTokenInfo, 18> kInklingSpecialTokens = {{
    {"<|endoftext|>", 199999},
    {"<|message_user|>", 200000},
    {"<|message_model|>", 200001},
    {"<|message_system|>", 200002},
    {"<|message_tool|>", 200003},
    {"<|content_text|>", 200004},
    {"<|content_image|>", 200005},
    {"<|content_model_end_sampling|>", 200006},
    {"<|content_thinking|>", 200008},
    {"<|end_message|>", 200010},
    {"<|content_audio_input|>", 200020},
    {"<|content_tool_error|>", 200022},
    {"<|content_xml|>", 200024},
    {"<|audio_end|>", 200043},
    {"<|content_invoke_tool_json|>", 200049},
    {"<|content_invoke_tool_text|>", 200057},
    {"<|content_invoke_tool|>", -1},
    {"<|model_trigger_generation|>", -1},
}};

}  // namespace quill
