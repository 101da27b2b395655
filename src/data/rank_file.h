// Parsing a tiktoken rank file (one "<base64 token> <rank>" per line) on several threads: the
// text is cut into ranges of whole lines (line_ranges.h), each decoded on its own, then the
// tokens are put at their ranks in file order, so an error names the same (first) bad line
// whatever the thread count.
#pragma once

#include <string>
#include <string_view>

#include "data/bpe.h"
#include "base/thread_pool.h"

namespace quill {

// The tokens by rank (ranks missing from the file have no bytes). Errors name `path` and the
// line: not "<base64> <rank>", not base64, a rank that is no number below 10^9, a rank given
// twice; or no ranks at all. range_bytes: the size of the ranges (0: about 4 a thread, at least
// 64 KiB; tests use small ones).
TokenBytes parse_rank_file(std::string_view text, const std::string& path, ThreadPool& pool, size_t range_bytes = 0);

}  // namespace quill
