// The Hugging Face Inkling checkpoint <-> quill's parameter table, in either tensor-name form
// (io/hf_names.h, docs/hf-export.md).
//
// Release form: the table's own names (`model.llm.*`) and shapes; the one layout difference is the
// gate/up (`w13`) tensors: the checkpoint interleaves their rows on dimension -2 (row 2i = gate i,
// row 2i+1 = up i; leading dimensions such as experts are independent), quill keeps them split (gate
// rows [0, F), up rows [F, 2F)); docs/decisions/gate-up-layout.md. Transformers form: InklingForCausalLM's
// names, the dense and shared-expert gate/up as two tensors each, no interleave. Load reads either
// form (told apart by the names), converts any float dtype to the fp32 master value and records the
// checkpoint dtype; save writes the form asked for, each parameter in its checkpoint dtype (round to
// nearest even) unless told otherwise, and copies every tensor of the source checkpoint that the table
// does not hold (MTP, vision, audio) byte for byte, when the source is in the form being written.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <functional>

#include "io/checkpoint_dir.h"
#include "io/hf_names.h"
#include "model/params.h"

namespace quill {

struct LoadReport {
  HfFormat format = HfFormat::Release;    // the checkpoint's tensor-name form
  std::vector<std::string> loaded;        // parameter names, table order
  std::vector<std::string> pass_through;  // checkpoint tensors not in the table, sorted
  uint64_t bytes_read = 0;                // checkpoint bytes of the loaded parameters
};

// Fills every Param of the table (buffers included) from the checkpoint in dir, in whichever form it
// is: value (fp32, allocated if undefined, else written in place) and checkpoint_dtype (of its first
// part). Throws "DIR: tensor NAME missing", or naming the tensor and both shapes when they differ, or
// its dtype when not a float.
// show_progress: a progress line on stderr when the load takes more than a few seconds (base/progress.h).
void load_hf_checkpoint(const std::string& dir, ParamTable& table, LoadReport* report = nullptr,
                        bool show_progress = false);

struct SaveOptions {
  bool overwrite = false;              // replace an existing non-empty out_dir
  HfFormat format = HfFormat::Release; // tensor names and layout to write
  std::optional<DType> force_dtype;    // write every parameter in this dtype (F32 for exact tests)
  std::function<DType(const Param&)> dtype_of;  // when set: each parameter's dtype (wins over force_dtype)
  uint64_t max_shard_bytes = 5'000'000'000;
  // Copy the source directory's other top-level files (tokenizer, chat template, generation
  // config: *.json, *.jinja, *.txt, *.model, *.tiktoken) except config.json and the weight index.
  bool copy_side_files = true;
  bool show_progress = false;  // a progress line on stderr when the write takes more than a few seconds
};

struct SaveReport {
  std::vector<std::string> written;         // checkpoint names of the parameters' tensors, in order
  std::vector<std::string> passed_through;  // source tensors copied byte for byte, sorted
  std::vector<std::string> dropped;         // source tensors not in the table and not written (the
                                            // source is in the other form), sorted
};

// Writes a complete checkpoint to out_dir in options.format: every parameter, every pass-through
// tensor of source_dir (empty: none) when source_dir is in that form, and config.json = config_json
// (must parse as JSON; the caller makes it agree with the form). Everything goes to
// "out_dir.tmp-<pid>", renamed to out_dir only when complete; a failure leaves no out_dir (and the
// old one, when overwriting). Refuses an existing non-empty out_dir unless options.overwrite.
// source_dir may equal out_dir when overwriting.
SaveReport save_hf_checkpoint(const std::string& out_dir, const ParamTable& table, const std::string& source_dir,
                              const std::string& config_json, const SaveOptions& options = {});

// Row reorderings on dimension -2 of a CPU tensor of any dtype (ndim >= 2, even dim(-2)); new tensors.
Tensor deinterleave_gate_up(const Tensor& interleaved);  // checkpoint -> quill
Tensor interleave_gate_up(const Tensor& split);          // quill -> checkpoint

}  // namespace quill
