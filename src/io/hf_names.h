// The two tensor-name forms of an Inkling Hugging Face checkpoint, and where each quill parameter
// lives in each (docs/hf-export.md).
//
// - Release: the names and layout of the released checkpoint (`model.llm.*`), which quill's parameter
//   table uses: the gate/up (`w13`) tensors hold both halves with their rows interleaved (even rows
//   gate, odd rows up). InklingForConditionalGeneration converts it on load (transformers'
//   conversion_mapping.py, "inkling_mm_model").
// - Transformers: what InklingForCausalLM's save_pretrained writes (`model.layers.*`, `lm_head`): the
//   dense and shared-expert gate/up split into two tensors, the routed experts' `gate_up_proj` with
//   gate rows [0, F) then up rows [F, 2F), which is quill's internal layout.
// The map is the one transformers' conversion applies (renames, Interleave + Chunk on w13), as
// tools/parity/make_golden.py checked it value by value (tools/parity/README.md, "Name and layout map").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/params.h"

namespace quill {

enum class HfFormat { Release, Transformers };

const char* hf_format_name(HfFormat format);  // "release" | "transformers"
// Parses "release" or "transformers"; otherwise throws naming `what` (the flag) and both choices.
HfFormat parse_hf_format(const std::string& text, const std::string& what);

// One checkpoint tensor holding (part of) a quill parameter. Rows are those of dimension -2 within
// each leading block (experts); a 1-D parameter is one row.
struct CheckpointPart {
  std::string name;
  Shape shape;               // the checkpoint tensor's shape
  int64_t row_begin = 0;     // quill's internal rows [row_begin, row_begin + rows) of each block
  bool interleaved = false;  // the part is the whole parameter with gate/up rows interleaved
};

// Where parameter p is stored in a checkpoint of the given form: one part, or two (gate, up) for
// the dense and shared-expert w13 of the transformers form. Throws naming p when the transformers
// form has no place for it.
std::vector<CheckpointPart> checkpoint_parts(const Param& p, HfFormat format);

// The form of a checkpoint from its tensor names: Transformers when no name is a release text name
// (`model.llm.*`) and some name is a transformers text name (`model.layers.*`, `model.embed_tokens.*`,
// `lm_head.*`); otherwise Release.
HfFormat detect_hf_format(const std::vector<std::string>& names);

// The short-conv weights, which transformers keeps in fp32 (InklingPreTrainedModel's
// _keep_in_fp32_modules_strict) and the release stores in BF16.
bool is_short_conv(const Param& p);
// The router's selection bias and global scale, which the release stores in F32.
bool is_release_f32(const Param& p);

}  // namespace quill
