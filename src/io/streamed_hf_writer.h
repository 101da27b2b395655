// The Hugging Face export written by every rank at once, with no gather (docs/decisions/streamed-export.md).
//
// Every rank computes the same file plan from the model's config and the export plan alone (not the
// layout, not the number of ranks): the tensors in the order save_hf_checkpoint writes them
// (io/hf_checkpoint.h: hf_tensor_list), their split into shard files (io/checkpoint_dir.h), each
// file's header and so each tensor's offset. Then each rank hands over the element ranges it owns
// (fp32, host memory; write()) and the writer converts them to the export's dtype and pwrite()s them
// at their offsets, through a bounded staging buffer; gate/up rows go to their interleaved (release)
// or split (transformers) places. Rank i % world creates shard file i (its full size), writes its
// header and copies the source's pass-through tensors into it. finish() checks that the ranks wrote
// every element of the model exactly as many times as it has elements, then rank 0 writes the index,
// config.json and the side files and swaps the temporary directory in: a failure or a kill leaves
// no half export under the final name (io/dir_swap.h).
//
// The ranks must see one file system (as training checkpoints already need). The bytes equal
// save_hf_checkpoint's of the gathered table, whatever the layout and the number of ranks.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/peak_rss.h"
#include "base/progress.h"
#include "comm/comm.h"
#include "io/checkpoint_dir.h"
#include "io/hf_export.h"
#include "io/hf_part_rows.h"
#include "ops/device_context.h"

namespace quill {

// Host memory a rank holds for the export beyond what it already holds (its share of the model):
// converted bytes waiting for one pwrite, and fp32 values a source stages at once (a device-to-host
// copy, a checkpoint read). `quill plan` counts their sum per rank (plan/memory_plan.h).
inline constexpr int64_t kHfExportStageBytes = int64_t{16} << 20;
inline constexpr int64_t kHfExportFetchBytes = int64_t{16} << 20;
inline constexpr int64_t kHfExportBufferBytes = kHfExportStageBytes + kHfExportFetchBytes;

class StreamedHfWriter {
 public:
  // Collective over `world` (null: one process): creates the files. out_dir is replaced at finish().
  StreamedHfWriter(const HfExportPlan& plan, const std::string& out_dir, const InklingConfig& config, Comm* world,
                   const DeviceContext& ctx, bool show_progress = false);
  ~StreamedHfWriter();
  StreamedHfWriter(const StreamedHfWriter&) = delete;
  StreamedHfWriter& operator=(const StreamedHfWriter&) = delete;

  // The whole model's parameters (global shapes, no values), in table order; write() indexes them.
  const std::vector<Param>& params() const { return params_; }
  // The index of a parameter by name; throws naming `what` and the tensor when the model has none.
  size_t param_index(const std::string& name, const std::string& what) const;
  // This rank's share in elements, for the progress line's total (optional).
  void expect(int64_t elements) { expected_ = elements; }
  // Elements [begin, begin + n) of params()[param], flattened, from fp32 host memory.
  void write(size_t param, int64_t begin, const float* values, int64_t n);
  // Collective: flushes and syncs this rank's writes, checks the ranks' element count, writes the
  // index, config.json and side files and puts the export in place. Returns what was written.
  SaveReport finish();

 private:
  struct Placement {
    std::unique_ptr<PartRowIndex> rows;
    std::vector<size_t> items;  // per checkpoint part: its tensor's index in the file plan
    DType dtype = DType::F32;
  };
  void barrier();
  void create_my_files();
  int fd(size_t file);
  void stage(size_t file, uint64_t offset, const float* values, int64_t n, DType dtype);
  void flush();
  void sync_and_close();

  PhasePeak peak_;  // first: the plan's own memory counts too
  HfExportPlan plan_;
  Comm* world_;
  DeviceContext ctx_;
  int rank_ = 0, size_ = 1;
  std::string out_, tmp_;
  std::vector<Param> params_;
  std::map<std::string, size_t> by_name_;
  HfTensorList list_;
  CheckpointShards shards_;
  std::vector<std::string> headers_;     // per file: the 8-byte length and the header, as written at 0
  std::vector<uint64_t> file_bytes_;     // per file
  std::vector<size_t> item_file_;        // per tensor: its file
  std::vector<uint64_t> item_offset_;    // per tensor: where its bytes start in its file
  std::vector<Placement> placement_;     // per parameter
  std::vector<int> fds_;                 // per file: this rank's descriptor, -1 until used
  // The staging buffer: converted bytes bound for [pending_offset_, + size) of pending_file_.
  std::vector<char> pending_;
  size_t pending_file_ = 0;
  uint64_t pending_offset_ = 0;
  int64_t written_elements_ = 0, expected_ = 0;
  uint64_t written_bytes_ = 0;
  std::unique_ptr<Progress> progress_;
  bool finished_ = false;
};

}  // namespace quill
