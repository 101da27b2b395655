// The CUDA ops' argument checks, in the words of the CPU ops: one clear message naming the op and the tensor.
#pragma once

#include <string>

#include "base/error.h"
#include "tensor/tensor.h"

namespace quill::cuda {

inline void require_cuda(const char* op, const char* name, const Tensor& t) {
  QUILL_CHECK(t.defined() && t.device() == Device::CUDA, "{}: {} must be a CUDA tensor, got {}", op, name,
              t.defined() ? t.describe() : std::string("(undefined)"));
}

// `dims` names the expected axes, e.g. "[N, K]".
inline void require_2d(const char* op, const char* name, const char* dims, const Tensor& t) {
  QUILL_CHECK(t.defined() && t.ndim() == 2, "{}: {} must be 2-D {}, got {}", op, name, dims,
              t.defined() ? t.describe() : std::string("(undefined)"));
}

}  // namespace quill::cuda
