#include "ops/comm_profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>

namespace quill {

std::vector<CommProfileRow> comm_profile_rows(const std::vector<CommSpanTimes>& spans, const BusyTimeline& compute) {
  std::map<std::tuple<std::string, std::string, std::string>, CommProfileRow> by;
  for (const CommSpanTimes& s : spans) {
    const std::string label = s.label.empty() ? "(outside ops)" : s.label;
    CommProfileRow& r = by[{label, s.info.group, s.info.op}];
    if (r.calls == 0) {
      r.label = label;
      r.group = s.info.group;
      r.op = s.info.op;
      r.group_size = s.info.group_size;
    }
    ++r.calls;
    r.payload_bytes += static_cast<double>(s.info.payload_bytes);
    r.bus_bytes += static_cast<double>(s.info.bus_bytes);
    const double ms = std::max(0.0, s.end_ms - s.begin_ms);
    r.comm_ms += ms;
    r.hidden_ms += compute.covered({s.begin_ms, s.end_ms});
  }
  std::vector<CommProfileRow> rows;
  for (auto& kv : by) rows.push_back(std::move(kv.second));
  std::stable_sort(rows.begin(), rows.end(),
                   [](const CommProfileRow& a, const CommProfileRow& b) { return a.comm_ms > b.comm_ms; });
  return rows;
}

std::string comm_profile_table(const std::vector<CommProfileRow>& rows, double step_ms) {
  if (rows.empty()) return "";
  std::string out =
      "\ncollectives on their communication streams: comm ms from each operation's start on its stream to its end "
      "(waiting for peers included); bus GB/s as nccl-tests counts it; hidden: the part while the compute stream ran "
      "other ops\n";
  out += fmt::format("{:<32} {:<10} {:<15} {:>6} {:>11} {:>9} {:>6} {:>9} {:>9} {:>8}\n", "label", "group(p)", "op", "calls",
                     "MB/call", "comm ms", "% step", "bus GB/s", "hidden ms", "hidden %");
  for (const CommProfileRow& r : rows) {
    out += fmt::format("{:<32} {:<10} {:<15} {:>6} {:>11.3f} {:>9.3f} {:>6.2f} {:>9.1f} {:>9.3f} {:>8.1f}\n", r.label,
                       fmt::format("{}({})", r.group, r.group_size), r.op, r.calls, r.payload_bytes / r.calls / 1e6,
                       r.comm_ms, step_ms > 0 ? 100 * r.comm_ms / step_ms : 0.0, r.bus_gbps(), r.hidden_ms,
                       r.comm_ms > 0 ? 100 * r.hidden_ms / r.comm_ms : 0.0);
  }
  return out;
}

std::string comm_profile_json(const std::vector<CommProfileRow>& rows) {
  std::string out = "[";
  for (size_t i = 0; i < rows.size(); ++i) {
    const CommProfileRow& r = rows[i];
    // Labels, groups and ops are quill's own identifiers (no quotes or control characters).
    out += fmt::format(
        "{}\n  {{\"label\": \"{}\", \"group\": \"{}\", \"op\": \"{}\", \"group_size\": {}, \"calls\": {}, "
        "\"payload_bytes\": {:.0f}, \"bus_bytes\": {:.0f}, \"comm_ms\": {:.6f}, \"hidden_ms\": {:.6f}, \"bus_gbps\": {:.4f}}}",
        i ? "," : "", r.label, r.group, r.op, r.group_size, r.calls, r.payload_bytes, r.bus_bytes, r.comm_ms, r.hidden_ms,
        r.bus_gbps());
  }
  return out + (rows.empty() ? "]" : "\n ]");
}

}  // namespace quill
