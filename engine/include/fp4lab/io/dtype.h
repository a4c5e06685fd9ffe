// safetensors dtypes: names, sizes, and conversion of raw little-endian data to fp32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

namespace fp4lab::io {

enum class DType {
  BOOL,
  U8,
  I8,
  I16,
  U16,
  I32,
  U32,
  I64,
  U64,
  F16,
  BF16,
  F32,
  F64,
  F8_E4M3,
  F8_E5M2,
  F8_E8M0
};

const char* dtypeName(DType dtype);  // "F32", "BF16", "F8_E4M3", ...
std::optional<DType> parseDType(const std::string& name);
size_t dtypeSize(DType dtype);      // bytes per element
bool isFloatingPoint(DType dtype);  // F16, BF16, F32, F64 (not FP8)

// Converts `count` elements of `src` (any alignment) to fp32. Exact for F16, BF16, FP8 and
// integers up to 2^24; F64 rounds to nearest.
void convertToFloat32(DType dtype, const void* src, size_t count, float* dst);

// One BF16 value (its bits) widened to fp32: exact.
inline float bf16ToFloat(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, sizeof value);
  return value;
}

// fp32 rounded to BF16 as c10::BFloat16 does: to nearest even, NaN to the quiet NaN 0x7FC0.
// Integer arithmetic only, no selects, so that loops over it vectorize on every instruction set.
inline uint16_t floatToBf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  const uint32_t nanMask = 0u - static_cast<uint32_t>((bits & 0x7FFFFFFFu) > 0x7F800000u);
  return static_cast<uint16_t>(rounded ^ ((rounded ^ 0x7FC0u) & nanMask));
}

}  // namespace fp4lab::io
