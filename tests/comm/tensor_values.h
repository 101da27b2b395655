// Element access for every dtype the communicators move, for the comm tests.
#pragma once

#include <cstdint>
#include <functional>

#include "tensor/tensor.h"

namespace quill::test {

inline double element(const Tensor& t, int64_t i) {
  const void* p = t.data();
  switch (t.dtype()) {
    case DType::F32: return static_cast<const float*>(p)[i];
    case DType::F64: return static_cast<const double*>(p)[i];
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::F16: return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::I32: return static_cast<const int32_t*>(p)[i];
    case DType::I64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DType::U8:
    case DType::Bool: return static_cast<const uint8_t*>(p)[i];
  }
  return 0;
}

inline void set_element(const Tensor& t, int64_t i, double v) {
  void* p = t.data();
  switch (t.dtype()) {
    case DType::F32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DType::F64: static_cast<double*>(p)[i] = v; break;
    case DType::BF16: static_cast<uint16_t*>(p)[i] = f32_to_bf16(static_cast<float>(v)); break;
    case DType::F16: static_cast<uint16_t*>(p)[i] = f32_to_f16(static_cast<float>(v)); break;
    case DType::I32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DType::I64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
    case DType::U8:
    case DType::Bool: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
  }
}

// A 1-D tensor of n elements, element i = f(i).
inline Tensor make_tensor(DType dtype, int64_t n, const std::function<double(int64_t)>& f) {
  Tensor t = Tensor::empty({n}, dtype);
  for (int64_t i = 0; i < n; ++i) set_element(t, i, f(i));
  return t;
}

}  // namespace quill::test
