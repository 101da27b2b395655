#include "model/offload_split.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "base/error.h"

namespace quill {

std::vector<int64_t> offload_split(const std::vector<int64_t>& shard_sizes, double fraction) {
  QUILL_CHECK(fraction >= 0 && fraction <= 1, "offload fraction {} is not in [0, 1]", fraction);
  std::vector<int64_t> out;
  for (int64_t n : shard_sizes) {
    QUILL_CHECK(n >= 0, "offload_split: negative shard size {}", n);
    if (fraction >= 1) {
      out.push_back(n);
      continue;
    }
    const double blocks = std::round(fraction * static_cast<double>(n) / static_cast<double>(kOffloadAlign));
    out.push_back(std::min(n, static_cast<int64_t>(blocks) * kOffloadAlign));
  }
  return out;
}

std::vector<std::string> describe_offload(const ParamTable& table) {
  std::vector<std::string> lines;
  int64_t host = 0, all = 0;
  for (size_t bi = 0; bi < table.buckets().size(); ++bi) {
    const ParamBucket& b = table.buckets()[bi];
    const int64_t shard = b.shard_end - b.shard_begin;
    all += shard;
    host += b.offload_end;
    if (b.offload_end == 0) continue;
    // The members the offloaded range [shard_begin, shard_begin + offload_end) touches.
    const int64_t lo = b.shard_begin, hi = b.shard_begin + b.offload_end;
    std::vector<std::string> names;
    for (size_t i : b.members) {
      const Param& p = table.params()[i];
      const int64_t o = p.bucket_offset, e = o + shape_numel(p.shape);
      if (std::max(o, lo) >= std::min(e, hi)) continue;
      const bool whole = o >= lo && e <= hi;
      names.push_back(whole ? p.name : p.name + " (part)");
    }
    lines.push_back(fmt::format("bucket {} ({}, {}): shard elements [0, {}) of {} on the host, {} parameter{}{}", bi,
                                b.group, dtype_name(b.compute_dtype), b.offload_end, shard, names.size(),
                                names.size() == 1 ? "" : "s",
                                names.empty() ? std::string()
                                : names.size() == 1 ? ": " + names.front()
                                                    : ": " + names.front() + " ... " + names.back()));
  }
  lines.insert(lines.begin(), fmt::format("optimizer offload: {} of {} state elements on the host ({:.1f}%)", host, all,
                                          all > 0 ? 100.0 * static_cast<double>(host) / static_cast<double>(all) : 0.0));
  return lines;
}

}  // namespace quill
