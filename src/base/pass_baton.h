// Two passes that take turns on the host, switching where they yield: the mechanism of the combined
// 1F1B step (--overlap-moe-expert-parallel-comm, docs/decisions/combined-1f1b.md), where the forward of one
// micro-batch and the backward of another run interleaved so that each one's token exchanges travel while
// the other computes.
//
// run(first, second) runs `first` on the calling thread and `second` on a thread of its own. Exactly one of
// them runs at any time: `first` runs until it calls yield(), then `second` runs until it yields or ends,
// then `first` resumes, and so on; a pass that ends hands the turn over for good, after which the other's
// yields return at once. So where they switch is fixed by where they yield, and the order of everything
// they do (work enqueued on a GPU stream, collectives called, gradients accumulated) is the same on every
// run and on every rank: deterministic, unlike two threads that run at will. (Each hand-over is a mutex
// and condition variable, so all of one pass's memory writes happen before the other resumes.)
//
// Errors: a pass that throws ends; the other pass is told at its next yield(), which throws PassAborted so
// that it unwinds too, and run() rethrows the first error once both ended. (A pass blocked in a collective
// whose peers will never join stays there: the communicators' watchdog ends the job, naming the group.)
// yield() outside run(), or from a thread that is not one of the two passes, does nothing.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace quill {

struct PassAborted : std::runtime_error {
  PassAborted() : std::runtime_error("the other pass of a combined step failed") {}
};

class PassBaton {
 public:
  PassBaton() = default;
  PassBaton(const PassBaton&) = delete;
  PassBaton& operator=(const PassBaton&) = delete;

  // `thread_setup` runs first on the second pass's thread (binding it to the device, for example).
  void run(const std::function<void()>& first, const std::function<void()>& second,
           const std::function<void()>& thread_setup = {});
  void yield();
  // Hand-overs in the last run() (a test's way to see that the passes interleaved).
  int switches() const { return switches_; }

 private:
  void wait_for_turn(std::unique_lock<std::mutex>& lock, int me);
  void end_pass(int me, std::exception_ptr error);

  std::mutex mutex_;
  std::condition_variable turn_changed_;
  bool running_ = false;
  int turn_ = 0;               // which pass may run: 0 (first) or 1 (second)
  bool ended_[2] = {false, false};
  std::exception_ptr error_;   // the first error
  std::thread::id thread_[2];
  int switches_ = 0;
};

}  // namespace quill
