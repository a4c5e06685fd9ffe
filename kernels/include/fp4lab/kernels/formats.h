// FP4 element and scale codecs (E2M1, E4M3, E8M0), block layouts and the counter-based RNG.
// Compiled by both the C++ and the CUDA compiler; see docs/numerics.md for the rules.
#pragma once

#include <stdint.h>

#if defined(__CUDACC__)
#define FP4LAB_HD __host__ __device__ __forceinline__
#else
#define FP4LAB_HD inline
#endif

namespace fp4lab {

constexpr int kMxfp4BlockSize = 32;
constexpr int kNvfp4BlockSize = 16;
constexpr int kHadamardSize = 16;
constexpr float kE2M1Max = 6.0f;
constexpr float kE4M3Max = 448.0f;
// NVFP4 global scale = tensor amax / (E2M1 max * E4M3 max).
constexpr float kNvfp4GlobalDivisor = kE2M1Max * kE4M3Max;  // 2688
constexpr int kE8M0Bias = 127;
constexpr uint8_t kE8M0NaN = 0xFF;
constexpr uint8_t kE4M3NaN = 0x7F;
constexpr uint8_t kE4M3MaxCode = 0x7E;

// On-disk/in-memory block layouts. Two E2M1 codes per byte, even element in the low nibble.
struct Mxfp4Block {
  uint8_t packed[kMxfp4BlockSize / 2];
};
struct Nvfp4Block {
  uint8_t packed[kNvfp4BlockSize / 2];
};
static_assert(sizeof(Mxfp4Block) == 16, "MXFP4 block: 32 codes in 16 bytes");
static_assert(sizeof(Nvfp4Block) == 8, "NVFP4 block: 16 codes in 8 bytes");
static_assert(sizeof(float) == 4 && sizeof(uint32_t) == 4, "IEEE binary32 expected");

FP4LAB_HD uint32_t floatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  return u;
#endif
}

FP4LAB_HD float bitsToFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
#endif
}

FP4LAB_HD bool isFiniteFloat(float f) {
  return (floatBits(f) & 0x7F800000u) != 0x7F800000u;
}
FP4LAB_HD float absFloat(float f) {
  return bitsToFloat(floatBits(f) & 0x7FFFFFFFu);
}

// ---- E2M1 -------------------------------------------------------------------------------

// Magnitude of E2M1 index 0..7.
FP4LAB_HD float e2m1Magnitude(int idx) {
  // 0, 0.5, 1, 1.5, 2, 3, 4, 6 as exact arithmetic (no table: usable in device code).
  return idx < 4 ? 0.5f * static_cast<float>(idx)
                 : static_cast<float>(2 << ((idx - 4) >> 1)) *
                       (1.0f + 0.5f * static_cast<float>(idx & 1));
}

FP4LAB_HD float e2m1Decode(uint8_t code) {
  float m = e2m1Magnitude(code & 7);
  return (code & 8) ? -m : m;
}

// Round-to-nearest-even index of a non-negative magnitude, saturating at 6. Ties go to the
// even index: 0.25->0, 0.75->1.0, 1.25->1.0, 1.75->2, 2.5->2, 3.5->4, 5->4.
FP4LAB_HD int e2m1NearestIndex(float a) {
  return (a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) + (a >= 3.5f) +
         (a > 5.0f);
}

// Index of the largest E2M1 magnitude <= a (a >= 0), for stochastic rounding.
FP4LAB_HD int e2m1FloorIndex(float a) {
  return (a >= 0.5f) + (a >= 1.0f) + (a >= 1.5f) + (a >= 2.0f) + (a >= 3.0f) + (a >= 4.0f) +
         (a >= 6.0f);
}

// The sign bit is the IEEE sign of the input, so -0.0 and negatives that round to zero give 0x8.
FP4LAB_HD uint8_t e2m1SignBit(float v) {
  return static_cast<uint8_t>((floatBits(v) >> 28) & 8u);
}

