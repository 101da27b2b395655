// Which kernel runs the routed experts' forward and input-gradient GEMMs on the GPU (--grouped-gemm-kernel;
// docs/decisions/grouped-gemm-wgmma.md): one cuBLASLt GEMM per expert, quill's one-launch wgmma kernel
// (src/ops/cuda/grouped_gemm_wg.h), or auto, the choice measured per call's shape. The CPU backend has one path.
#pragma once

#include <string>

namespace quill {

enum class GroupedGemmKernel { kAuto, kCublasLt, kWgmma };

inline const char* grouped_gemm_kernel_name(GroupedGemmKernel k) {
  switch (k) {
    case GroupedGemmKernel::kCublasLt: return "cublaslt";
    case GroupedGemmKernel::kWgmma: return "wgmma";
    case GroupedGemmKernel::kAuto: break;
  }
  return "auto";
}

// "auto", "cublaslt" or "wgmma"; false for anything else.
inline bool parse_grouped_gemm_kernel(const std::string& s, GroupedGemmKernel& out) {
  for (GroupedGemmKernel k : {GroupedGemmKernel::kAuto, GroupedGemmKernel::kCublasLt, GroupedGemmKernel::kWgmma})
    if (s == grouped_gemm_kernel_name(k)) {
      out = k;
      return true;
    }
  return false;
}

}  // namespace quill
