// The Hugging Face export of a training run (`quill train --save-hf`): one form throughout, its
// config.json and tensor names agreeing, the config's dtype that of the tensors (docs/hf-export.md).
//
// Form (io/hf_names.h), unless --hf-format says otherwise: the form of the --init checkpoint's
// config.json — a multimodal config (`text_config`) is the release form, a text config the
// transformers form; a random init exports the transformers form.
//
// config.json:
// - release: the source's multimodal config.json, every key kept (vision/audio towers, token ids,
//   mtp_config, ...), with its dtype keys set to the export's dtype. The text_config is kept as it is
//   when it describes the trained model (it reads back to the same InklingConfig); otherwise (a
//   --config that changed it) it becomes the trained model's config in transformers' schema. The
//   source is --init's config.json, else --config's file, whichever is multimodal; a run with neither
//   (a random init from a text config) cannot be exported in the release form: there are no tower
//   configs to write, and quill does not invent them.
// - transformers: the trained model's InklingTextConfig (config_to_hf_json), plus the keys of a
//   transformers-schema source config that quill does not model (bos/eos ids, max_position_embeddings,
//   ...); from a release source only its eos/bos ids and context length; `architectures`
//   [InklingForCausalLM], `model_type` inkling_text, `dtype`.
//
// dtype (--save-hf-dtype): bf16 (default, as released) writes every tensor in BF16 except the router's
// selection bias and global scale (F32, as the release stores them) and, in the transformers form, the
// short-conv weights (F32, as transformers keeps them: _keep_in_fp32_modules_strict); fp32 writes all
// in F32. config.json's `dtype` is "bfloat16" or "float32" accordingly.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "io/hf_checkpoint.h"
#include "io/hf_names.h"
#include "model/config.h"
#include "model/params.h"

namespace quill {

struct HfExportOptions {
  std::optional<HfFormat> format;  // default: the source's form (above)
  DType dtype = DType::BF16;       // BF16 or F32
};

// Parses "bf16" or "fp32"; otherwise throws naming `what` (the flag).
DType parse_hf_export_dtype(const std::string& text, const std::string& what);

struct HfExportPlan {
  HfFormat format = HfFormat::Transformers;
  DType dtype = DType::BF16;
  std::string config_json;          // config.json as it will be written
  std::string source_dir;           // --init's checkpoint: pass-through tensors and side files ("" = none)
  std::vector<std::string> notes;   // what a person should know about the export
  uint64_t max_shard_bytes = SaveOptions{}.max_shard_bytes;  // tensor bytes per safetensors file
};

// Decides the form and composes config.json. Called before training, so that an export that cannot
// be made stops the run before its first step. init_dir: --init ("" = random init); config_path:
// --config ("" = --init's), a file or a directory holding config.json.
HfExportPlan plan_hf_export(const InklingConfig& config, const std::string& init_dir, const std::string& config_path,
                            const HfExportOptions& options);

// The dtype parameter p is written in (above).
DType hf_export_dtype(const Param& p, HfFormat format, DType dtype);

// Writes the planned export of a gathered `table` (the whole model on this host) to out_dir
// (replacing it). Runs export without a gather: io/streamed_hf_export.h.
// show_progress: a progress line on stderr when the write takes more than a few seconds.
SaveReport write_hf_export(const HfExportPlan& plan, const std::string& out_dir, const ParamTable& table,
                           bool show_progress = false);

}  // namespace quill
