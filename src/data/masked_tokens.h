// A token sequence with its loss mask: what the chat renderer produces and the packer consumes.
// mask[i] is 1 when token i is supervised (the model is trained to emit it), 0 otherwise.
#pragma once

#include <cstdint>
#include <vector>

namespace quill {

struct MaskedTokens {
  std::vector<uint32_t> tokens;
  std::vector<uint8_t> mask;  // same length as tokens, values 0 or 1
};

}  // namespace quill
