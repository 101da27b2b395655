// Where the time of `quill data build` goes (`--timing`): the wall-clock seconds of each phase on
// the calling thread, marked serial or parallel, and the work done inside the parallel phases
// summed over the threads (JSON parse, rendering, tokenizing, ...). The report gives the serial
// fraction and what Amdahl's law makes of it at 16 threads, which is what decides how the build
// scales on a many-core host. Nothing here changes what the build writes.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace quill {

class BuildTiming {
 public:
  // Work inside parallel loops, summed over the threads (seconds of thread time).
  enum Work { kParse, kRender, kTokenize, kHash, kWrite, kSync, kWorkCount };  // kRender includes kTokenize

  // A phase of `seconds` wall clock on the calling thread. `serial`: it runs on one thread
  // whatever the thread count (the part Amdahl's law is about). Phases of the same name add up.
  void add_phase(std::string_view name, bool serial, double seconds);
  // Thread-safe.
  void add_work(Work w, double seconds) {
    work_ns_[w].fetch_add(static_cast<int64_t>(seconds * 1e9), std::memory_order_relaxed);
  }
  double work_seconds(Work w) const { return static_cast<double>(work_ns_[w].load()) * 1e-9; }

  // The report for a build on `threads` threads that took `total_seconds` end to end: a table
  // for people, and the same as JSON ({"threads", "total_s", "phases": [{name, serial, s}],
  // "work_s": {...}, "serial_s", "serial_fraction", "amdahl_16"}).
  std::string table(int threads, double total_seconds) const;
  nlohmann::json to_json(int threads, double total_seconds) const;

 private:
  struct Phase {
    std::string name;
    bool serial;
    double seconds;
  };
  std::vector<Phase> phases_;
  std::array<std::atomic<int64_t>, kWorkCount> work_ns_{};
};

// Times a phase from construction to destruction (or stop()); does nothing without a BuildTiming.
class PhaseTimer {
 public:
  PhaseTimer(BuildTiming* timing, std::string_view name, bool serial);
  ~PhaseTimer() { stop(); }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;
  void stop();

 private:
  BuildTiming* timing_;
  std::string name_;
  bool serial_;
  std::chrono::steady_clock::time_point start_;
};

// Adds the thread time from construction to destruction to one kind of work.
class WorkTimer {
 public:
  WorkTimer(BuildTiming* timing, BuildTiming::Work w)
      : timing_(timing), work_(w), start_(timing ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{}) {}
  ~WorkTimer() { stop(); }
  void stop() {
    if (timing_) {
      timing_->add_work(work_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
    }
    timing_ = nullptr;
  }
  WorkTimer(const WorkTimer&) = delete;
  WorkTimer& operator=(const WorkTimer&) = delete;

 private:
  BuildTiming* timing_;
  BuildTiming::Work work_;
  std::chrono::steady_clock::time_point start_;
};

// A tokenizer that forwards to another and adds the time of every encode to kTokenize, so that
// rendering and tokenizing can be told apart without touching the renderer.
class TimedTokenizer final : public Tokenizer {
 public:
  TimedTokenizer(const Tokenizer& inner, BuildTiming& timing) : inner_(inner), timing_(timing) {}
  std::string name() const override { return inner_.name(); }
  std::vector<uint32_t> encode(std::string_view text) const override;
  void encode_append(std::string_view text, std::vector<uint32_t>& out) const override;
  std::string decode(std::span<const uint32_t> ids) const override { return inner_.decode(ids); }
  std::optional<uint32_t> find_special(std::string_view spelling) const override { return inner_.find_special(spelling); }
  int64_t vocab_size() const override { return inner_.vocab_size(); }
  std::string definition_sha256() const override { return inner_.definition_sha256(); }

 private:
  const Tokenizer& inner_;
  BuildTiming& timing_;
};

}  // namespace quill
