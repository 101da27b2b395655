// How the GPU runs the router's gate GEMMs (--router-gemm; docs/decisions/router-gemm-bf16x3.md). The
// router computes in fp32 (its weight is an fp32 master, as Miles trains it); the two ways give fp32
// results, summed in different orders:
//   fp32    cuBLASLt fp32 GEMMs on the CUDA cores (CUBLAS_COMPUTE_32F without TF32)
//   bf16x3  every fp32 operand split exactly into three bf16 parts (ops/cuda/bf16x3.h), the parts'
//           products (exact in fp32) summed on the tensor cores with fp32 accumulation
// The CPU backend has one path, the fp32 reference.
#pragma once

#include <string>

namespace quill {

enum class RouterGemm { kFp32, kBf16x3 };

inline const char* router_gemm_name(RouterGemm g) { return g == RouterGemm::kBf16x3 ? "bf16x3" : "fp32"; }

// "fp32" or "bf16x3"; false for anything else.
inline bool parse_router_gemm(const std::string& s, RouterGemm& out) {
  for (RouterGemm g : {RouterGemm::kFp32, RouterGemm::kBf16x3})
    if (s == router_gemm_name(g)) {
      out = g;
      return true;
    }
  return false;
}

}  // namespace quill
