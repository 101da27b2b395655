// Random attention inputs for the CUDA attention tests (attention_test.cc, attention_wg_test.cc): q, k,
// v and the bias coefficients r rounded to bf16 (so the CPU reference sees what the GPU sees), the
// bias table in fp32; and their device copies.
#pragma once

#include <cstdint>

#include "cuda/harness.h"
#include "tensor/tensor.h"
#include "util/test_util.h"

namespace quill::test {

struct AttentionHost {
  Tensor q, k, v, r, table;
};

struct AttentionOnGpu {
  Tensor q, k, v, r, table;
};

// q [T, H, d], k and v [T, G, d], r [T, H, R], table [R, E].
inline AttentionHost attention_inputs(int64_t T, int64_t H, int64_t G, int64_t d, int64_t R, int64_t E, uint64_t seed) {
  return {round_bf16(random_tensor({T, H, d}, DType::F32, seed + 1)),
          round_bf16(random_tensor({T, G, d}, DType::F32, seed + 2)),
          round_bf16(random_tensor({T, G, d}, DType::F32, seed + 3)),
          round_bf16(random_tensor({T, H, R}, DType::F32, seed + 4)),
          random_tensor({R, E}, DType::F32, seed + 5, 0.3)};
}

inline AttentionOnGpu upload(const AttentionHost& h) {
  return {to_device(h.q, DType::BF16), to_device(h.k, DType::BF16), to_device(h.v, DType::BF16),
          to_device(h.r, DType::BF16), to_device(h.table, DType::F32)};
}

}  // namespace quill::test
