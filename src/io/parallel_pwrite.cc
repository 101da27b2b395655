#include "io/parallel_pwrite.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/error.h"

namespace quill {

namespace {
constexpr size_t kChunkBytes = size_t{64} << 20;  // large enough for sequential device writes
}

int default_write_threads() {
  const unsigned hw = std::thread::hardware_concurrency();
  return static_cast<int>(std::clamp(hw, 1u, 8u));
}

ParallelFileWriter::ParallelFileWriter(int fd, std::string path, int threads, size_t max_inflight_bytes)
    : fd_(fd), path_(std::move(path)), max_inflight_(std::max(max_inflight_bytes, kChunkBytes)) {
  const int n = threads > 0 ? threads : default_write_threads();
  for (int i = 0; i < n; ++i) workers_.emplace_back([this] { work(); });
}

ParallelFileWriter::~ParallelFileWriter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  has_work_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ParallelFileWriter::write(uint64_t offset, const void* data, size_t n, std::shared_ptr<const void> keep) {
  const char* p = static_cast<const char*>(data);
  for (size_t done = 0; done < n;) {
    const size_t len = std::min(kChunkBytes, n - done);
    std::unique_lock<std::mutex> lock(mu_);
    has_room_.wait(lock, [&] { return inflight_ + len <= max_inflight_ || inflight_ == 0 || error_; });
    if (error_) return;  // finish() reports it
    queue_.push_back({offset + done, p + done, len, keep});
    inflight_ += len;
    lock.unlock();
    has_work_.notify_one();
    done += len;
  }
}

void ParallelFileWriter::work() {
  for (;;) {
    Chunk c;
    {
      std::unique_lock<std::mutex> lock(mu_);
      has_work_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      c = std::move(queue_.front());
      queue_.pop_front();
    }
    std::exception_ptr failure;
    size_t done = 0;
    while (done < c.n && !failure) {
      const ssize_t w = ::pwrite(fd_, c.data + done, c.n - done, static_cast<off_t>(c.offset + done));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        const int err = w < 0 ? errno : EIO;
        try {
          QUILL_FAIL("{}: write failed ({})", path_, std::strerror(err));
        } catch (...) {
          failure = std::current_exception();
        }
        break;
      }
      done += static_cast<size_t>(w);
    }
    c.keep.reset();
    {
      std::lock_guard<std::mutex> lock(mu_);
      inflight_ -= c.n;
      if (failure && !error_) error_ = failure;
      if (error_) {  // what is still queued will not be written
        for (const Chunk& q : queue_) inflight_ -= q.n;
        queue_.clear();
      }
    }
    has_room_.notify_all();
    idle_.notify_all();
  }
}

void ParallelFileWriter::finish() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [&] { return inflight_ == 0; });
  if (error_) std::rethrow_exception(error_);
}

}  // namespace quill
