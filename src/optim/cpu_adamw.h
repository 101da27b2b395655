// The AdamW update of a range of fp32 optimizer state on the host: what CPU offload of a fraction
// of the optimizer state runs (Megatron's --optimizer-cpu-offload). The arithmetic is that of the
// CPU reference (ops/cpu/adamw.cc) and of the CUDA kernel (ops/cuda/adamw.cu): the same fp32
// operations in the same order, without contraction into fused multiply-adds, so the result is
// theirs bit for bit; here it is split over a thread pool's threads and vectorised by the compiler.
// With bf16_out, also writes the updated weights rounded to bf16 (nearest even), the copy that goes
// back to the device. Moments may be bf16 (Megatron's precision-aware optimizer): widened on load,
// fp32 arithmetic, rounded to nearest even on store, as ops::adamw_update does.
#pragma once

#include <cstdint>

#include "base/thread_pool.h"
#include "ops/adamw.h"
#include "tensor/dtype.h"

namespace quill {

void adamw_update_host(const ops::AdamWStep& step, float* w, const float* g, float* m, float* v, uint16_t* bf16_out,
                       int64_t n, ThreadPool& pool);
// The same with each moment F32 (float) or BF16 (uint16_t bits), as m_dtype / v_dtype say.
void adamw_update_host(const ops::AdamWStep& step, float* w, const float* g, void* m, DType m_dtype, void* v,
                       DType v_dtype, uint16_t* bf16_out, int64_t n, ThreadPool& pool);

}  // namespace quill
