// The AdamW update of a range of fp32 optimizer state on the host: what CPU offload of a fraction
// of the optimizer state runs (Megatron's --optimizer-cpu-offload). The arithmetic is that of the
// CPU reference (ops/cpu/adamw.cc) and of the CUDA kernel (ops/cuda/adamw.cu): the same fp32
// operations in the same order, without contraction into fused multiply-adds, so the result is
// theirs bit for bit; here it is split over a thread pool's threads and vectorised by the compiler.
// With bf16_out, also writes the updated weights rounded to bf16 (nearest even), the copy that goes
// back to the device.
#pragma once

#include <cstdint>

#include "base/thread_pool.h"
#include "ops/adamw.h"

namespace quill {

void adamw_update_host(const ops::AdamWStep& step, float* w, const float* g, float* m, float* v, uint16_t* bf16_out,
                       int64_t n, ThreadPool& pool);

}  // namespace quill
