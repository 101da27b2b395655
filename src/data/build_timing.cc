#include "data/build_timing.h"

#include <fmt/format.h>

namespace quill {

namespace {

constexpr std::array<const char*, BuildTiming::kWorkCount> kWorkNames = {"parse", "render_with_tokenize",
                                                                         "tokenize", "hash", "write", "fsync"};
constexpr int kAmdahlThreads = 16;

}  // namespace

void BuildTiming::add_phase(std::string_view name, bool serial, double seconds) {
  for (Phase& p : phases_) {
    if (p.name == name) {
      p.seconds += seconds;
      return;
    }
  }
  phases_.push_back({std::string(name), serial, seconds});
}

nlohmann::json BuildTiming::to_json(int threads, double total_seconds) const {
  nlohmann::json phases = nlohmann::json::array();
  double serial = 0, accounted = 0;
  for (const Phase& p : phases_) {
    phases.push_back({{"name", p.name}, {"serial", p.serial}, {"s", p.seconds}});
    accounted += p.seconds;
    if (p.serial) serial += p.seconds;
  }
  // What no phase covers (printing, freeing) runs on the calling thread: count it as serial.
  double other = std::max(0.0, total_seconds - accounted);
  phases.push_back({{"name", "other"}, {"serial", true}, {"s", other}});
  serial += other;
  nlohmann::json work = nlohmann::json::object();
  for (int w = 0; w < kWorkCount; ++w) work[kWorkNames[w]] = work_seconds(static_cast<Work>(w));
  // The parallel phases scaled linearly from `threads` to 16 threads, the serial ones unchanged.
  double parallel = total_seconds - serial;
  double t16 = serial + parallel * threads / kAmdahlThreads;
  return {{"threads", threads},
          {"total_s", total_seconds},
          {"phases", phases},
          {"work_s", work},
          {"serial_s", serial},
          {"serial_fraction", total_seconds > 0 ? serial / total_seconds : 0.0},
          {"projected_16_threads_s", t16},
          {"amdahl_16", t16 > 0 ? total_seconds / t16 : 0.0}};
}

std::string BuildTiming::table(int threads, double total_seconds) const {
  nlohmann::json j = to_json(threads, total_seconds);
  std::string out = fmt::format("data build timing, {} thread{} (wall seconds on the calling thread):\n", threads,
                                threads == 1 ? "" : "s");
  for (const auto& p : j["phases"]) {
    double s = p["s"].get<double>();
    out += fmt::format("  {:<34} {:8.3f} s  {:5.1f}%  {}\n", p["name"].get<std::string>(), s,
                       total_seconds > 0 ? 100 * s / total_seconds : 0.0, p["serial"].get<bool>() ? "serial" : "parallel");
  }
  out += fmt::format("  {:<34} {:8.3f} s\n", "end to end", total_seconds);
  out += "  work summed over the threads:";
  for (const auto& [name, s] : j["work_s"].items()) out += fmt::format(" {} {:.3f} s,", name, s.get<double>());
  out.back() = '\n';
  out += fmt::format(
      "  serial {:.3f} s = {:.1f}% of end to end; the parallel phases scaled linearly to {} threads give {:.3f} s, "
      "{:.2f}x this run (Amdahl)\n",
      j["serial_s"].get<double>(), 100 * j["serial_fraction"].get<double>(), kAmdahlThreads,
      j["projected_16_threads_s"].get<double>(), j["amdahl_16"].get<double>());
  return out;
}

PhaseTimer::PhaseTimer(BuildTiming* timing, std::string_view name, bool serial)
    : timing_(timing), name_(timing ? std::string(name) : std::string()), serial_(serial) {
  if (timing_) start_ = std::chrono::steady_clock::now();
}

void PhaseTimer::stop() {
  if (!timing_) return;
  timing_->add_phase(name_, serial_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  timing_ = nullptr;
}

std::vector<uint32_t> TimedTokenizer::encode(std::string_view text) const {
  WorkTimer t(&timing_, BuildTiming::kTokenize);
  return inner_.encode(text);
}

void TimedTokenizer::encode_append(std::string_view text, std::vector<uint32_t>& out) const {
  WorkTimer t(&timing_, BuildTiming::kTokenize);
  inner_.encode_append(text, out);
}

}  // namespace quill
