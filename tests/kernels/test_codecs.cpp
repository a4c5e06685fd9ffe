// Exhaustive tests of the element and scale codecs in formats.h against definitions computed
// independently here (ldexp in double, nearest-value search), plus the RNG and the Hadamard.
#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "fp4lab/kernels/formats.h"

using namespace fp4lab;

namespace {

float fromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t toBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// E4M3FN by its definition: bias 7, subnormals m * 2^-9, S.1111.111 is NaN.
double e4m3Definition(int code) {
  int sign = code >> 7, e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return NAN;
  double v = e == 0 ? std::ldexp(double(m), -9) : std::ldexp(1.0 + m / 8.0, e - 7);
  return sign ? -v : v;
}

}  // namespace

TEST_CASE("E2M1 decodes all 16 codes as the spec's table", "[codecs][e2m1]") {
  const float magnitudes[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int code = 0; code < 16; ++code) {
    float v = e2m1Decode(uint8_t(code));
    float expected = (code & 8) ? -magnitudes[code & 7] : magnitudes[code & 7];
    CHECK(toBits(v) == toBits(expected));  // includes -0.0 for code 0x8
  }
}

TEST_CASE("E2M1 round-trips every code and rounds ties to even", "[codecs][e2m1]") {
  for (int code = 0; code < 16; ++code) CHECK(e2m1Encode(e2m1Decode(uint8_t(code))) == code);
  // The ties listed in fp4-numerics.md.
  struct Tie {
    float value, expected;
  } ties[] = {{0.25f, 0}, {0.75f, 1}, {1.25f, 1}, {1.75f, 2}, {2.5f, 2}, {3.5f, 4}, {5.0f, 4}};
  for (auto t : ties) {
    CHECK(e2m1Decode(e2m1Encode(t.value)) == t.expected);
    CHECK(e2m1Decode(e2m1Encode(-t.value)) == -t.expected);
    // Just off the tie, the nearest value wins.
    float above = std::nextafter(t.value, 100.0f), below = std::nextafter(t.value, 0.0f);
    float lo = 0, hi = 0;
    const float grid[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    for (int i = 0; i < 7; ++i)
      if (grid[i] < t.value && t.value < grid[i + 1]) lo = grid[i], hi = grid[i + 1];
    CHECK(e2m1Decode(e2m1Encode(above)) == hi);
    CHECK(e2m1Decode(e2m1Encode(below)) == lo);
  }
}

TEST_CASE("E2M1 saturates, keeps the sign of zero and of small negatives", "[codecs][e2m1]") {
  CHECK(e2m1Encode(6.5f) == 7);
  CHECK(e2m1Encode(1e30f) == 7);
  CHECK(e2m1Encode(INFINITY) == 7);
  CHECK(e2m1Encode(-1e30f) == 15);
  CHECK(e2m1Encode(-0.0f) == 8);
  CHECK(e2m1Encode(-0.1f) == 8);
  CHECK(e2m1Encode(0.0f) == 0);
  CHECK(e2m1Encode(fromBits(1)) == 0);  // the smallest subnormal
}

TEST_CASE("E2M1 nearest-even encoding matches a nearest-value search on random values",
          "[codecs][e2m1]") {
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> dist(-8.0f, 8.0f);
  const float grid[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int n = 0; n < 200000; ++n) {
    float v = dist(rng);
    float a = std::fabs(v);
    int best = 0;
    for (int i = 1; i < 8; ++i) {
      float d = std::fabs(a - grid[i]), db = std::fabs(a - grid[best]);
      if (d < db || (d == db && i % 2 == 0)) best = i;
    }
    REQUIRE(int(e2m1Encode(v) & 7) == best);
  }
}

TEST_CASE("E4M3 decodes all 256 codes by the definition", "[codecs][e4m3]") {
  for (int code = 0; code < 256; ++code) {
    double expected = e4m3Definition(code);
    float v = e4m3Decode(uint8_t(code));
    if (std::isnan(expected)) {
      CHECK(std::isnan(v));
      CHECK((code == 0x7F || code == 0xFF));
    } else {
      CHECK(double(v) == expected);
    }
  }
  CHECK(e4m3Decode(0x7E) == 448.0f);
  CHECK(e4m3Decode(0x01) == std::ldexp(1.0f, -9));
}

TEST_CASE("E4M3 scale encoding: every code round-trips, midpoints round to even",
          "[codecs][e4m3]") {
  for (int code = 0; code <= 0x7E; ++code)
    CHECK(e4m3EncodeScale(e4m3Decode(uint8_t(code))) == code);
  for (int code = 0; code < 0x7E; ++code) {
    double lo = e4m3Definition(code), hi = e4m3Definition(code + 1);
    float mid = float((lo + hi) / 2);  // exactly representable: at most 5 significant bits
    REQUIRE(double(mid) == (lo + hi) / 2);
    int even = code % 2 == 0 ? code : code + 1;
    CHECK(e4m3EncodeScale(mid) == even);
    CHECK(e4m3EncodeScale(std::nextafter(mid, 0.0f)) == code);
    CHECK(e4m3EncodeScale(std::nextafter(mid, 1000.0f)) == code + 1);
  }
}

TEST_CASE("E4M3 scale encoding saturates to 448 and maps NaN to NaN", "[codecs][e4m3]") {
  CHECK(e4m3EncodeScale(448.0f) == 0x7E);
  CHECK(e4m3EncodeScale(460.0f) == 0x7E);
  CHECK(e4m3EncodeScale(1e30f) == 0x7E);
  CHECK(e4m3EncodeScale(INFINITY) == 0x7E);
  CHECK(e4m3EncodeScale(NAN) == 0x7F);
  CHECK(e4m3EncodeScale(0.0f) == 0x00);
  CHECK(e4m3EncodeScale(std::ldexp(1.0f, -10)) == 0x00);  // tie between 0 and 2^-9: even
  CHECK(e4m3EncodeScale(std::nextafter(std::ldexp(1.0f, -10), 1.0f)) == 0x01);
  CHECK(e4m3EncodeScale(fromBits(1)) == 0x00);
}

TEST_CASE("E4M3 scale encoding equals a nearest-value search on random values", "[codecs][e4m3]") {
  std::mt19937 rng(99);
  std::uniform_real_distribution<float> logMag(-12.0f, 9.5f);
  for (int n = 0; n < 100000; ++n) {
    float v = std::exp2(logMag(rng));
    int best = 0;
    for (int code = 1; code <= 0x7E; ++code) {
      double d = std::fabs(double(v) - e4m3Definition(code)),
             db = std::fabs(double(v) - e4m3Definition(best));
      if (d < db || (d == db && code % 2 == 0)) best = code;
    }
    if (v >= 448.0f) best = 0x7E;
    REQUIRE(e4m3EncodeScale(v) == best);
  }
}

TEST_CASE("E8M0 decodes all 255 finite codes to 2^(b-127); 0xFF is NaN", "[codecs][e8m0]") {
  for (int b = 0; b < 255; ++b) {
    CHECK(double(e8m0Decode(uint8_t(b))) == std::ldexp(1.0, b - 127));
    CHECK(e8m0Decode(uint8_t(b)) == exp2Exact(b - 127));
  }
  CHECK(std::isnan(e8m0Decode(0xFF)));
}

namespace {
// The MXFP4 exponent by definition, in double: smallest e with amax <= 6 * 2^e (ceil), or
// floor(log2(amax)) - 2 (floor); clamped to [-127, 127].
int mxExponentDefinition(float amax, ScaleRule rule) {
  if (amax == 0.0f) return -127;
  int e;
  if (rule == ScaleRule::Ceil) {
    e = -400;
    while (double(amax) > 6.0 * std::ldexp(1.0, e)) ++e;
  } else {
    int k = -400;
    while (std::ldexp(1.0, k + 1) <= double(amax)) ++k;
    e = k - 2;
  }
  return std::max(-127, std::min(127, e));
}
}  // namespace

TEST_CASE("MXFP4 shared exponent is exact just below powers of two", "[codecs][e8m0]") {
  // log2f rounds these up and gives a scale one too large.
  float cases[] = {7.9999995f, 15.999999f, FLT_MAX, 0.99999994f, 3.9999998f};
  for (float a : cases) {
    CHECK(mxfp4SharedExponent(a, ScaleRule::Floor) == mxExponentDefinition(a, ScaleRule::Floor));
    CHECK(mxfp4SharedExponent(a, ScaleRule::Ceil) == mxExponentDefinition(a, ScaleRule::Ceil));
  }
  CHECK(mxfp4SharedExponent(7.9999995f, ScaleRule::Floor) == 0);
  CHECK(mxfp4SharedExponent(8.0f, ScaleRule::Floor) == 1);
  CHECK(mxfp4SharedExponent(FLT_MAX, ScaleRule::Floor) == 125);
  CHECK(mxfp4SharedExponent(FLT_MAX, ScaleRule::Ceil) == 126);
  CHECK(mxfp4SharedExponent(6.0f, ScaleRule::Ceil) == 0);
  CHECK(mxfp4SharedExponent(std::nextafter(6.0f, 7.0f), ScaleRule::Ceil) == 1);
  CHECK(mxfp4SharedExponent(0.0f, ScaleRule::Ceil) == -127);
  CHECK(mxfp4SharedExponent(fromBits(1), ScaleRule::Ceil) == -127);  // clamped
}

TEST_CASE("MXFP4 shared exponent equals the definition across the float range", "[codecs][e8m0]") {
  std::mt19937 rng(7);
  std::vector<float> values;
  for (int k = -149; k <= 127; ++k) {  // powers of two, 6 * 2^k and their neighbours
    for (float base : {std::ldexp(1.0f, k), std::ldexp(1.5f, k)}) {
      if (!std::isfinite(base) || base == 0) continue;
      values.insert(values.end(),
                    {base, std::nextafter(base, 0.0f), std::nextafter(base, INFINITY)});
    }
  }
  std::uniform_int_distribution<uint32_t> bits(1, 0x7F7FFFFFu);
  for (int n = 0; n < 200000; ++n) values.push_back(fromBits(bits(rng)));
  for (float a : values) {
    if (!std::isfinite(a) || a <= 0) continue;
    REQUIRE(mxfp4SharedExponent(a, ScaleRule::Ceil) == mxExponentDefinition(a, ScaleRule::Ceil));
    REQUIRE(mxfp4SharedExponent(a, ScaleRule::Floor) == mxExponentDefinition(a, ScaleRule::Floor));
  }
}

TEST_CASE("Philox4x32-10 matches the Random123 known-answer vectors", "[codecs][rng]") {
  Philox4 zero = philox4x32(Philox4{{0, 0, 0, 0}}, 0, 0);
  CHECK(zero.v[0] == 0x6627e8d5u);
  CHECK(zero.v[1] == 0xe169c58du);
  CHECK(zero.v[2] == 0xbc57ac4cu);
  CHECK(zero.v[3] == 0x9b00dbd8u);
  Philox4 ones = philox4x32(Philox4{{~0u, ~0u, ~0u, ~0u}}, ~0u, ~0u);
  CHECK(ones.v[0] == 0x408f276du);
  CHECK(ones.v[1] == 0x41c83b0eu);
  CHECK(ones.v[2] == 0xa20bc7c6u);
  CHECK(ones.v[3] == 0x6d5451fdu);
  Philox4 pi = philox4x32(Philox4{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}},
                          0xa4093822u, 0x299f31d0u);
  CHECK(pi.v[0] == 0xd16cfe09u);
  CHECK(pi.v[1] == 0x94fdccebu);
  CHECK(pi.v[2] == 0x5001e420u);
  CHECK(pi.v[3] == 0x24126ea1u);
}

