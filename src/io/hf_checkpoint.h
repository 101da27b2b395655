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
  // The streamed export (io/streamed_hf_writer.h): each rank's host memory added at the export's peak
  // (VmHWM at the end minus VmRSS at the start, base/peak_rss.h; -1 where it could not be measured),
  // in rank order. Empty for save_hf_checkpoint.
  std::vector<int64_t> host_bytes_added_per_rank;
};

// Writes a complete checkpoint to out_dir in options.format: every parameter, every pass-through
// tensor of source_dir (empty: none) when source_dir is in that form, and config.json = config_json
// (must parse as JSON; the caller makes it agree with the form). Everything goes to
// "out_dir.tmp-<pid>", renamed to out_dir only when complete; a failure leaves no out_dir (and the
// old one, when overwriting). Refuses an existing non-empty out_dir unless options.overwrite.
// source_dir may equal out_dir when overwriting.
SaveReport save_hf_checkpoint(const std::string& out_dir, const ParamTable& table, const std::string& source_dir,
                              const std::string& config_json, const SaveOptions& options = {});

// The tensors of a checkpoint in one form, in the order a save writes them: every part of every
// parameter (params' order), then the source checkpoint's pass-through tensors (sorted). Header
// fields only (items' `bytes` are empty); each item's origin says where its bytes come from.
// Checks what save_hf_checkpoint checks of the names and dtypes (a value is not looked at), so that
// the in-run and the streamed exports list one set of tensors in one order.
struct HfTensorList {
  static constexpr size_t kPassThrough = static_cast<size_t>(-1);
  struct Origin {
    size_t param = 0;         // index into params, or kPassThrough
    size_t part = 0;          // index into checkpoint_parts(params[param], format)
    std::string source_name;  // the pass-through tensor's name in the source
  };
  std::vector<SafetensorsItem> items;
  std::vector<Origin> origins;
  SaveReport report;                    // written, passed_through, dropped
  std::optional<CheckpointDir> source;  // the source checkpoint, when one was given
};
HfTensorList hf_tensor_list(const std::vector<Param>& params, HfFormat format,
                            const std::function<DType(const Param&)>& dtype_of, const std::string& source_dir);

// out_dir normalised ("out/" -> "out"), refused when unusable, not a directory, or (unless overwrite)
// a non-empty directory.
std::string checked_hf_out_dir(const std::string& out_dir, bool overwrite);
// Copies source_dir's side files (SaveOptions::copy_side_files) into `to`.
void copy_hf_side_files(const std::string& source_dir, const std::string& to);

// Row reorderings on dimension -2 of a CPU tensor of any dtype (ndim >= 2, even dim(-2)); new tensors.
Tensor deinterleave_gate_up(const Tensor& interleaved);  // checkpoint -> quill
Tensor interleave_gate_up(const Tensor& split);          // quill -> checkpoint

}  // namespace quill
