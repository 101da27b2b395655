#include "comm/standin_clock.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>

namespace quill {

namespace {

using Clock = std::chrono::steady_clock;

class HostHandle final : public CommHandle {
 public:
  explicit HostHandle(Clock::time_point end) : end_(end) {}
  void wait() override { std::this_thread::sleep_until(end_); }

 private:
  Clock::time_point end_;
};

class HostStandInClock final : public StandInClock {
 public:
  std::unique_ptr<CommHandle> occupy(double seconds, const CommSpanInfo&) override {
    std::lock_guard<std::mutex> lock(mu_);
    const Clock::time_point start = std::max(Clock::now(), free_);
    free_ = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(std::max(seconds, 0.0)));
    return std::make_unique<HostHandle>(free_);
  }
  std::shared_ptr<StandInClock> isolated() override { return std::make_shared<HostStandInClock>(); }

 private:
  std::mutex mu_;
  Clock::time_point free_{};
};

}  // namespace

std::shared_ptr<StandInClock> make_host_standin_clock() { return std::make_shared<HostStandInClock>(); }

}  // namespace quill
