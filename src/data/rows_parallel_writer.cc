#include "data/rows_parallel_writer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

#include "base/error.h"
#include "base/file_util.h"

namespace quill {

namespace {

void pwrite_all(int fd, const void* data, size_t n, uint64_t offset, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(offset));
    if (w < 0 && errno == EINTR) continue;
    QUILL_CHECK(w > 0, "{}: write failed ({})", path, w < 0 ? std::strerror(errno) : "no progress");
    p += w;
    n -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
}

int create(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  QUILL_CHECK(fd >= 0, "{}: cannot create ({})", path, std::strerror(errno));
  return fd;
}

}  // namespace

ParallelRowsWriter::ParallelRowsWriter(const std::string& out_dir, int64_t row_tokens)
    : dir_(out_dir), row_tokens_(row_tokens) {
  QUILL_CHECK(row_tokens > 0 && row_tokens <= std::numeric_limits<uint32_t>::max(),
              "{}: row_tokens must be in [1, 2^32), got {}", out_dir, row_tokens);
  make_dirs(out_dir);
  std::string rows_path = (std::filesystem::path(out_dir) / kRowsFile).string();
  std::string suffix = ".tmp." + std::to_string(::getpid());
  tokens_tmp_ = rows_path + suffix;
  mask_tmp_ = rows_path + ".mask" + suffix;
  tokens_fd_ = create(tokens_tmp_);
  try {
    mask_fd_ = create(mask_tmp_);
  } catch (...) {
    ::close(tokens_fd_);
    std::remove(tokens_tmp_.c_str());
    throw;
  }
}

ParallelRowsWriter::~ParallelRowsWriter() {
  if (tokens_fd_ >= 0) ::close(tokens_fd_);
  if (mask_fd_ >= 0) ::close(mask_fd_);
  if (!finished_) {
    std::remove(tokens_tmp_.c_str());
    std::remove(mask_tmp_.c_str());
  }
}

void ParallelRowsWriter::write(int64_t first, int64_t count, const uint32_t* tokens, const uint8_t* mask) {
  QUILL_CHECK(!finished_ && first >= 0 && count >= 0, "{}: write of rows {}+{} after finish or out of range", dir_, first,
              count);
  const uint64_t T = static_cast<uint64_t>(row_tokens_), r = static_cast<uint64_t>(first), n = static_cast<uint64_t>(count);
  pwrite_all(tokens_fd_, tokens, 4 * T * n, kRowsHeaderBytes + 4 * T * r, tokens_tmp_);
  pwrite_all(mask_fd_, mask, T * n, T * r, mask_tmp_);
}

void ParallelRowsWriter::start_writeback(int64_t first, int64_t count) {
  const uint64_t T = static_cast<uint64_t>(row_tokens_);
  // Errors only mean no head start: finish()'s fsync does the writing either way.
  (void)::sync_file_range(tokens_fd_, static_cast<off_t>(kRowsHeaderBytes + 4 * T * static_cast<uint64_t>(first)),
                          static_cast<off_t>(4 * T * static_cast<uint64_t>(count)), SYNC_FILE_RANGE_WRITE);
}

void ParallelRowsWriter::close_file(int64_t rows, BuildTiming* timing) {
  QUILL_CHECK(!finished_ && rows_ < 0 && rows >= 0, "{}: close_file called twice, after install or with {} rows", dir_,
              rows);
  const uint64_t T = static_cast<uint64_t>(row_tokens_), R = static_cast<uint64_t>(rows);
  const uint64_t mask_bytes = R * T, mask_offset = kRowsHeaderBytes + 4 * R * T;

  PhaseTimer copy_timer(timing, "copy mask section + header", true);
  WorkTimer copy_work(timing, BuildTiming::kWrite);
  struct stat st {};
  QUILL_CHECK(::fstat(mask_fd_, &st) == 0, "{}: cannot stat ({})", mask_tmp_, std::strerror(errno));
  QUILL_CHECK(static_cast<uint64_t>(st.st_size) == mask_bytes, "{}: {} mask bytes written, {} rows need {}", mask_tmp_,
              st.st_size, R, mask_bytes);
  copy_masks(mask_bytes, mask_offset);
  std::array<unsigned char, kRowsHeaderBytes> header = rows_header(row_tokens_, rows);
  pwrite_all(tokens_fd_, header.data(), header.size(), 0, tokens_tmp_);
  // Exactly the header and both sections, whatever was written before.
  QUILL_CHECK(::ftruncate(tokens_fd_, static_cast<off_t>(mask_offset + mask_bytes)) == 0, "{}: truncate failed ({})",
              tokens_tmp_, std::strerror(errno));
  copy_work.stop();
  copy_timer.stop();
  {
    PhaseTimer phase(timing, "fsync", true);
    WorkTimer t(timing, BuildTiming::kSync);
    QUILL_CHECK(::fsync(tokens_fd_) == 0, "{}: flush failed ({})", tokens_tmp_, std::strerror(errno));
  }
  ::close(tokens_fd_);
  ::close(mask_fd_);
  tokens_fd_ = mask_fd_ = -1;
  rows_ = rows;
}

void ParallelRowsWriter::copy_masks(uint64_t bytes, uint64_t offset) {
  // In the kernel, page cache to page cache (one writer at a time either way: the file's
  // buffered writes are serialised); read through a map and written where the kernel cannot.
  loff_t in = 0, out = static_cast<loff_t>(offset);
  while (static_cast<uint64_t>(in) < bytes) {
    ssize_t n = ::copy_file_range(mask_fd_, &in, tokens_fd_, &out, bytes - static_cast<uint64_t>(in), 0);
    if (n > 0) continue;
    if (n < 0 && errno == EINTR) continue;
    QUILL_CHECK(n < 0 && (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP),
                "{}: copying the masks failed ({})", tokens_tmp_, n < 0 ? std::strerror(errno) : "no progress");
    void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, mask_fd_, 0);
    QUILL_CHECK(map != MAP_FAILED, "{}: mmap failed ({})", mask_tmp_, std::strerror(errno));
    try {
      pwrite_all(tokens_fd_, static_cast<const char*>(map) + in, bytes - static_cast<uint64_t>(in),
                 offset + static_cast<uint64_t>(in), tokens_tmp_);
    } catch (...) {
      ::munmap(map, bytes);
      throw;
    }
    ::munmap(map, bytes);
    return;
  }
}

nlohmann::json ParallelRowsWriter::install(const RowsSummary& summary, const nlohmann::json& extras) {
  QUILL_CHECK(!finished_ && rows_ >= 0, "{}: install before close_file, or twice", dir_);
  QUILL_CHECK(summary.rows == rows_ && summary.row_tokens == row_tokens_,
              "{}: the summary says {} rows of {} tokens, the file holds {} of {}", dir_, summary.rows,
              summary.row_tokens, rows_, row_tokens_);
  nlohmann::json manifest = rows_manifest(dir_, extras, summary);
  install_rows(dir_, tokens_tmp_, manifest);
  std::remove(mask_tmp_.c_str());
  finished_ = true;
  return manifest;
}

}  // namespace quill
