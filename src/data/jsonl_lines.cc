#include "data/jsonl_lines.h"

#include <algorithm>

#include "data/line_ranges.h"

namespace quill {

namespace {

bool blank(std::string_view line) { return line.find_first_not_of(" \t\r") == std::string_view::npos; }

}  // namespace

JsonlLines split_jsonl_lines(std::string_view text, ThreadPool& pool, size_t range_bytes) {
  if (range_bytes == 0) {
    range_bytes = std::max<size_t>(size_t{1} << 20, text.size() / (8 * static_cast<size_t>(pool.threads())) + 1);
  }
  const size_t ranges = std::max<size_t>(1, (text.size() + range_bytes - 1) / range_bytes);
  // Range r holds the lines that start in [r * range_bytes, (r + 1) * range_bytes); their
  // numbers are local (from 0) until the counts of the ranges before are known.
  struct Part {
    std::vector<JsonlLine> lines;
    int64_t count = 0;
  };
  std::vector<Part> parts(ranges);
  pool.parallel_for(ranges, [&](size_t r) {
    auto [pos, end] = line_range(text, range_bytes, r);
    Part& part = parts[r];
    while (pos < end) {
      size_t eol = line_end(text, pos, end);
      std::string_view line = text.substr(pos, eol - pos);
      if (!blank(line)) part.lines.push_back({pos, line.size(), part.count});
      ++part.count;
      pos = eol + 1;
    }
  });
  JsonlLines out;
  std::vector<size_t> first(ranges + 1, 0);
  std::vector<int64_t> number(ranges + 1, 0);
  for (size_t r = 0; r < ranges; ++r) {
    first[r + 1] = first[r] + parts[r].lines.size();
    number[r + 1] = number[r] + parts[r].count;
  }
  out.total = number[ranges];
  out.lines.resize(first[ranges]);
  pool.parallel_for(ranges, [&](size_t r) {
    JsonlLine* dst = out.lines.data() + first[r];
    for (const JsonlLine& l : parts[r].lines) *dst++ = {l.offset, l.length, l.number + number[r] + 1};
    std::vector<JsonlLine>().swap(parts[r].lines);  // freed here, in parallel
  });
  return out;
}

}  // namespace quill
