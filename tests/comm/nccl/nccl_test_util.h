// GPU tensors for the NCCL tests: a plain cudaMalloc allocator and host <-> device copies.
#pragma once

#include <cuda_runtime_api.h>

#include "base/error.h"
#include "tensor/tensor.h"

namespace quill::test {

class CudaMallocAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    void* p = nullptr;
    QUILL_CHECK(cudaMalloc(&p, bytes ? bytes : 1) == cudaSuccess, "cudaMalloc of {} bytes failed", bytes);
    return p;
  }
  void deallocate(void* p, size_t) override { cudaFree(p); }
  Device device() const override { return Device::CUDA; }
};

inline Tensor to_device(const Tensor& host, Allocator& gpu) {
  Tensor d = Tensor::empty(host.shape(), host.dtype(), gpu);
  QUILL_CHECK(cudaMemcpy(d.data(), host.data(), host.nbytes(), cudaMemcpyHostToDevice) == cudaSuccess, "copy to GPU failed");
  return d;
}

// Waits for `stream`, then copies.
inline Tensor to_host(const Tensor& dev, cudaStream_t stream) {
  QUILL_CHECK(cudaStreamSynchronize(stream) == cudaSuccess, "cudaStreamSynchronize failed");
  Tensor h = Tensor::empty(dev.shape(), dev.dtype());
  QUILL_CHECK(cudaMemcpy(h.data(), dev.data(), dev.nbytes(), cudaMemcpyDeviceToHost) == cudaSuccess, "copy to host failed");
  return h;
}

inline int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

}  // namespace quill::test
