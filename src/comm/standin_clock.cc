#include "comm/standin_clock.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

namespace quill {

namespace {

using Clock = std::chrono::steady_clock;

// Shared by a clock and its isolated ones: one caller (the rank's host thread) waits on all of them.
struct HostRecorder {
  std::mutex mu;
  Clock::time_point start = Clock::now();
  StandInRecord record;
  double seconds(Clock::time_point t) const { return std::chrono::duration<double>(t - start).count(); }
};

class HostHandle final : public CommHandle {
 public:
  HostHandle(Clock::time_point end, std::shared_ptr<HostRecorder> recorder) : end_(end), recorder_(std::move(recorder)) {}
  void wait() override {
    const Clock::time_point now = Clock::now();
    if (now >= end_) return;
    // A sleep overshoots by the timer's slack and the scheduler's wake-up (~50-100 us on Linux), more than a
    // small collective's modelled latency: sleep to shortly before the end, then spin.
    constexpr auto kSpin = std::chrono::microseconds(200);
    if (end_ - now > kSpin) std::this_thread::sleep_until(end_ - kSpin);
    while (Clock::now() < end_) {
    }
    std::lock_guard<std::mutex> lock(recorder_->mu);
    recorder_->record.waits.emplace_back(recorder_->seconds(now), recorder_->seconds(end_));
  }

 private:
  Clock::time_point end_;
  std::shared_ptr<HostRecorder> recorder_;
};

class HostStandInClock final : public StandInClock {
 public:
  explicit HostStandInClock(std::shared_ptr<HostRecorder> recorder) : recorder_(std::move(recorder)) {}
  std::unique_ptr<CommHandle> occupy(double seconds, const CommSpanInfo& info) override {
    std::lock_guard<std::mutex> lock(mu_);
    const Clock::time_point start = std::max(Clock::now(), free_);
    free_ = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(std::max(seconds, 0.0)));
    {
      std::lock_guard<std::mutex> rec(recorder_->mu);
      recorder_->record.spans.push_back({info.group, recorder_->seconds(start), recorder_->seconds(free_)});
    }
    return std::make_unique<HostHandle>(free_, recorder_);
  }
  std::shared_ptr<StandInClock> isolated() override { return std::make_shared<HostStandInClock>(recorder_); }
  StandInRecord record() const override {
    std::lock_guard<std::mutex> lock(recorder_->mu);
    return recorder_->record;
  }

 private:
  std::shared_ptr<HostRecorder> recorder_;
  std::mutex mu_;
  Clock::time_point free_{};
};

}  // namespace

std::shared_ptr<StandInClock> make_host_standin_clock() {
  return std::make_shared<HostStandInClock>(std::make_shared<HostRecorder>());
}

}  // namespace quill
