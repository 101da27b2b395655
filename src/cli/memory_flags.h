// The memory check that `quill train` and `quill run` make before loading anything (the memory plan
// of plan/, against the device's memory), and the --device-memory flag shared with `quill plan`.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "model/config.h"
#include "parallel/layout_spec.h"
#include "plan/memory_plan.h"
#include "train/train_options.h"

namespace quill::cli {

struct MemoryCheck {
  // Bytes per device to plan against: on a GPU, cudaMemGetInfo's total unless given; on the CPU no
  // check unless given (--device-memory).
  int64_t device_memory = -1;
};

// --device-memory SIZE: bytes, or with a unit (KiB, MiB, GiB, TiB; KB, MB, GB, TB in powers of 10).
void add_device_memory_flag(CLI::App* cmd, std::string& value);
// -1 for "" (not given); throws naming the flag for anything else that is not a positive size.
int64_t parse_device_memory(const std::string& value);
// The same for any size flag, named in the error.
int64_t parse_memory_size(const std::string& flag, const std::string& value);

// The plan's request for a training run of `o` (its rows' length, batch, frozen set and optimizer
// memory) under `layout` on `device` ("cpu" or "cuda").
plan::PlanRequest plan_request_for(const TrainOptions& o, const InklingConfig& config, const LayoutSpec& layout,
                                   const std::string& device, int64_t row_tokens);

}  // namespace quill::cli
