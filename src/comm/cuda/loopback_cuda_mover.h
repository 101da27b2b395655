// The CUDA LoopbackMover (comm/loopback_comm.h): copies between device tensors and the fill pattern,
// each enqueued on the compute stream (so ordered after the work that wrote the source and before
// the work that reads the result, like NCCL's collectives; the host does not wait). The pattern is
// uploaded once per dtype into a device buffer that grows to the largest fill asked for, taken
// with cudaMalloc outside the run's allocator: the simulated rank's peak tensor bytes are the real
// rank's, and the buffer (at most one activation or gradient message) shows in the device's
// used memory only. Built only with the CUDA backend.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "comm/loopback_comm.h"

namespace quill {

std::unique_ptr<LoopbackMover> make_cuda_loopback_mover(cudaStream_t stream);

}  // namespace quill
