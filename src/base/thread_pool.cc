#include "base/thread_pool.h"

#include <algorithm>
#include <exception>
#include <limits>

namespace quill {

int hardware_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = hardware_threads();
  for (int t = 1; t < threads; ++t) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

// Takes indices until none are left (or a call failed).
void ThreadPool::work() {
  while (true) {
    size_t i;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (failed_ || next_ >= n_) return;
      i = next_++;
    }
    try {
      (*fn_)(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!failed_ || i < error_index_) {
        error_index_ = i;
        error_ = std::current_exception();
      }
      failed_ = true;
    }
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      ++busy_;
    }
    work();
    {
      std::lock_guard<std::mutex> lock(mu_);
      --busy_;
    }
    done_.notify_all();
  }
}

void ThreadPool::parallel_for(size_t n, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  if (workers_.empty() || n == 1) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    next_ = 0;
    failed_ = false;
    error_ = nullptr;
    ++generation_;
  }
  wake_.notify_all();
  work();
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mu_);
    // Every index is taken once next_ reaches n_ (or a failure stopped the taking); then wait
    // for the calls in flight.
    done_.wait(lock, [&] { return (next_ >= n_ || failed_) && busy_ == 0; });
    fn_ = nullptr;
    n_ = 0;
    error = error_;
    error_ = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

void parallel_for(size_t n, int threads, const std::function<void(size_t)>& fn) {
  if (threads <= 0) threads = hardware_threads();
  threads = static_cast<int>(std::min<size_t>(static_cast<size_t>(threads), std::max<size_t>(n, 1)));
  ThreadPool pool(threads);
  pool.parallel_for(n, fn);
}

namespace {
std::mutex& shared_pool_mutex() {
  static std::mutex mu;
  return mu;
}
std::unique_ptr<ThreadPool>& shared_pool() {
  static std::unique_ptr<ThreadPool> pool;  // joined at exit, after its last lease
  return pool;
}
}  // namespace

SharedThreadPool::SharedThreadPool(int threads) : lease_(shared_pool_mutex(), std::try_to_lock) {
  if (threads <= 0) threads = hardware_threads();
  if (!lease_.owns_lock()) {
    own_ = std::make_unique<ThreadPool>(threads);
    pool_ = own_.get();
    return;
  }
  std::unique_ptr<ThreadPool>& shared = shared_pool();
  if (!shared || shared->threads() != threads) {
    shared.reset();
    shared = std::make_unique<ThreadPool>(threads);
  }
  pool_ = shared.get();
}

}  // namespace quill
