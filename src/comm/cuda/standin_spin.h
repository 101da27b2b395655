// The GPU side of a timed stand-in (comm/cuda/standin_clock_cuda.h): a kernel of `ctas` blocks of
// `threads` threads whose every thread polls the global timer until `ns` nanoseconds have passed since its
// block started. It holds the SMs its blocks land on, and their issue slots, for the collective's modelled
// time, as NCCL's kernel holds one block per channel while it copies; a block that finds no free SM
// starts late, as NCCL's does behind a kernel that fills the GPU.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace quill {

cudaError_t launch_standin_spin(cudaStream_t stream, int ctas, int threads, uint64_t ns);

}  // namespace quill
