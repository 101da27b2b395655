#include "data/rows_check.h"

#include <algorithm>
#include <exception>
#include <filesystem>
#include <thread>

#include "base/error.h"
#include "base/thread_pool.h"

namespace quill {

void check_rows_for_training(const RowsReader& rows, const RowsCheckOptions& o) {
  const std::string rows_path = (std::filesystem::path(rows.dir()) / kRowsFile).string();
  QUILL_CHECK(rows.rows() > 0, "{}: holds 0 rows: nothing to train on", rows_path);

  // The hash on a thread of its own, overlapping the range checks.
  std::string hash;
  std::exception_ptr hash_error;
  std::thread hasher;
  if (o.verify_sha256) {
    hasher = std::thread([&] {
      try {
        hash = rows.compute_rows_sha256();
      } catch (...) {
        hash_error = std::current_exception();
      }
    });
  }
  const int64_t T = rows.row_tokens();
  const int64_t rows_per_chunk = std::max<int64_t>(1, (int64_t{1} << 22) / T);  // about 16 MB of ids a chunk
  const size_t chunks = static_cast<size_t>((rows.rows() + rows_per_chunk - 1) / rows_per_chunk);
  const uint32_t limit = static_cast<uint32_t>(o.vocab_size);
  try {
    // The exception of the smallest chunk wins, so the message names the first bad row.
    parallel_for(chunks, o.threads, [&](size_t c) {
      const int64_t begin = static_cast<int64_t>(c) * rows_per_chunk, end = std::min(rows.rows(), begin + rows_per_chunk);
      for (int64_t r = begin; r < end; ++r) {
        const uint32_t* t = rows.tokens(r);
        const uint8_t* m = rows.mask(r);
        uint32_t top = 0;
        uint8_t mask_top = 0;
        for (int64_t i = 0; i < T; ++i) top = std::max(top, t[i]), mask_top = std::max(mask_top, m[i]);
        if (top < limit && mask_top <= 1) continue;
        for (int64_t i = 0; i < T; ++i) {
          QUILL_CHECK(t[i] < limit, "{}: row {} position {} has token id {}, outside {} (ids 0 to {})", rows_path, r, i,
                      t[i], o.vocab_note, o.vocab_size - 1);
          QUILL_CHECK(m[i] <= 1, "{}: row {} mask[{}] is {}, expected 0 or 1", rows_path, r, i, m[i]);
        }
      }
    });
  } catch (...) {
    if (hasher.joinable()) hasher.join();
    throw;
  }
  if (!o.verify_sha256) return;
  hasher.join();
  if (hash_error) std::rethrow_exception(hash_error);
  const std::string want = rows.manifest().value("rows_sha256", "");
  QUILL_CHECK(hash == want,
              "{}: rows_sha256 is {}, but {} hashes to {}: the rows changed after they were built (corruption, or "
              "another build's manifest); rebuild them, or pass --no-verify-rows to train on them anyway",
              (std::filesystem::path(rows.dir()) / kManifestFile).string(), want, rows_path, hash);
}

}  // namespace quill
