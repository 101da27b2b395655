// A collective that parallel/ code runs on a context's device, made visible to the CUDA profiler:
// `body` makes the communicator's call; `label` names the profile's row ("tp.all_gather"), `moved`
// is the tensor whose bytes each rank sends or receives. On the CPU backend, and on a GPU outside a
// profiled step, it only runs body. (The communicators live above ops; this is the one hook.)
#pragma once

#include <functional>

#include "ops/device_context.h"

namespace quill::ops {

void collective(const DeviceContext& ctx, const char* label, const Tensor& moved, const std::function<void()>& body);

}  // namespace quill::ops
