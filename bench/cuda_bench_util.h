// Shared pieces of the GPU micro-benchmarks (bench/attention/, bench/grouped/): deterministic random
// device tensors and the median time of a call by CUDA events on the backend's stream.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "ops/convert.h"
#include "ops/device_context.h"
#include "tensor/tensor.h"

namespace quill::bench {

// Values in [-scale, scale) from a 64-bit LCG seeded by `seed`, stored in `dtype` on ctx's device.
inline Tensor random_device(const DeviceContext& ctx, const Shape& shape, DType dtype, uint64_t seed,
                            float scale = 1.0f) {
  Tensor host = Tensor::empty(shape, DType::F32);
  uint64_t x = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (int64_t i = 0; i < host.numel(); ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    host.data_as<float>()[i] = scale * (static_cast<float>((x >> 40) & 0xffffff) / 8388608.0f - 1.0f);
  }
  Tensor dev = Tensor::empty(shape, dtype, *ctx.allocator);
  ops::transfer(ctx, convert_dtype(host, dtype), dev);
  return dev;
}

// Median milliseconds of `reps` calls of f after `warmup` untimed ones.
template <class F>
double median_ms(cudaStream_t stream, F&& f, int reps = 10, int warmup = 3) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> ms;
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(a, stream);
    f();
    cudaEventRecord(b, stream);
    cudaEventSynchronize(b);
    float m = 0;
    cudaEventElapsedTime(&m, a, b);
    ms.push_back(m);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace quill::bench