FP4LAB_HD uint8_t e2m1Encode(float v) {
  return static_cast<uint8_t>(e2m1SignBit(v) | e2m1NearestIndex(absFloat(v)));
}

// Stochastic rounding: round up with probability equal to the fractional position of |v|
// between its two neighbouring magnitudes; `uniform` is in [0, 1).
FP4LAB_HD uint8_t e2m1EncodeStochastic(float v, float uniform) {
  float a = absFloat(v);
  int lo = e2m1FloorIndex(a);
  int idx = lo;
  if (lo < 7) {
    float lower = e2m1Magnitude(lo);
    float upper = e2m1Magnitude(lo + 1);
    float p = (a - lower) / (upper - lower);
    idx = uniform < p ? lo + 1 : lo;
  }
  return static_cast<uint8_t>(e2m1SignBit(v) | idx);
}

// ---- E8M0 -------------------------------------------------------------------------------

FP4LAB_HD float e8m0Decode(uint8_t b) {
  if (b == kE8M0NaN) return bitsToFloat(0x7FC00000u);
  if (b == 0) return bitsToFloat(0x00400000u);  // 2^-127 is a float subnormal
  return bitsToFloat(static_cast<uint32_t>(b) << 23);
}

// 2^e for e in [-127, 127], exact.
FP4LAB_HD float exp2Exact(int e) {
  return e8m0Decode(static_cast<uint8_t>(e + kE8M0Bias));
}

// floor(log2(a)) of a finite a > 0, exactly from the bits (log2f rounds up just below powers
// of two). Returns the exponent and whether the significand is <= 1.5.
FP4LAB_HD int floorLog2Exact(float a, bool* significandAtMostOneAndHalf) {
  uint32_t bits = floatBits(a) & 0x7FFFFFFFu;
  int biased = static_cast<int>(bits >> 23);
  uint32_t mant = bits & 0x7FFFFFu;
  int e;
  if (biased == 0) {  // subnormal: value = mant * 2^-149
#if defined(__CUDA_ARCH__)
    int msb = 31 - __clz(mant);
#else
    int msb = 31 - __builtin_clz(mant);
#endif
    e = msb - 149;
    uint32_t below = mant & ((1u << msb) - 1u);  // bits below the leading one
    // significand = 1 + below / 2^msb; <= 1.5  <=>  below <= 2^(msb-1)
    *significandAtMostOneAndHalf = msb == 0 || below <= (1u << (msb - 1));
  } else {
    e = biased - 127;
    *significandAtMostOneAndHalf = mant <= 0x400000u;
  }
  return e;
}

enum class ScaleRule { Ceil, Floor };

// MXFP4 shared exponent of a block with finite amax >= 0, clamped to [-127, 127].
FP4LAB_HD int mxfp4SharedExponent(float amax, ScaleRule rule) {
  if (!(amax > 0.0f)) return -127;
  bool atMostOneAndHalf;
  int e = floorLog2Exact(amax, &atMostOneAndHalf);
  int shared;
  if (rule == ScaleRule::Floor) {
    shared = e - 2;  // OCP MX v1.0
  } else {
    // smallest s with amax <= 6 * 2^s: amax = m 2^e, 6 * 2^s = 1.5 * 2^(s+2)
    shared = atMostOneAndHalf ? e - 2 : e - 1;
  }
  return shared < -127 ? -127 : (shared > 127 ? 127 : shared);
}

// ---- E4M3 (E4M3FN) ----------------------------------------------------------------------

FP4LAB_HD float e4m3Decode(uint8_t code) {
  int exponent = (code >> 3) & 0xF;
  int mant = code & 7;
  float m;
  if (exponent == 0xF && mant == 7) {
    m = bitsToFloat(0x7FC00000u);
  } else if (exponent == 0) {
    m = static_cast<float>(mant) * 0.001953125f;  // mant * 2^-9
  } else {
    m = bitsToFloat(static_cast<uint32_t>(exponent - 7 + 127) << 23 | static_cast<uint32_t>(mant)
                                                                          << 20);
  }
  return (code & 0x80) ? -m : m;
}

