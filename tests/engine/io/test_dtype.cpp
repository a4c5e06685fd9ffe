// Tests for the dtype table and convertToFloat32: every F16 and FP8 code against an independent
// ldexp decoding of its bit fields, BF16 properties, integers, F64 rounding, unaligned sources.
#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "fp4lab/io/dtype.h"

using fp4lab::io::convertToFloat32;
using fp4lab::io::DType;

namespace {

const std::vector<DType> kAllDTypes = {DType::BOOL, DType::U8,      DType::I8,      DType::I16,
                                       DType::U16,  DType::I32,     DType::U32,     DType::I64,
                                       DType::U64,  DType::F16,     DType::BF16,    DType::F32,
                                       DType::F64,  DType::F8_E4M3, DType::F8_E5M2, DType::F8_E8M0};

uint32_t bitsOf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

// Equal as fp32 values, telling -0 from +0; any NaN matches any NaN of the same sign.
bool sameFloat(float actual, double expected) {
  if (std::isnan(expected)) return std::isnan(actual);
  return bitsOf(actual) == bitsOf(static_cast<float>(expected));
}

template <typename T>
std::vector<float> convert(DType dtype, const std::vector<T>& values) {
  std::vector<float> out(values.size());
  convertToFloat32(dtype, values.data(), values.size(), out.data());
  return out;
}

std::vector<float> convertBytes(DType dtype, const std::vector<uint8_t>& bytes) {
  std::vector<float> out(bytes.size() / fp4lab::io::dtypeSize(dtype));
  convertToFloat32(dtype, bytes.data(), out.size(), out.data());
  return out;
}

std::vector<uint8_t> allBytes() {
  std::vector<uint8_t> codes(256);
  for (int i = 0; i < 256; ++i) codes[i] = static_cast<uint8_t>(i);
  return codes;
}

}  // namespace

TEST_CASE("dtype names, sizes and parsing agree", "[io][dtype]") {
  const std::vector<std::pair<const char*, size_t>> expected = {
      {"BOOL", 1}, {"U8", 1},      {"I8", 1},      {"I16", 2},    {"U16", 2},  {"I32", 4},
      {"U32", 4},  {"I64", 8},     {"U64", 8},     {"F16", 2},    {"BF16", 2}, {"F32", 4},
      {"F64", 8},  {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"F8_E8M0", 1}};
  REQUIRE(expected.size() == kAllDTypes.size());
  for (size_t i = 0; i < kAllDTypes.size(); ++i) {
    INFO("dtype " << expected[i].first);
    CHECK(std::string(fp4lab::io::dtypeName(kAllDTypes[i])) == expected[i].first);
    CHECK(fp4lab::io::dtypeSize(kAllDTypes[i]) == expected[i].second);
    const auto parsed = fp4lab::io::parseDType(expected[i].first);
    REQUIRE(parsed.has_value());
    CHECK(*parsed == kAllDTypes[i]);
  }
  CHECK_FALSE(fp4lab::io::parseDType("f32").has_value());  // names are case-sensitive
  CHECK_FALSE(fp4lab::io::parseDType("").has_value());
  CHECK_FALSE(fp4lab::io::parseDType("F32 ").has_value());
  CHECK_FALSE(fp4lab::io::parseDType("F8_E4M3FN").has_value());

  for (DType dtype : kAllDTypes) {
    const bool expectFloat =
        dtype == DType::F16 || dtype == DType::BF16 || dtype == DType::F32 || dtype == DType::F64;
    CHECK(fp4lab::io::isFloatingPoint(dtype) == expectFloat);
  }
}

