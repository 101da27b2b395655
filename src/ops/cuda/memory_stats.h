// GPU memory figures of the CUDA backend: what its device allocator holds now and at most (the
// counterpart of torch.cuda.memory_allocated / max_memory_allocated: tensor bytes, not the CUDA
// context, cuBLASLt's workspace or stream-ordered scratch), and the device's own cudaMemGetInfo
// (everything on the GPU, other processes included). Plain C++: no CUDA headers, so the trainer's
// instrumentation can include it; implemented in cuda_context.cu, beside the allocator.
#pragma once

#include <cstdint>

#include "ops/device_context.h"

namespace quill {

struct CudaMemoryStats {
  int64_t in_use_bytes = 0;        // allocator: bytes of live allocations now
  int64_t peak_bytes = 0;          // allocator: most bytes live at once since the last reset
  int64_t allocations = 0;         // allocator: cudaMalloc calls since the backend was made
  int64_t device_free_bytes = -1;  // cudaMemGetInfo
  int64_t device_total_bytes = -1;
};

// The figures of the device allocator behind `ctx`; false (out untouched) when ctx's allocator is
// not the CUDA backend's. Reads cudaMemGetInfo of the current device (no synchronisation).
bool cuda_memory_stats(const DeviceContext& ctx, CudaMemoryStats& out);
// Waits for the work queued on ctx's stream (a step's time then covers all of it).
void cuda_synchronize(const DeviceContext& ctx);
// Starts a new peak: peak_bytes becomes in_use_bytes. False when ctx's allocator is not the backend's.
bool cuda_reset_peak_memory(const DeviceContext& ctx);

}  // namespace quill
