// The collectives of a profiled step as their communication streams saw them: per profile label
// (the op row that ran the collective: "tp.all_gather", "ep.dispatch"), communicator and operation,
// the time from each operation's start on its stream to its end, the bus bandwidth that gives
// (nccl-tests' definition, so it compares with NCCL's own figure at that size), and how much of
// that time the compute stream spent running ops ("hidden"). Filled by the CUDA profiler from the
// events it records at the communicators' spans (base/comm_timeline.h); plain C++, tested on the CPU.
//
// What "hidden" can and cannot say: the compute stream counts as busy while one of its outermost
// ops is between its start and stop events, except ops that enqueued a collective themselves (their
// interval is mostly the wait). A blocking collective is hidden 0% by construction; one started
// early and waited for later (the expert exchange beside the shared experts) is hidden as far as
// the compute stream had ops to run meanwhile. A span includes waiting for the slowest peer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/comm_timeline.h"
#include "ops/busy_timeline.h"

namespace quill {

// One operation's span, in milliseconds from the profiled step's start.
struct CommSpanTimes {
  std::string label;  // the profile row that enqueued it; empty: none (outside every op)
  CommSpanInfo info;
  double begin_ms = 0, end_ms = 0;
};

struct CommProfileRow {
  std::string label;  // "(outside ops)" for spans outside every op
  std::string group;
  std::string op;
  int group_size = 1;
  int64_t calls = 0;
  double payload_bytes = 0;  // summed over calls
  double bus_bytes = 0;
  double comm_ms = 0;    // summed over calls
  double hidden_ms = 0;  // of comm_ms, while the compute stream was busy
  double bus_gbps() const { return comm_ms > 0 ? bus_bytes / (comm_ms * 1e6) : 0; }
};

// Rows by (label, group, op), longest comm_ms first.
std::vector<CommProfileRow> comm_profile_rows(const std::vector<CommSpanTimes>& spans, const BusyTimeline& compute);
// A fixed-width table (empty string for no rows); percentages of `step_ms`.
std::string comm_profile_table(const std::vector<CommProfileRow>& rows, double step_ms);
// A JSON array of the rows (every field, and bus_gbps).
std::string comm_profile_json(const std::vector<CommProfileRow>& rows);

}  // namespace quill
