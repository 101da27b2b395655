#include "base/pass_baton.h"

#include <utility>

#include "base/error.h"

namespace quill {

void PassBaton::wait_for_turn(std::unique_lock<std::mutex>& lock, int me) {
  turn_changed_.wait(lock, [&] { return turn_ == me || ended_[1 - me]; });
  turn_ = me;
}

void PassBaton::end_pass(int me, std::exception_ptr error) {
  std::lock_guard<std::mutex> lock(mutex_);
  ended_[me] = true;
  if (error && !error_) error_ = std::move(error);
  turn_ = 1 - me;
  turn_changed_.notify_all();
}

void PassBaton::run(const std::function<void()>& first, const std::function<void()>& second,
                    const std::function<void()>& thread_setup) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    QUILL_CHECK(!running_, "PassBaton::run: already running (a combined step inside another)");
    running_ = true;
    turn_ = 0;
    ended_[0] = ended_[1] = false;
    error_ = nullptr;
    switches_ = 0;
    thread_[0] = std::this_thread::get_id();
  }
  std::thread other([&] {
    std::exception_ptr error;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      thread_[1] = std::this_thread::get_id();
      wait_for_turn(lock, 1);
      if (error_) error = std::make_exception_ptr(PassAborted());  // the first pass failed before this one began
    }
    if (!error) try {
      if (thread_setup) thread_setup();
      second();
    } catch (...) {
      error = std::current_exception();
    }
    end_pass(1, error);
  });
  std::exception_ptr error;
  try {
    first();
  } catch (...) {
    error = std::current_exception();
  }
  end_pass(0, error);
  other.join();
  std::exception_ptr first_error;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    running_ = false;
    thread_[0] = thread_[1] = std::thread::id();
    first_error = error_;
  }
  if (first_error) std::rethrow_exception(first_error);
}

void PassBaton::yield() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!running_) return;
  const std::thread::id self = std::this_thread::get_id();
  const int me = self == thread_[0] ? 0 : self == thread_[1] ? 1 : -1;
  if (me < 0) return;
  if (error_) throw PassAborted();
  if (ended_[1 - me]) return;
  turn_ = 1 - me;
  ++switches_;
  turn_changed_.notify_all();
  wait_for_turn(lock, me);
  if (error_) throw PassAborted();
}

}  // namespace quill
