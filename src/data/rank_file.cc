#include "data/rank_file.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "base/error.h"
#include "data/line_ranges.h"

namespace quill {

namespace {

// Appends the standard base64 (with '=' padding) `in` decodes to; false on any other character.
bool base64_decode_append(std::string_view in, std::string& out) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  while (!in.empty() && in.back() == '=') in.remove_suffix(1);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    int v = value(c);
    if (v < 0) return false;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return true;
}

struct RankLine {
  uint64_t rank;
  int64_t line;         // 1-based within its range
  uint32_t begin, end;  // its bytes in the range's blob
};

// One range's lines, up to its first bad line; the decoded tokens side by side in `blob`.
struct RangeParse {
  std::vector<RankLine> entries;
  std::string blob;
  int64_t lines = 0;      // lines read (all of the range's, unless it stopped at a bad one)
  int64_t bad_line = 0;   // 1-based within the range; 0: none
  const char* what = "";  // the error, after "path:line: "
  bool consecutive = true;  // ranks r, r + 1, r + 2, ... in line order
};

RangeParse parse_range(std::string_view text, size_t begin, size_t end) {
  RangeParse out;
  out.entries.reserve((end - begin) / 12 + 1);  // o200k's lines average 14 bytes
  out.blob.reserve((end - begin) / 2);
  for (size_t pos = begin; pos < end;) {
    size_t eol = line_end(text, pos, end);
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++out.lines;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    auto fail = [&](const char* what) {
      out.bad_line = out.lines;
      out.what = what;
    };
    size_t space = line.find(' ');
    if (space == std::string_view::npos || space == 0) {
      fail("expected \"<base64 token> <rank>\" (is this a tiktoken rank file?)");
      break;
    }
    size_t at = out.blob.size();
    if (!base64_decode_append(line.substr(0, space), out.blob) || out.blob.size() == at) {
      out.blob.resize(at);
      fail("the token is not base64");
      break;
    }
    std::string_view rank_text = line.substr(space + 1);
    if (rank_text.empty() || rank_text.size() > 9 ||
        !std::all_of(rank_text.begin(), rank_text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      out.blob.resize(at);
      fail("the rank is not a number below 10^9");
      break;
    }
    uint64_t rank = 0;
    for (char c : rank_text) rank = rank * 10 + static_cast<uint64_t>(c - '0');
    out.consecutive = out.consecutive && (out.entries.empty() || rank == out.entries.back().rank + 1);
    out.entries.push_back({rank, out.lines, static_cast<uint32_t>(at), static_cast<uint32_t>(out.blob.size())});
  }
  return out;
}

// Any rank order: each token put at its rank in file order, as one thread would, so that a rank
// given twice or a bad line is reported at the first such line.
TokenBytes place_in_file_order(const std::vector<RangeParse>& parts, const std::string& path) {
  std::vector<std::string_view> by_rank;
  int64_t line_base = 0;
  for (const RangeParse& p : parts) {
    for (const RankLine& e : p.entries) {
      if (e.rank >= by_rank.size()) by_rank.resize(e.rank + 1);
      QUILL_CHECK(by_rank[e.rank].empty(), "{}:{}: rank {} appears twice", path, line_base + e.line, e.rank);
      by_rank[e.rank] = std::string_view(p.blob).substr(e.begin, e.end - e.begin);
    }
    QUILL_CHECK(p.bad_line == 0, "{}:{}: {}", path, line_base + p.bad_line, p.what);
    line_base += p.lines;
  }
  QUILL_CHECK(!by_rank.empty(), "{}: no ranks (an empty file?)", path);
  TokenBytes out;
  out.offsets.assign(1, 0);
  for (std::string_view t : by_rank) {
    QUILL_CHECK(out.blob.size() + t.size() <= 0xFFFFFFFFu, "{}: more than 4 GiB of token bytes", path);
    out.blob += t;
    out.offsets.push_back(static_cast<uint32_t>(out.blob.size()));
  }
  return out;
}

}  // namespace

TokenBytes parse_rank_file(std::string_view text, const std::string& path, ThreadPool& pool, size_t range_bytes) {
  if (range_bytes == 0) {
    range_bytes = std::max<size_t>(size_t{64} << 10, text.size() / (4 * static_cast<size_t>(pool.threads())) + 1);
  }
  const size_t ranges = std::max<size_t>(1, (text.size() + range_bytes - 1) / range_bytes);
  std::vector<RangeParse> parts(ranges);
  pool.parallel_for(ranges, [&](size_t r) {
    auto [begin, end] = line_range(text, range_bytes, r);
    parts[r] = parse_range(text, begin, end);
  });
  // The usual file: ranks 0, 1, 2, ... in line order and no bad line. Then each range's blob is
  // already in rank order, and the token table is the blobs side by side: assembled on all
  // threads from prefix sums over the ranges.
  std::vector<uint64_t> first_rank(ranges + 1, 0), first_byte(ranges + 1, 0);
  bool in_order = true;
  for (size_t r = 0; r < ranges && in_order; ++r) {
    const RangeParse& p = parts[r];
    in_order = p.bad_line == 0 && p.consecutive && (p.entries.empty() || p.entries.front().rank == first_rank[r]);
    first_rank[r + 1] = first_rank[r] + p.entries.size();
    first_byte[r + 1] = first_byte[r] + p.blob.size();
  }
  if (!in_order || first_rank[ranges] == 0 || first_byte[ranges] > 0xFFFFFFFFu) return place_in_file_order(parts, path);
  TokenBytes out;
  out.blob.resize(first_byte[ranges]);
  out.offsets.resize(first_rank[ranges] + 1);
  out.offsets[0] = 0;
  pool.parallel_for(ranges, [&](size_t r) {
    const RangeParse& p = parts[r];
    std::memcpy(out.blob.data() + first_byte[r], p.blob.data(), p.blob.size());
    for (size_t i = 0; i < p.entries.size(); ++i) {
      out.offsets[first_rank[r] + i + 1] = static_cast<uint32_t>(first_byte[r] + p.entries[i].end);
    }
  });
  return out;
}

}  // namespace quill