TEST_CASE("Stochastic rounding is unbiased, bounded to neighbours, and seeded", "[codecs][rng]") {
  const float values[] = {0.1f, 0.3f, 0.74f, 1.2f, 2.2f, 3.3f, 4.9f, 5.5f};
  for (float v : values) {
    double sum = 0;
    const int n = 200000;
    float lo = e2m1Magnitude(e2m1FloorIndex(v)),
          hi = e2m1Magnitude(std::min(7, e2m1FloorIndex(v) + 1));
    for (int i = 0; i < n; ++i) {
      float q = e2m1Decode(e2m1EncodeStochastic(v, stochasticUniform(42, uint64_t(i))));
      REQUIRE((q == lo || q == hi));
      sum += q;
    }
    // Standard error of the mean is below (hi - lo) / (2 sqrt(n)); allow 5 sigma.
    CHECK(std::fabs(sum / n - v) < 5 * (hi - lo) / (2 * std::sqrt(double(n))));
  }
  CHECK(e2m1EncodeStochastic(7.0f, 0.999f) == 7);       // saturates
  CHECK(e2m1EncodeStochastic(-2.0f, 0.0f) == (8 | 4));  // grid points stay put
  // Same seed and index: same draw; different seeds: different streams.
  CHECK(stochasticUniform(1, 10) == stochasticUniform(1, 10));
  int same = 0;
  for (uint64_t i = 0; i < 1000; ++i) same += stochasticUniform(1, i) == stochasticUniform(2, i);
  CHECK(same < 5);
}

TEST_CASE("Hadamard matrix is orthogonal and the sign vector is fixed", "[codecs][hadamard]") {
  for (int i = 0; i < 16; ++i)
    for (int k = 0; k < 16; ++k) {
      float dot = 0;
      for (int j = 0; j < 16; ++j) dot += hadamardEntry(i, j) * hadamardEntry(k, j);
      CHECK(dot == (i == k ? 16.0f : 0.0f));
    }
  int negatives = 0;
  for (int j = 0; j < 16; ++j) negatives += hadamardSign(j) < 0;
  CHECK(negatives > 0);
  CHECK(negatives < 16);
}
