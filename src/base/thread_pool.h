// Plain parallel loops (the data build, the CPU optimizer): worker threads take indices from an atomic counter.
// Results are written by index, so the output never depends on the thread count.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace quill {

// The number of threads "all cores" means here (std::thread::hardware_concurrency, at least 1).
int hardware_threads();

// A fixed set of worker threads reused by every loop it runs (their thread-local state, such as
// the tokenizer's piece cache and PCRE2 match data, stays warm from one batch to the next).
class ThreadPool {
 public:
  // threads <= 0: hardware_threads(). The calling thread is one of them.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }
  // Calls fn(i) for every i in [0, n). If calls throw, the exception of the smallest index is
  // rethrown after all threads stop; indices not yet started are then skipped.
  void parallel_for(size_t n, const std::function<void(size_t)>& fn);

 private:
  void work();
  void worker_loop();

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  const std::function<void(size_t)>* fn_ = nullptr;
  size_t n_ = 0, next_ = 0, error_index_ = 0;
  uint64_t generation_ = 0;
  int busy_ = 0;
  bool stop_ = false, failed_ = false;
  std::exception_ptr error_;
};

// One loop on a pool of `threads` made for it.
void parallel_for(size_t n, int threads, const std::function<void(size_t)>& fn);

// The process-wide pool of `threads` threads for as long as this lives, so that repeated calls
// (encode_parallel, bench-encode's timed runs) find workers whose thread-local tokenizer caches are
// warm instead of new threads with cold, freshly allocated ones. When the shared pool is already in
// use (a nested or concurrent caller), a private pool is made instead; a different thread count
// replaces the shared pool.
class SharedThreadPool {
 public:
  explicit SharedThreadPool(int threads);
  SharedThreadPool(const SharedThreadPool&) = delete;
  SharedThreadPool& operator=(const SharedThreadPool&) = delete;
  ThreadPool& pool() { return *pool_; }

 private:
  std::unique_lock<std::mutex> lease_;
  std::unique_ptr<ThreadPool> own_;
  ThreadPool* pool_ = nullptr;
};

}  // namespace quill