TEST_CASE("F16 decodes all 65536 codes exactly", "[io][dtype]") {
  std::vector<uint16_t> codes(65536);
  for (uint32_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint16_t>(i);
  const std::vector<float> decoded = convert(DType::F16, codes);

  size_t mismatches = 0;
  for (uint32_t code = 0; code < 65536; ++code) {
    const int sign = code >> 15;
    const int exponent = (code >> 10) & 0x1f;
    const int mantissa = code & 0x3ff;
    double magnitude;
    if (exponent == 0) {
      magnitude = std::ldexp(mantissa, -24);
    } else if (exponent == 31) {
      magnitude = mantissa == 0 ? std::numeric_limits<double>::infinity()
                                : std::numeric_limits<double>::quiet_NaN();
    } else {
      magnitude = std::ldexp(1024 + mantissa, exponent - 25);
    }
    const double expected = sign ? -magnitude : magnitude;
    const bool ok = sameFloat(decoded[code], expected) &&
                    std::signbit(decoded[code]) == static_cast<bool>(sign);
    if (!ok && ++mismatches <= 5) {
      FAIL_CHECK("code 0x" << std::hex << code << " decoded " << decoded[code] << ", expected "
                           << expected);
    }
  }
  CHECK(mismatches == 0);

  // Anchors a wrong formula that happened to match itself would miss.
  CHECK(decoded[0x3c00] == 1.0f);
  CHECK(decoded[0xc000] == -2.0f);
  CHECK(decoded[0x7bff] == 65504.0f);
  CHECK(decoded[0x0001] == std::ldexp(1.0f, -24));
  CHECK(decoded[0x0400] == std::ldexp(1.0f, -14));
  CHECK(std::isinf(decoded[0x7c00]));
  CHECK(decoded[0xfc00] < 0);
  CHECK(std::isnan(decoded[0x7e00]));
  CHECK(bitsOf(decoded[0x8000]) == 0x80000000u);
}

TEST_CASE("BF16 is the top half of an fp32", "[io][dtype]") {
  std::vector<uint16_t> codes(65536);
  for (uint32_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint16_t>(i);
  const std::vector<float> decoded = convert(DType::BF16, codes);
  size_t mismatches = 0;
  for (uint32_t code = 0; code < 65536; ++code) {
    if (bitsOf(decoded[code]) != code << 16) ++mismatches;
  }
  CHECK(mismatches == 0);

  CHECK(decoded[0x3f80] == 1.0f);
  CHECK(decoded[0xc000] == -2.0f);
  CHECK(decoded[0x4049] == 3.140625f);
  CHECK(decoded[0x0001] == std::ldexp(1.0f, -133));   // smallest subnormal
  CHECK(decoded[0x7f7f] == std::ldexp(255.0f, 120));  // largest finite
  CHECK(std::isinf(decoded[0x7f80]));
  CHECK(std::isinf(decoded[0xff80]));
  CHECK(decoded[0xff80] < 0);
  CHECK(std::isnan(decoded[0x7fc0]));

  // Round trip: any fp32 whose low 16 bits are zero survives truncation to bf16 unchanged.
  std::mt19937 rng(1234);
  for (int i = 0; i < 1000; ++i) {
    const float value = std::ldexp(std::uniform_real_distribution<float>(-1, 1)(rng),
                                   std::uniform_int_distribution<int>(-100, 100)(rng));
    const uint32_t truncated = bitsOf(value) & 0xffff0000u;
    const uint16_t bf16 = static_cast<uint16_t>(truncated >> 16);
    float back;
    convertToFloat32(DType::BF16, &bf16, 1, &back);
    CHECK(bitsOf(back) == truncated);
  }
}

TEST_CASE("F8_E4M3 decodes all 256 codes", "[io][dtype]") {
  const std::vector<float> decoded = convertBytes(DType::F8_E4M3, allBytes());
  for (int code = 0; code < 256; ++code) {
    const int sign = code >> 7;
    const int exponent = (code >> 3) & 0xf;
    const int mantissa = code & 0x7;
    double magnitude;
    if (exponent == 15 && mantissa == 7) {
      magnitude = std::numeric_limits<double>::quiet_NaN();  // E4M3FN: the only NaN, no inf
    } else if (exponent == 0) {
      magnitude = std::ldexp(mantissa, -9);
    } else {
      magnitude = std::ldexp(8 + mantissa, exponent - 10);
    }
    INFO("code " << code);
    CHECK(sameFloat(decoded[code], sign ? -magnitude : magnitude));
    CHECK_FALSE(std::isinf(decoded[code]));
  }
  CHECK(decoded[0x7e] == 448.0f);
  CHECK(decoded[0xfe] == -448.0f);
  CHECK(decoded[0x38] == 1.0f);
  CHECK(decoded[0x01] == std::ldexp(1.0f, -9));
  CHECK(std::isnan(decoded[0x7f]));
  CHECK(std::isnan(decoded[0xff]));
}

TEST_CASE("F8_E5M2 decodes all 256 codes", "[io][dtype]") {
  const std::vector<float> decoded = convertBytes(DType::F8_E5M2, allBytes());
  for (int code = 0; code < 256; ++code) {
    const int sign = code >> 7;
    const int exponent = (code >> 2) & 0x1f;
    const int mantissa = code & 0x3;
    double magnitude;
    if (exponent == 31) {
      magnitude = mantissa == 0 ? std::numeric_limits<double>::infinity()
                                : std::numeric_limits<double>::quiet_NaN();
    } else if (exponent == 0) {
      magnitude = std::ldexp(mantissa, -16);
    } else {
      magnitude = std::ldexp(4 + mantissa, exponent - 17);
    }
    INFO("code " << code);
    CHECK(sameFloat(decoded[code], sign ? -magnitude : magnitude));
  }
  CHECK(decoded[0x7b] == 57344.0f);
  CHECK(decoded[0x3c] == 1.0f);
  CHECK(decoded[0x01] == std::ldexp(1.0f, -16));
  CHECK(std::isinf(decoded[0x7c]));
  CHECK(decoded[0xfc] == -std::numeric_limits<float>::infinity());
  CHECK(std::isnan(decoded[0x7d]));
}

TEST_CASE("F8_E8M0 decodes all 256 codes as powers of two", "[io][dtype]") {
  const std::vector<float> decoded = convertBytes(DType::F8_E8M0, allBytes());
  for (int code = 0; code < 255; ++code) {
    INFO("code " << code);
    CHECK(sameFloat(decoded[code], std::ldexp(1.0, code - 127)));
    CHECK(decoded[code] > 0);
  }
  CHECK(std::isnan(decoded[255]));
  CHECK(decoded[127] == 1.0f);
  CHECK(decoded[0] == std::ldexp(1.0f, -127));  // subnormal in fp32, still exact
  CHECK(decoded[254] == std::ldexp(1.0f, 127));
}

TEST_CASE("integers and bool convert to their values", "[io][dtype]") {
  CHECK(convert<uint8_t>(DType::BOOL, {0, 1, 7}) == std::vector<float>{0, 1, 1});
  CHECK(convert<uint8_t>(DType::U8, {0, 1, 255}) == std::vector<float>{0, 1, 255});
  CHECK(convert<int8_t>(DType::I8, {-128, -1, 127}) == std::vector<float>{-128, -1, 127});
  CHECK(convert<int16_t>(DType::I16, {-32768, 32767}) == std::vector<float>{-32768, 32767});
  CHECK(convert<uint16_t>(DType::U16, {65535, 3}) == std::vector<float>{65535, 3});
  CHECK(convert<int32_t>(DType::I32, {std::numeric_limits<int32_t>::min(), 16777216, -5}) ==
        std::vector<float>{-2147483648.0f, 16777216.0f, -5});
  CHECK(convert<uint32_t>(DType::U32, {4294967295u, 12}) == std::vector<float>{4294967296.0f, 12});
  CHECK(convert<int64_t>(DType::I64, {std::numeric_limits<int64_t>::min(), -(1ll << 24)}) ==
        std::vector<float>{-std::ldexp(1.0f, 63), -16777216.0f});
  CHECK(convert<uint64_t>(DType::U64, {std::numeric_limits<uint64_t>::max(), 1}) ==
        std::vector<float>{std::ldexp(1.0f, 64), 1});
}

TEST_CASE("F32 copies bits and F64 rounds to nearest", "[io][dtype]") {
  const std::vector<float> f32 = {1.5f, -0.0f, std::numeric_limits<float>::denorm_min(), FLT_MAX};
  const std::vector<float> copied = convert(DType::F32, f32);
  for (size_t i = 0; i < f32.size(); ++i) CHECK(bitsOf(copied[i]) == bitsOf(f32[i]));

  const double justAboveMax = static_cast<double>(FLT_MAX) * (1 + 1e-9);  // rounds down
  const std::vector<double> f64 = {1.5,          1.0 + std::ldexp(1.0, -30),
                                   -1e300,       1e300,
                                   justAboveMax, std::numeric_limits<double>::quiet_NaN(),
                                   1e-40,        1e-310,
                                   -0.0};
  const std::vector<float> decoded = convert(DType::F64, f64);
  CHECK(decoded[0] == 1.5f);
  CHECK(decoded[1] == 1.0f);
  CHECK(decoded[2] == -std::numeric_limits<float>::infinity());
  CHECK(decoded[3] == std::numeric_limits<float>::infinity());
  CHECK(decoded[4] == FLT_MAX);
  CHECK(std::isnan(decoded[5]));
  CHECK(decoded[6] == static_cast<float>(1e-40));
  CHECK(decoded[6] > 0);
  CHECK(decoded[7] == 0.0f);
  CHECK(bitsOf(decoded[8]) == 0x80000000u);

  // Halfway between FLT_MAX and 2^128 ties to even, which is infinity; just below stays finite.
  const double halfway = std::ldexp(1.0, 128) - std::ldexp(1.0, 103);
  const std::vector<float> edges =
      convert(DType::F64, std::vector<double>{halfway, std::nextafter(halfway, 0.0), -halfway});
  CHECK(edges[0] == std::numeric_limits<float>::infinity());
  CHECK(edges[1] == FLT_MAX);
  CHECK(edges[2] == -std::numeric_limits<float>::infinity());
}

TEST_CASE("conversion reads unaligned sources", "[io][dtype]") {
  // Element i holds a known value; the buffer starts one byte past an aligned address.
  std::vector<uint8_t> buffer(1 + 8 * 5);
  for (DType dtype : {DType::F16, DType::BF16, DType::F32, DType::F64, DType::I32, DType::I64}) {
    INFO("dtype " << fp4lab::io::dtypeName(dtype));
    const size_t size = fp4lab::io::dtypeSize(dtype);
    for (int i = 0; i < 5; ++i) {
      const double value = i - 2;
      uint8_t* slot = buffer.data() + 1 + i * size;
      switch (dtype) {
        case DType::F16: {
          // -2..2 in half: sign, exponent and mantissa picked by hand.
          const uint16_t halves[] = {0xc000, 0xbc00, 0x0000, 0x3c00, 0x4000};
          std::memcpy(slot, &halves[i], 2);
          break;
        }
        case DType::BF16: {
          const uint16_t bf16 = static_cast<uint16_t>(bitsOf(static_cast<float>(value)) >> 16);
          std::memcpy(slot, &bf16, 2);
          break;
        }
        case DType::F32: {
          const float f = static_cast<float>(value);
          std::memcpy(slot, &f, 4);
          break;
        }
        case DType::F64:
          std::memcpy(slot, &value, 8);
          break;
        case DType::I32: {
          const int32_t v = i - 2;
          std::memcpy(slot, &v, 4);
          break;
        }
        default: {
          const int64_t v = i - 2;
          std::memcpy(slot, &v, 8);
          break;
        }
      }
    }
    std::vector<float> out(5);
    convertToFloat32(dtype, buffer.data() + 1, 5, out.data());
    CHECK(out == std::vector<float>{-2, -1, 0, 1, 2});
  }
}
