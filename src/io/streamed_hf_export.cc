#include "io/streamed_hf_export.h"

#include <fmt/format.h>

#include <algorithm>

#include "base/error.h"
#include "io/streamed_hf_writer.h"
#include "model/master_pieces.h"
#include "ops/convert.h"

namespace quill {

namespace {

// An fp32 range this rank writes: elements [begin, begin + values.numel()) of a whole parameter.
struct Share {
  size_t param;
  int64_t begin;
  Tensor values;  // F32, host or device
};

}  // namespace

SaveReport export_hf_streamed(const HfExportPlan& plan, const std::string& out_dir, const ParamTable& params,
                              const InklingConfig& config, const DeviceContext& ctx, const Layout& layout,
                              bool show_progress) {
  StreamedHfWriter writer(plan, out_dir, config, layout.world(), ctx, show_progress);
  std::vector<Share> shares;
  // Trainable tensors: the masters' pieces (one rank each); frozen tensors and buffers: the canonical
  // holder of each slice, as a training checkpoint saves them.
  for (const MasterPiece& pc : master_pieces(params, /*replicas=*/false)) {
    const std::string& name = params.params()[pc.param].name;
    shares.push_back({writer.param_index(name, "export"), pc.begin,
                      params.buckets()[pc.bucket].master_range(pc.at, pc.end - pc.begin)});
  }
  for (const Param& p : params.params()) {
    if (p.trainable || !canonical_holder(p.shard, layout.coords())) continue;
    QUILL_CHECK(p.value.defined(), "export: frozen tensor {} has no value on this rank", p.name);
    for (const SliceRun& r : slice_runs(p.shard))
      shares.push_back({writer.param_index(p.name, "export"), r.global_offset, p.value.view_flat(r.local_offset, {r.length})});
  }
  int64_t mine = 0;
  for (const Share& s : shares) mine += s.values.numel();
  writer.expect(mine);
  Tensor host;  // device values pass through this, kHfExportFetchBytes at a time
  for (const Share& s : shares) {
    QUILL_CHECK(s.values.dtype() == DType::F32, "export: {} holds {}, not fp32 values",
                writer.params()[s.param].name, s.values.describe());
    const int64_t n = s.values.numel();
    if (s.values.device() == Device::CPU) {
      writer.write(s.param, s.begin, s.values.data_as<float>(), n);
      continue;
    }
    const int64_t chunk = kHfExportFetchBytes / static_cast<int64_t>(sizeof(float));
    if (!host.defined()) host = Tensor::empty({chunk}, DType::F32);
    for (int64_t at = 0; at < n; at += chunk) {
      const int64_t m = std::min(chunk, n - at);
      ops::transfer(ctx, s.values.view_flat(at, {m}), host.view_flat(0, {m}));
      writer.write(s.param, s.begin + at, host.data_as<float>(), m);
    }
  }
  return writer.finish();
}

std::string export_memory_note(const SaveReport& report) {
  const std::vector<int64_t>& added = report.host_bytes_added_per_rank;
  if (added.empty() || *std::min_element(added.begin(), added.end()) < 0)
    return "host memory added during the export: not measured (/proc/self/clear_refs could not reset the peak)";
  std::string list;
  for (int64_t b : added) list += fmt::format("{}{:.1f}", list.empty() ? "" : " ", b / 1048576.0);
  const auto top = std::max_element(added.begin(), added.end());
  return fmt::format("host memory added during the export (VmHWM over VmRSS before it, per rank, MiB): {} (max {:.1f} "
                     "MiB, rank {})",
                     list, *top / 1048576.0, top - added.begin());
}

}  // namespace quill