// Round to nearest even, saturating to 448, for scale values v >= 0 (NaN -> 0x7F).
FP4LAB_HD uint8_t e4m3EncodeScale(float v) {
  if (v != v) return kE4M3NaN;
  if (v >= kE4M3Max) return kE4M3MaxCode;
  if (v < 0.015625f) {  // below 2^-6: subnormal codes m * 2^-9, m = rne(v * 512) in 0..8
    float t = v * 512.0f;
    // t in [0, 8): adding 2^23 rounds to an integer with the current (nearest-even) mode.
    float r = (t + 8388608.0f) - 8388608.0f;
    return static_cast<uint8_t>(static_cast<int>(r));
  }
  uint32_t bits = floatBits(v);
  // Round the 23-bit mantissa to 3 bits, ties to even; a carry correctly bumps the exponent.
  uint32_t rounded = (bits + 0x7FFFFu + ((bits >> 20) & 1u)) >> 20;
  uint32_t code = rounded - ((127u - 7u) << 3);
  return static_cast<uint8_t>(code > kE4M3MaxCode ? kE4M3MaxCode : code);
}

// ---- NVFP4 tensor scale ----------------------------------------------------------------

// s2 = amax / 2688 (ModelOpt's weight_scale_2); 1 for an all-zero tensor. A tiny amax whose
// quotient underflows gets the smallest subnormal instead of 0, so block scales never divide by 0.
FP4LAB_HD float nvfp4GlobalScale(float amax) {
  if (!(amax > 0.0f)) return 1.0f;
  float s2 = amax / kNvfp4GlobalDivisor;
  return s2 > 0.0f ? s2 : bitsToFloat(1u);
}

// ---- Counter-based RNG (Philox4x32-10) --------------------------------------------------

struct Philox4 {
  uint32_t v[4];
};

FP4LAB_HD void philoxMulHiLo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  uint64_t p = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(p >> 32);
  *lo = static_cast<uint32_t>(p);
}

// Philox4x32-10 (Salmon et al., SC'11), as in Random123 and cuRAND.
FP4LAB_HD Philox4 philox4x32(Philox4 ctr, uint32_t k0, uint32_t k1) {
  uint32_t c0 = ctr.v[0], c1 = ctr.v[1], c2 = ctr.v[2], c3 = ctr.v[3];
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    uint32_t hi0, lo0, hi1, lo1;
    philoxMulHiLo(0xD2511F53u, c0, &hi0, &lo0);
    philoxMulHiLo(0xCD9E8D57u, c2, &hi1, &lo1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
  }
  Philox4 r = {{c0, c1, c2, c3}};
  return r;
}

// Uniform in [0, 1) for element `index` of a tensor: one Philox call serves four elements.
FP4LAB_HD float stochasticUniform(uint64_t seed, uint64_t index) {
  uint64_t block = index >> 2;
  Philox4 ctr = {{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0u, 0u}};
  Philox4 r = philox4x32(ctr, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return static_cast<float>(r.v[index & 3] >> 8) * 5.9604644775390625e-08f;  // * 2^-24
}

// ---- Random Hadamard transform (16 x 16, Sylvester, scaled by 1/4, fixed signs) --------

// Fixed sign vector d: the transform is y = (H / 4) diag(d) x per tile of 16.
FP4LAB_HD float hadamardSign(int j) {
  return ((0x6A3Cu >> j) & 1u) ? -1.0f : 1.0f;
}
// Entry (i, j) of the unnormalised Sylvester Hadamard matrix: (-1)^popcount(i & j).
FP4LAB_HD float hadamardEntry(int i, int j) {
#if defined(__CUDA_ARCH__)
  return (__popc(static_cast<unsigned>(i & j)) & 1) ? -1.0f : 1.0f;
#else
  return (__builtin_popcount(static_cast<unsigned>(i & j)) & 1) ? -1.0f : 1.0f;
#endif
}

}  // namespace fp4lab
