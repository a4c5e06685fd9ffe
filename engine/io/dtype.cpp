// safetensors dtypes: the name table and bit-exact conversion of raw little-endian elements
// to fp32 (half, bfloat16 and the three FP8 formats are decoded from their bit fields).
#include "fp4lab/io/dtype.h"

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>

#include "fp4lab/error.h"

// The data section is little-endian; decoding by memcpy is only right on a little-endian host.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "fp4lab io assumes a little-endian host");

namespace fp4lab::io {

namespace {

struct DTypeEntry {
  DType dtype;
  const char* name;
  size_t size;
};

constexpr DTypeEntry kDTypes[] = {
    {DType::BOOL, "BOOL", 1},       {DType::U8, "U8", 1},           {DType::I8, "I8", 1},
    {DType::I16, "I16", 2},         {DType::U16, "U16", 2},         {DType::I32, "I32", 4},
    {DType::U32, "U32", 4},         {DType::I64, "I64", 8},         {DType::U64, "U64", 8},
    {DType::F16, "F16", 2},         {DType::BF16, "BF16", 2},       {DType::F32, "F32", 4},
    {DType::F64, "F64", 8},         {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F8_E5M2, "F8_E5M2", 1},
    {DType::F8_E8M0, "F8_E8M0", 1},
};

const DTypeEntry& entryOf(DType dtype) {
  for (const DTypeEntry& entry : kDTypes) {
    if (entry.dtype == dtype) return entry;
  }
  // Only reachable with a value cast from an out-of-range integer.
  throw Error("unknown dtype value " + std::to_string(static_cast<int>(dtype)), "fp4lab::io",
              "this is a bug in the caller: use a DType enumerator");
}

float floatFromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

template <typename T>
T load(const uint8_t* p) {
  T value;
  std::memcpy(&value, p, sizeof value);
  return value;
}

float halfToFloat(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half >> 15) << 31;
  const uint32_t exponent = (half >> 10) & 0x1f;
  const uint32_t mantissa = half & 0x3ff;
  if (exponent == 0) {
    // Subnormal (or zero): mantissa * 2^-24 is exact in fp32.
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return floatFromBits(sign | 0x7f800000u | (mantissa << 13));  // keeps payload
  return floatFromBits(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

float e4m3ToFloat(uint8_t byte) {
  // E4M3FN (OCP): no infinities, the all-ones code is NaN, everything else is finite.
  const uint32_t sign = static_cast<uint32_t>(byte >> 7) << 31;
  const uint32_t exponent = (byte >> 3) & 0xf;
  const uint32_t mantissa = byte & 0x7;
  if ((byte & 0x7f) == 0x7f) return floatFromBits(sign | 0x7fc00000u);
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * 0x1p-9f;
    return sign ? -magnitude : magnitude;
  }
  return floatFromBits(sign | ((exponent + 127 - 7) << 23) | (mantissa << 20));
}

float e8m0ToFloat(uint8_t byte) {
  if (byte == 0xff) return std::numeric_limits<float>::quiet_NaN();
  // 2^-127 is below fp32's normal range: it is the subnormal with only the top mantissa bit set.
  if (byte == 0) return floatFromBits(0x00400000u);
  return floatFromBits(static_cast<uint32_t>(byte) << 23);
}

float doubleToFloat(double value) {
  // A finite double outside fp32's range makes static_cast undefined; round as IEEE would.
  constexpr double kOverflowThreshold = 0x1p128 - 0x1p103;  // halfway from FLT_MAX to 2^128
  const double magnitude = std::fabs(value);
  if (std::isnan(value) || magnitude <= FLT_MAX) return static_cast<float>(value);
  const float rounded =
      magnitude >= kOverflowThreshold ? std::numeric_limits<float>::infinity() : FLT_MAX;
  return std::signbit(value) ? -rounded : rounded;
}

template <typename T, typename Convert>
void convertEach(const void* src, size_t count, float* dst, Convert convert) {
  const uint8_t* bytes = static_cast<const uint8_t*>(src);
  for (size_t i = 0; i < count; ++i) dst[i] = convert(load<T>(bytes + i * sizeof(T)));
}

template <typename T>
void convertInteger(const void* src, size_t count, float* dst) {
  convertEach<T>(src, count, dst, [](T value) { return static_cast<float>(value); });
}

}  // namespace

const char* dtypeName(DType dtype) {
  return entryOf(dtype).name;
}

std::optional<DType> parseDType(const std::string& name) {
  for (const DTypeEntry& entry : kDTypes) {
    if (name == entry.name) return entry.dtype;
  }
  return std::nullopt;
}

size_t dtypeSize(DType dtype) {
  return entryOf(dtype).size;
}

bool isFloatingPoint(DType dtype) {
  return dtype == DType::F16 || dtype == DType::BF16 || dtype == DType::F32 || dtype == DType::F64;
}

void convertToFloat32(DType dtype, const void* src, size_t count, float* dst) {
  if (count == 0) return;
  switch (dtype) {
    case DType::BOOL:
      convertEach<uint8_t>(src, count, dst, [](uint8_t v) { return v != 0 ? 1.0f : 0.0f; });
      return;
    case DType::U8:
      convertInteger<uint8_t>(src, count, dst);
      return;
    case DType::I8:
      convertInteger<int8_t>(src, count, dst);
      return;
    case DType::I16:
      convertInteger<int16_t>(src, count, dst);
      return;
    case DType::U16:
      convertInteger<uint16_t>(src, count, dst);
      return;
    case DType::I32:
      convertInteger<int32_t>(src, count, dst);
      return;
    case DType::U32:
      convertInteger<uint32_t>(src, count, dst);
      return;
    case DType::I64:
      convertInteger<int64_t>(src, count, dst);
      return;
    case DType::U64:
      convertInteger<uint64_t>(src, count, dst);
      return;
    case DType::F16:
      convertEach<uint16_t>(src, count, dst, halfToFloat);
      return;
    case DType::BF16:
      convertEach<uint16_t>(src, count, dst, bf16ToFloat);
      return;
    case DType::F32:
      std::memcpy(dst, src, count * sizeof(float));
      return;
    case DType::F64:
      convertEach<double>(src, count, dst, doubleToFloat);
      return;
    case DType::F8_E4M3:
      convertEach<uint8_t>(src, count, dst, e4m3ToFloat);
      return;
    case DType::F8_E5M2:
      // E5M2 is the top byte of an IEEE half, infinities and NaNs included.
      convertEach<uint8_t>(src, count, dst,
                           [](uint8_t v) { return halfToFloat(static_cast<uint16_t>(v << 8)); });
      return;
    case DType::F8_E8M0:
      convertEach<uint8_t>(src, count, dst, e8m0ToFloat);
      return;
  }
  entryOf(dtype);  // throws for a value outside the enum
}

}  // namespace fp4lab::io
