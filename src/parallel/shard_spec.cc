#include "parallel/shard_spec.h"

#include <fmt/format.h>

#include "base/error.h"

namespace quill {

ShardSpec make_shard_spec(const std::string& name, const Shape& global, const ShardRule& rule, const LayoutSpec& sizes,
                          const GridCoords& coords) {
  ShardSpec s;
  s.rule = rule;
  s.global_shape = s.local_shape = global;
  s.reduce_over = rule.experts ? GroupKind::EDP : GroupKind::DP_CP;
  if (rule.experts) {
    QUILL_CHECK(!global.empty() && global[0] % sizes.ep == 0,
                "--expert-model-parallel-size {} does not divide the {} routed experts of {}", sizes.ep,
                global.empty() ? 0 : global[0], name);
    const int64_t per = global[0] / sizes.ep;
    s.expert_begin = coords.ep * per;
    s.expert_end = s.expert_begin + per;
    s.local_shape[0] = per;
  } else if (!global.empty()) {
    s.expert_end = global[0];
  }
  const int ranks = rule.experts ? sizes.etp : sizes.tp, rank = rule.experts ? coords.etp : coords.tp;
  const char* flag = rule.experts ? "--expert-tensor-parallel-size" : "--tensor-model-parallel-size";
  if (rule.tp_dim < 0) {
    s.tp_replicated = !rule.experts;  // routed experts are spread over ranks, never copies
    s.sum_grad_over_tp = s.tp_replicated && sizes.tp > 1 && (sizes.sequence_parallel || !rule.sequence_region);
    return s;
  }
  QUILL_CHECK(rule.tp_dim < static_cast<int>(global.size()), "{}: split dimension {} of a {}-dimensional tensor", name,
              rule.tp_dim, global.size());
  const int64_t n = global[static_cast<size_t>(rule.tp_dim)], half = rule.gate_up ? n / 2 : n;
  QUILL_CHECK(!rule.gate_up || n % 2 == 0, "{}: gate/up dimension {} of size {} is odd", name, rule.tp_dim, n);
  QUILL_CHECK(half % (rule.unit * ranks) == 0,
              "{} {} does not divide {} dimension {} ({} {} of {}): each rank needs whole ones", flag, ranks, name,
              rule.tp_dim, half / rule.unit, rule.unit == 1 ? "rows" : "heads", rule.unit);
  const int64_t per = half / ranks;
  s.tp_begin = rank * per;
  s.tp_end = s.tp_begin + per;
  s.local_shape[static_cast<size_t>(rule.tp_dim)] = rule.gate_up ? 2 * per : per;
  s.tp_replicated = !rule.experts && ranks == 1;  // routed experts are spread over ranks, never copies
  return s;
}

bool canonical_holder(const ShardSpec& spec, const GridCoords& c) {
  if (spec.rule.experts) return c.edp == 0;
  return c.dp == 0 && c.cp == 0 && (!spec.tp_replicated || c.tp == 0);
}

std::vector<SliceRun> slice_runs(const ShardSpec& s) {
  const Shape& g = s.global_shape;
  const int nd = static_cast<int>(g.size());
  if (nd == 0 || s.whole()) return {{0, 0, shape_numel(s.local_shape)}};
  // Row-major strides of the global tensor.
  std::vector<int64_t> stride(static_cast<size_t>(nd), 1);
  for (int d = nd - 2; d >= 0; --d) stride[static_cast<size_t>(d)] = stride[static_cast<size_t>(d) + 1] * g[static_cast<size_t>(d) + 1];
  // The ranges this rank holds on each dimension: experts on 0, the tensor-parallel rows on tp_dim
  // (two ranges with gate_up), everything elsewhere.
  std::vector<std::vector<std::pair<int64_t, int64_t>>> ranges(static_cast<size_t>(nd));
  for (int d = 0; d < nd; ++d) ranges[static_cast<size_t>(d)] = {{0, g[static_cast<size_t>(d)]}};
  if (s.rule.experts) ranges[0] = {{s.expert_begin, s.expert_end}};
  if (s.rule.tp_dim >= 0) {
    const size_t d = static_cast<size_t>(s.rule.tp_dim);
    const int64_t half = g[d] / 2;
    ranges[d] = s.rule.gate_up ? std::vector<std::pair<int64_t, int64_t>>{{s.tp_begin, s.tp_end}, {half + s.tp_begin, half + s.tp_end}}
                               : std::vector<std::pair<int64_t, int64_t>>{{s.tp_begin, s.tp_end}};
  }
  // The innermost dimension that is not whole ends the runs: everything after it is contiguous.
  int last = nd - 1;
  while (last > 0 && ranges[static_cast<size_t>(last)].size() == 1 && ranges[static_cast<size_t>(last)][0].first == 0 &&
         ranges[static_cast<size_t>(last)][0].second == g[static_cast<size_t>(last)])
    --last;
  std::vector<SliceRun> runs;
  int64_t local = 0;
  // Walk the index space of dimensions [0, last] in order; each index tuple of [0, last) times a
  // range of `last` is one run (scaled by the contiguous tail).
  const int64_t tail = stride[static_cast<size_t>(last)];
  std::vector<size_t> which(static_cast<size_t>(last), 0);  // which range per outer dimension
  std::vector<int64_t> at(static_cast<size_t>(last), 0);    // index within it
  for (int d = 0; d < last; ++d) at[static_cast<size_t>(d)] = ranges[static_cast<size_t>(d)][0].first;
  while (true) {
    int64_t base = 0;
    for (int d = 0; d < last; ++d) base += at[static_cast<size_t>(d)] * stride[static_cast<size_t>(d)];
    for (const auto& [b, e] : ranges[static_cast<size_t>(last)]) {
      const int64_t len = (e - b) * tail;
      if (!runs.empty() && runs.back().global_offset + runs.back().length == base + b * tail)
        runs.back().length += len;  // contiguous with the previous run
      else
        runs.push_back({base + b * tail, local, len});
      local += len;
    }
    int d = last - 1;  // next index tuple, last outer dimension fastest
    for (; d >= 0; --d) {
      const size_t u = static_cast<size_t>(d);
      if (++at[u] < ranges[u][which[u]].second) break;
      if (++which[u] < ranges[u].size()) {
        at[u] = ranges[u][which[u]].first;
        break;
      }
      which[u] = 0;
      at[u] = ranges[u][0].first;
    }
    if (d < 0) break;
  }
  return runs;
}

RowMap row_map(const ShardSpec& s) {
  RowMap m;
  const Shape& g = s.global_shape;
  const int64_t cols = g.empty() ? 1 : g.back(), rows = cols > 0 ? shape_numel(g) / cols : 0;
  const int64_t local_cols = s.local_shape.empty() ? 1 : s.local_shape.back();
  m.local_row.assign(static_cast<size_t>(rows), -1);
  // Columns: split only when the tensor-parallel dimension is the last one.
  const bool split_cols = s.rule.tp_dim >= 0 && s.rule.tp_dim == static_cast<int>(g.size()) - 1;
  m.col_begin = split_cols ? s.tp_begin : 0;
  m.col_end = split_cols ? s.tp_end : cols;
  // Every run covers whole local rows (a run ends where a held column range ends), so a run's first
  // element names its global row and the local row it starts.
  for (const SliceRun& r : slice_runs(s)) {
    for (int64_t at = 0; at < r.length; at += local_cols) {
      const int64_t global = r.global_offset + at, local = r.local_offset + at;
      m.local_row[static_cast<size_t>(global / cols)] = local / local_cols;
    }
  }
  return m;
}

}  // namespace quill
