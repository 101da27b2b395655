// An --init checkpoint must hold nothing in the text model's names that the model does not have: a
// tensor of a layer past the config's last (a checkpoint of a deeper model), or a misspelled name,
// would otherwise be skipped in silence while the parameter it was meant for reports as missing, or
// not at all. Tensors outside the text model (MTP, vision, audio) pass through (hf_checkpoint.h).
#pragma once

#include <string>
#include <vector>

#include "io/hf_names.h"
#include "model/config.h"

namespace quill {

// The checkpoint's tensors in the text model's namespace of its form (release: `model.llm.*`;
// transformers: `model.layers.*`, `model.embed_tokens.*`, `model.embed_norm.*`, `model.norm.*`,
// `lm_head.*`) that are no part of `config`'s model, sorted.
std::vector<std::string> unknown_text_tensors(const std::vector<std::string>& names, const InklingConfig& config);

// Every tensor name of `config`'s model in checkpoint form `format` (hf_names.h), in declaration order.
std::vector<std::string> checkpoint_tensor_names(const InklingConfig& config, HfFormat format);

// Throws naming dir, the unknown tensors (the first few and how many) and the config when there are any.
void check_no_unknown_text_tensors(const std::string& dir, const InklingConfig& config);

}  // namespace quill
