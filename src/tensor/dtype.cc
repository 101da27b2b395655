#include "tensor/dtype.h"

#include <cmath>

#include "base/error.h"

namespace quill {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::BF16: return 2;
    case DType::F16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::U8: return 1;
    case DType::Bool: return 1;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::U8: return "U8";
    case DType::Bool: return "BOOL";
  }
  return "?";
}

DType dtype_from_name(const std::string& name) {
  for (DType d : {DType::F32, DType::F64, DType::BF16, DType::F16, DType::I32, DType::I64, DType::U8, DType::Bool})
    if (name == dtype_name(d)) return d;
  QUILL_FAIL("unknown dtype '{}'", name);
}

const char* device_name(Device device) { return device == Device::CPU ? "cpu" : "cuda"; }

float f16_to_f32(uint16_t h) {
  uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float v;
  if (exp == 0) v = std::ldexp(static_cast<float>(mant), -24);
  else if (exp == 31) v = mant ? NAN : INFINITY;
  else v = std::ldexp(static_cast<float>(mant | 0x400), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

uint16_t f32_to_f16(float f) {
  // Used only for pass-through conversions in tests and tools; round to nearest via double.
  uint32_t sign = std::signbit(f) ? 0x8000u : 0u;
  float a = std::fabs(f);
  if (std::isnan(f)) return static_cast<uint16_t>(sign | 0x7e00);
  if (a >= 65520.0f) return static_cast<uint16_t>(sign | 0x7c00);
  if (a < 6.103515625e-05f) return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(a * 16777216.0f)));
  int e;
  float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  uint32_t mant = static_cast<uint32_t>(std::nearbyint((m * 2.0f - 1.0f) * 1024.0f));
  uint32_t exp = static_cast<uint32_t>(e - 1 + 15);
  if (mant == 1024) { mant = 0; ++exp; }
  return static_cast<uint16_t>(sign | (exp << 10) | mant);
}

}  // namespace quill
