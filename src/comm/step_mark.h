// StepMark: which training step a job is in, so that a collective that times out can say when it
// hung ("during step 3") beside the communicator it hung on. One per job, shared through
// CommOptions::step_mark by the world communicator and every communicator split from it; the
// trainer moves it at each step's start and end (TrainOptions::step_mark). Read by the NCCL
// watchdog's thread too, so the state is one atomic word.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include <fmt/format.h>

namespace quill {

class StepMark {
 public:
  void begin(int64_t step) { state_.store(2 * step + 1); }
  void end(int64_t step) { state_.store(2 * step + 2); }
  // "during step 3", "after step 3" (its checkpoint, export, closing exchanges), "before the first
  // step" (set-up, loading, resume).
  // Header-only: the layers above comm see comm's headers only, not its library.
  std::string describe() const {
    const int64_t s = state_.load();
    if (s <= 0) return "before the first step";
    return s % 2 == 1 ? fmt::format("during step {}", (s - 1) / 2) : fmt::format("after step {}", (s - 2) / 2);
  }

 private:
  std::atomic<int64_t> state_{0};  // 0: before any step; 2s+1: in step s; 2s+2: after step s
};

}  // namespace quill
