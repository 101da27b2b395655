// The Hugging Face export of a running layout, streamed (io/streamed_hf_writer.h): each rank writes
// the fp32 masters it owns (its shard of every bucket, model/master_pieces.h) and the frozen tensors
// and buffers it canonically holds, straight into the export's files; nothing is gathered. A rank
// holds beyond its share only the writer's buffers (kHfExportBufferBytes; with the masters on a GPU,
// their device-to-host copies pass through one of them).
#pragma once

#include <string>

#include "io/hf_export.h"
#include "model/params.h"
#include "ops/device_context.h"
#include "parallel/layout.h"

namespace quill {

// Collective over the layout's world. The plan must be the same on every rank (plan_hf_export of the
// same config, sources and options). The files equal write_hf_export's of the gathered table.
SaveReport export_hf_streamed(const HfExportPlan& plan, const std::string& out_dir, const ParamTable& params,
                              const InklingConfig& config, const DeviceContext& ctx, const Layout& layout,
                              bool show_progress = false);

// "host memory added during the export (VmHWM over VmRSS before, per rank, MiB): 1.2 0.9 ... (max X,
// rank R)", or that it was not measured.
std::string export_memory_note(const SaveReport& report);

}  // namespace quill
