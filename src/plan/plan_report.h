// The memory plan as a table for people (one column per pipeline stage, GiB) and as JSON for tools
// (bytes), and the fit check `quill train` / `quill run` make before loading anything.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "plan/memory_plan.h"

namespace quill::plan {

// device_memory: the bytes each GPU has (<= 0: not checked).
std::string plan_table(const MemoryPlan& plan, int64_t device_memory);
nlohmann::json plan_json(const MemoryPlan& plan, int64_t device_memory);

// Whether every stage's device total fits `device_memory`, and if not, a message naming the stage,
// its largest categories and what would make it fit (each candidate planned again: the offload
// fraction, bf16 moments, more pipeline stages or expert-parallel ranks, a shorter row).
struct FitVerdict {
  bool fits = true;
  std::string message;
};
FitVerdict check_fit(const MemoryPlan& plan, int64_t device_memory);

// Whether the world ranks `ranks` (those of one node) fit the node's host memory at startup: the
// offloaded optimizer state they pin, and beside it the fp32 host copy of their weights before
// placement. Refused above kHostShare of `host_memory` (its physical memory; <= 0: not checked), which
// leaves the rest for the system, MPI and the processes' own buffers. Pinned pages cannot be swapped
// or reclaimed: a node that needs nearly all of its memory dies later, in the loader or the kernel's
// out-of-memory killer, with no message naming why.
inline constexpr double kHostShare = 0.9;
FitVerdict check_host_fit(const MemoryPlan& plan, const std::vector<int>& ranks, int64_t host_memory);
// check_host_fit for every node of the plan (request.gpus_per_node consecutive world ranks each).
std::vector<FitVerdict> check_nodes_host_fit(const MemoryPlan& plan, int64_t host_memory);

std::string format_bytes(int64_t bytes);  // "12.34 GiB", below 1 GiB "56.78 MiB"

}  // namespace quill::plan
