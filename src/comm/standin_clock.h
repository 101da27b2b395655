// Timed stand-ins for a simulated rank's collectives (`quill train --simulate-rank R --simulate-comm-time`,
// docs/simulate-rank.md). The loopback communicator (comm/loopback_comm.h) serves every collective at once:
// alone, a simulated step's wall time holds no communication. With timed stand-ins each collective also takes
// the time the communication model gives it (StandInTiming: plan/standin_timing.h implements it with the same
// model as the projection), on a queue of its own as NCCL's operations run on a stream of their own (and the
// token exchange's on another: split_isolated), ordered after the caller's earlier work; a blocking call makes
// the caller wait for it, a started one (CommHandle) when its handle is waited on. So the step's wall time
// includes the collectives, what of them runs under compute and (on a GPU, where the stand-in holds SMs as
// NCCL's kernels would) their contention with it. The data is still the loopback's: the stand-ins change
// no bit of the run.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/comm_timeline.h"
#include "comm/call_bytes.h"
#include "comm/comm.h"

namespace quill {

// One call, as a communication model needs to time it.
struct StandInCall {
  std::string group;  // the communicator's name
  const char* op = "";
  int group_size = 1;
  CallBytes bytes;
  const std::vector<int>* world_ranks = nullptr;  // the group's world ranks, in its order
  int world_rank = 0;                             // this rank's
};

class StandInTiming {
 public:
  virtual ~StandInTiming() = default;
  virtual double seconds(const StandInCall& call) const = 0;
};

// What a clock saw, in seconds from its start: each stand-in's span on its queue (from when it started on
// the queue to its end) and each interval the caller spent waiting for one. Of a span, the part inside the
// waits was exposed; the rest ran beside the caller's own work (hidden). The host clock records; the CUDA
// clock leaves this to the profiler's collectives table (ops/comm_profile.h).
struct StandInSpan {
  std::string group;
  double begin = 0, end = 0;
};
struct StandInRecord {
  std::vector<StandInSpan> spans;
  std::vector<std::pair<double, double>> waits;  // [begin, end)
};

// Where the modelled time runs.
class StandInClock {
 public:
  virtual ~StandInClock() = default;
  // Every queue of this clock and of its isolated ones, so far (empty for a clock that does not record).
  virtual StandInRecord record() const { return {}; }
  // `seconds` of this clock's queue, after the caller's earlier work and after the queue's earlier
  // operations; the handle's wait orders the caller's later work after it.
  virtual std::unique_ptr<CommHandle> occupy(double seconds, const CommSpanInfo& info) = 0;
  // A clock whose operations queue apart from this one's (Comm::split_isolated).
  virtual std::shared_ptr<StandInClock> isolated() = 0;
};

// The host's clock (the CPU backend): a queue is the time point when it is next free; an operation runs
// from max(now, free) for its seconds; waiting on it sleeps until its end.
std::shared_ptr<StandInClock> make_host_standin_clock();

}  // namespace quill
