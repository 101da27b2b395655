#include "comm/cuda/standin_spin.h"

namespace quill {

namespace {

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void standin_spin_kernel(uint64_t ns) {
  __shared__ uint64_t start;
  if (threadIdx.x == 0) start = global_ns();
  __syncthreads();
  while (global_ns() - start < ns) {
  }
}

}  // namespace

cudaError_t launch_standin_spin(cudaStream_t stream, int ctas, int threads, uint64_t ns) {
  if (ns == 0 || ctas <= 0) return cudaSuccess;
  standin_spin_kernel<<<ctas, threads, 0, stream>>>(ns);
  return cudaGetLastError();
}

}  // namespace quill
