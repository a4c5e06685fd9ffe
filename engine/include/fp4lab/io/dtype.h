// safetensors dtypes: names, sizes, and conversion of raw little-endian data to fp32.
#pragma once

#include <cstddef>
#include <cstdint>
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

}  // namespace fp4lab::io
