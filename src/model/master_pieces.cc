#include "model/master_pieces.h"

#include <algorithm>
#include <utility>

namespace quill {

std::vector<MasterPiece> master_pieces(const ParamTable& params, bool replicas) {
  std::vector<MasterPiece> out;
  for (size_t bi = 0; bi < params.buckets().size(); ++bi) {
    const ParamBucket& b = params.buckets()[bi];
    if (!b.counts_in_norm && !replicas) continue;
    for (size_t i : b.members) {
      const Param& p = params.params()[i];
      const int64_t o = p.bucket_offset;
      const int64_t lb = std::max(o, b.shard_begin) - o, le = std::min(o + shape_numel(p.shape), b.shard_end) - o;
      if (lb >= le) continue;
      const int64_t cut = b.shard_begin + b.offload_end - o;
      for (const SliceRun& r : slice_runs(p.shard)) {
        const int64_t from = std::max(lb, r.local_offset), to = std::min(le, r.local_offset + r.length);
        for (const auto& [f, t] : {std::pair{from, std::min(to, cut)}, std::pair{std::max(from, cut), to}})
          if (f < t)
            out.push_back({i, bi, r.global_offset + (f - r.local_offset), r.global_offset + (t - r.local_offset),
                           o + f - b.shard_begin});
      }
    }
  }
  return out;
}

}  // namespace quill
