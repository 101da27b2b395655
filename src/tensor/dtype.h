// Element types and devices, and the bf16 <-> fp32 conversions (round to nearest even).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace quill {

enum class DType : uint8_t { F32, F64, BF16, F16, I32, I64, U8, Bool };
enum class Device : uint8_t { CPU, CUDA };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);  // safetensors spelling: "F32", "BF16", ...
DType dtype_from_name(const std::string& name);  // throws naming the unknown dtype
const char* device_name(Device device);

inline float bf16_to_f32(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu)) return static_cast<uint16_t>((bits >> 16) | 0x40);  // NaN stays NaN
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

}  // namespace quill
