// The shapes of the GPU's router gate GEMMs (src/ops/cuda/router_gate.cu, docs/decisions/router-gemm-bf16x3.md), in
// one place for the kernels and for the memory plan (plan/activation_trace.cc): how long one tensor-core
// accumulation may be, how the fp32 operand's three bf16 parts are padded, and the transient bytes each op allocates.
#pragma once

#include <algorithm>
#include <cstdint>

namespace quill::router_gate {

// The longest contraction one bf16 GEMM over the parts accumulates on the tensor cores: measured, their fp32
// accumulation's error grows about linearly with it (4.7e-7 relative at 512, fp32's own; 4.4e-6 at 4,096), so
// longer ones run as chunks of this whose results are added on the CUDA cores.
inline constexpr int64_t kChunk = 512;

// The contraction's chunks (at least one, for an empty contraction).
inline int64_t chunks(int64_t contraction) { return std::max<int64_t>(1, (contraction + kChunk - 1) / kChunk); }

// One part's rows (or columns): X rounded up to 8, so that every part starts on a 16-byte boundary for cuBLASLt.
inline int64_t padded(int64_t X) { return (X + 7) / 8 * 8; }

enum class Op { kForward, kBackwardInput, kBackwardWeight };

// The device bytes one op allocates for its duration with a bf16 activation x [T, D] and the gate [X, D]:
//   forward          the gate's parts (bf16 [3 Xp, D]) and the fp32 output [T, 3 Xp] the chunks add into
//   backward weight  dlogits' parts (bf16 [T, 3 Xp]) and the fp32 output [3 Xp, D] the chunks add into
//   backward input   the fp32 GEMM's output [T, D] before its rounding to bf16
inline int64_t workspace_bytes(Op op, int64_t T, int64_t D, int64_t X) {
  const int64_t M = 3 * padded(X);
  switch (op) {
    case Op::kForward: return M * D * 2 + T * M * 4;
    case Op::kBackwardWeight: return T * M * 2 + M * D * 4;
    case Op::kBackwardInput: break;
  }
  return T * D * 4;
}

}  // namespace quill::router_gate
