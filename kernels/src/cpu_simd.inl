// The vectorized CPU kernels, written once with GCC vector extensions (16 fp32 lanes) and
// compiled three times: generic (baseline x86-64), AVX2 and AVX-512 (cpu_*.cpp set the ISA
// flags and FP4LAB_SIMD_NS). Rare blocks (NaN/Inf, zero NVFP4 scale) and stochastic rounding
// take the scalar block path, built on the same formats.h codecs. Must match ref.cpp bit for bit.
#include <algorithm>
#include <cstring>
#include <vector>

#ifdef __AVX512F__
#include <immintrin.h>
#endif

#include "backend.h"

namespace fp4lab::kernels::FP4LAB_SIMD_NS {
namespace {

typedef float V __attribute__((vector_size(64)));
typedef int32_t VI __attribute__((vector_size(64)));
typedef uint32_t VU __attribute__((vector_size(64)));
typedef uint32_t VU8 __attribute__((vector_size(32)));
typedef uint32_t VU4 __attribute__((vector_size(16)));
typedef int32_t VI8 __attribute__((vector_size(32)));
typedef uint8_t VB8 __attribute__((vector_size(8)));
typedef uint16_t VH __attribute__((vector_size(32)));  // 16 BF16 values (raw bits)

constexpr int kLanes = 16;

inline V load(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, V v) {
  std::memcpy(p, &v, sizeof v);
}
inline V splat(float f) {
  return V{} + f;
}
inline VU splatU(uint32_t u) {
  return VU{} + u;
}
inline VU minU(VU a, VU b) {
  return a < b ? a : b;
}
inline VU maxU(VU a, VU b) {
  return a > b ? a : b;
}
inline V maxV(V a, V b) {
  return a > b ? a : b;
}

inline uint32_t hmaxU(VU v) {
  VU8 a = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7);
  VU8 b = __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
  VU8 m8 = a > b ? a : b;
  VU4 c = __builtin_shufflevector(m8, m8, 0, 1, 2, 3);
  VU4 d = __builtin_shufflevector(m8, m8, 4, 5, 6, 7);
  VU4 m4 = c > d ? c : d;
  uint32_t r = m4[0];
  for (int i = 1; i < 4; ++i) r = m4[i] > r ? m4[i] : r;
  return r;
}

// ---- Hadamard: each output lane sums its 16 terms in order j = 0..15, like ref.cpp --------

struct HadamardCoefficients {
  V forward[16];  // lane i: H(i, j) * d(j)
  V inverse[16];  // lane i: H(i, j)
  V sign;         // lane i: d(i)
  HadamardCoefficients() {
    for (int j = 0; j < 16; ++j)
      for (int i = 0; i < 16; ++i) {
        forward[j][i] = hadamardEntry(i, j) * hadamardSign(j);
        inverse[j][i] = hadamardEntry(i, j);
      }
    for (int i = 0; i < 16; ++i) sign[i] = hadamardSign(i);
  }
};
const HadamardCoefficients& hadamardCoefficients() {
  static const HadamardCoefficients c;
  return c;
}

inline void hadamardTile(const float* x, float* y, bool inverse) {
  const HadamardCoefficients& h = hadamardCoefficients();
  const V* coef = inverse ? h.inverse : h.forward;
  V acc = V{};
  for (int j = 0; j < 16; ++j) acc += coef[j] * x[j];
  acc = acc * 0.25f;
  if (inverse) acc = acc * h.sign;
  store(y, acc);
}

void hadamard(const float* x, float* y, int64_t count, bool inverse) {
  for (int64_t t = 0; t < count; t += 16) hadamardTile(x + t, y + t, inverse);
}

// ---- Scales ------------------------------------------------------------------------------

struct BlockScale {
  uint8_t byte = 0;
  float decoded = 0.0f;  // 2^e, or float(E4M3) * s2
  bool finite = true;
};

// ---- Statistics, accumulated in double lanes (fp32 squares overflow beyond 1e19) --------

typedef double VD __attribute__((vector_size(64)));
typedef double VD16 __attribute__((vector_size(128)));

// Converted as one 16-lane vector: GCC 12 turns a converted half into four 128-bit conversions.
inline VD lowHalf(V v) {
  VD16 d = __builtin_convertvector(v, VD16);
  return __builtin_shufflevector(d, d, 0, 1, 2, 3, 4, 5, 6, 7);
}
inline VD highHalf(V v) {
  VD16 d = __builtin_convertvector(v, VD16);
  return __builtin_shufflevector(d, d, 8, 9, 10, 11, 12, 13, 14, 15);
}
// A pairwise sum (fewer dependent additions than hsumD; per-block errors need no fixed order).
inline double treeSumD(VD v) {
  typedef double VD4 __attribute__((vector_size(32)));
  typedef double VD2 __attribute__((vector_size(16)));
  VD4 a = __builtin_shufflevector(v, v, 0, 1, 2, 3) + __builtin_shufflevector(v, v, 4, 5, 6, 7);
  VD2 b = __builtin_shufflevector(a, a, 0, 1) + __builtin_shufflevector(a, a, 2, 3);
  return b[0] + b[1];
}
inline double hsumD(VD v) {
  double s = 0.0;
  for (int i = 0; i < 8; ++i) s += v[i];
  return s;
}
inline VD absD(VD v) {
  return v < 0.0 ? -v : v;
}

struct StatsAccumulator {
  VD x2{}, e2{}, xq{}, q2{}, maxErr{};
  VI clipped{}, flushed{};
  fp4_error_stats* out;
  explicit StatsAccumulator(fp4_error_stats* o) : out(o) {}
  // Adds 16 elements; returns their squared errors, summed in pairs.
  VD add(V x, V q, V a, float clipLimit) {
    VD xl = lowHalf(x), xh = highHalf(x), ql = lowHalf(q), qh = highHalf(q);
    VD el = xl - ql, eh = xh - qh;  // exact in double
    VD errSq = el * el + eh * eh;
    x2 += xl * xl + xh * xh;
    e2 += errSq;
    xq += xl * ql + xh * qh;
    q2 += ql * ql + qh * qh;
    VD absErr = absD(el), absErrHigh = absD(eh);
    maxErr = maxErr > absErr ? maxErr : absErr;
    maxErr = maxErr > absErrHigh ? maxErr : absErrHigh;
    if (clipLimit > 0.0f) clipped -= (a > clipLimit);
    flushed -= (a != 0.0f) & (q == 0.0f);
    out->count += kLanes;
    return errSq;
  }
  void flush() {
    out->sum_x2 += hsumD(x2);
    out->sum_err2 += hsumD(e2);
    out->sum_xq += hsumD(xq);
    out->sum_q2 += hsumD(q2);
    for (int i = 0; i < 8; ++i)
      if (maxErr[i] > out->max_abs_err) out->max_abs_err = maxErr[i];
    for (int i = 0; i < kLanes; ++i) {
      out->clipped += clipped[i];
      out->flushed += flushed[i];
    }
  }
};

// ---- The scalar block path (NaN/Inf blocks, zero NVFP4 scales, stochastic rounding) -------

uint8_t scalarCode(const Job& job, float scaled, int64_t r, int64_t c) {
  if (job.cfg.rounding == FP4_ROUNDING_STOCHASTIC) {
    uint64_t index = uint64_t(r) * uint64_t(job.cols) + uint64_t(c) + job.cfg.seed_offset;
    return e2m1EncodeStochastic(scaled, stochasticUniform(job.cfg.seed, index));
  }
  return e2m1Encode(scaled);
}

// Codes of one block (vals: its possibly rotated inputs). Writes codes[] (one per element).
void scalarBlockCodes(const Job& job, const BlockScale& s, const float* vals, int64_t r, int64_t c0,
                      uint8_t* codes) {
  bool zero = !s.finite || s.decoded == 0.0f;
  for (int i = 0; i < job.block; ++i)
    codes[i] = zero ? 0 : scalarCode(job, vals[i] / s.decoded, r, c0 + i);
}

// ---- Vector element path ----------------------------------------------------------------

// mx: scaled = |x| * 2^-e (exactly the same rounding as dividing by 2^e); NVFP4: |x| / decoded.
// The E2M1 index depends only on how |x| / scale compares with thresholds >= 0.25. For NVFP4 the
// quotient is |x| times the double reciprocal of the scale, rounded to float: a quotient of two
// floats is never exactly a float midpoint in the normal range (its odd part would need 25 bits)
// and the double product is within 2^-52 of it, so the rounding is the division's; below 0.25
// (where a subnormal could round differently) every value gets index 0 either way.
inline V quotient(V a, double reciprocal) {
  // One 16-lane conversion each way: GCC 12 compiles it to two 512-bit ones, where converting
  // the two halves separately becomes eight 128-bit conversions.
  return __builtin_convertvector(__builtin_convertvector(a, VD16) * reciprocal, V);
}

// E2M1 round to nearest even of magnitudes s >= 0 (not NaN), as the E2M1 values themselves: below
// 2 the grid step is 0.5, in [2, 4) 1, in [4, 6] 2, so adding and subtracting 2^22, 2^23 or 2^24
// rounds to the grid with the FPU's ties-to-even, which are e2m1NearestIndex's ties (0.25->0,
// 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4). Everything above 6 saturates to 6.
inline V e2m1Round(V s) {
  s = (V)minU((VU)s, splatU(0x40C00000u));  // 6.0; the bits of floats >= 0 order like them
  V magic = (V)(maxU((VU)s & 0x7F800000u, splatU(0x3F800000u)) + (22u << 23));
  return (s + magic) - magic;
}

// The E2M1 magnitudes (as float bits) of 16 elements. mx: `factor` is 2^-e; NVFP4: `reciprocal`
// is 1 / decoded in double.
inline VU e2m1Magnitudes(bool mx, float factor, double reciprocal, V x) {
  V a = (V)((VU)x & 0x7FFFFFFFu);
  return (VU)e2m1Round(mx ? a * factor : quotient(a, reciprocal));
}

// Codes (sign << 3 | index) of 16 elements.
inline VU encodeCodes(bool mx, float factor, double reciprocal, V x) {
  VU rounded = e2m1Magnitudes(mx, factor, reciprocal, x);
  // 0 and 0.5 are indices 0 and 1; from 1.0 = 0x3F800000 on, the exponent and the single
  // mantissa bit count up from index 2.
  VU idx = rounded >= 0x3F800000u ? (rounded >> 22) - 252u : rounded >> 29;
  return ((VU)x & 0x80000000u) >> 28 | idx;
}

// Fake-quantized values of 16 elements: the signed E2M1 value times the decoded scale.
inline V fakeQuant(bool mx, float factor, double reciprocal, float decoded, V x) {
  return (V)(e2m1Magnitudes(mx, factor, reciprocal, x) | ((VU)x & 0x80000000u)) * decoded;
}

#ifdef __AVX512F__
// NVFP4 with FMA (AVX-512 has it): the quotient |x| / decoded correctly rounded in float, by
// Markstein's theorem: with inverse = RN(1 / decoded) and q = RN(|x| * inverse), the remainder
// |x| - q * decoded is exact and RN(q + remainder * inverse) is RN(|x| / decoded), provided
// nothing overflows or underflows (groupScales admits only blocks where that holds).
inline V fakeQuantFma(const float* inverse, const float* decoded, V x) {
  V a = (V)((VU)x & 0x7FFFFFFFu);
  // Broadcasts from memory take a load port, not the shuffle port the rest of the loop needs.
  __m512 av = (__m512)a, inv = _mm512_set1_ps(*inverse), d = _mm512_set1_ps(*decoded);
  __m512 q = _mm512_mul_ps(av, inv);
  __m512 remainder = _mm512_fnmadd_ps(q, d, av);
  V scaled = (V)_mm512_fmadd_ps(remainder, inv, q);
  return (V)_mm512_mul_ps((__m512)((VU)e2m1Round(scaled) | ((VU)x & 0x80000000u)), d);
}
#endif

inline void packCodes(VU codes, uint8_t* dst) {
  VU8 even = __builtin_shufflevector(codes, codes, 0, 2, 4, 6, 8, 10, 12, 14);
  VU8 odd = __builtin_shufflevector(codes, codes, 1, 3, 5, 7, 9, 11, 13, 15);
  VB8 bytes = __builtin_convertvector(even | (odd << 4), VB8);
  std::memcpy(dst, &bytes, 8);
}

inline void packScalarCodes(const uint8_t* codes, int n, uint8_t* dst) {
  for (int i = 0; i < n; i += 2) dst[i / 2] = uint8_t(codes[i] | codes[i + 1] << 4);
}

// ---- Groups of 16 blocks: amax, scale bytes and scale values computed 16 lanes at a time ----

// Lane i of the result is the max over the 16 lanes of m[i] (a transposing reduction).
inline VU reduceMax16(const VU* m) {
  VU r1[8], r2[4], r3[2];
  for (int k = 0; k < 8; ++k) {
    VU a = m[2 * k], b = m[2 * k + 1];
    r1[k] =
        maxU(__builtin_shufflevector(a, b, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23),
             __builtin_shufflevector(a, b, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30,
                                     31));
  }
  for (int k = 0; k < 4; ++k) {
    VU a = r1[2 * k], b = r1[2 * k + 1];
    r2[k] = maxU(
        __builtin_shufflevector(a, b, 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27),
        __builtin_shufflevector(a, b, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31));
  }
  for (int k = 0; k < 2; ++k) {
    VU a = r2[2 * k], b = r2[2 * k + 1];
    r3[k] = maxU(
        __builtin_shufflevector(a, b, 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29),
        __builtin_shufflevector(a, b, 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31));
  }
  VU a = r3[0], b = r3[1];
  return maxU(
      __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30),
      __builtin_shufflevector(a, b, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31));
}

// E4M3 scale encoding of 16 values >= 0, as e4m3EncodeScale (non-finite lanes are replaced later).
inline VI e4m3EncodeScales(V v) {
  VU bits = (VU)v;
  VI normal = (VI)((bits + 0x7FFFFu + ((bits >> 20) & 1u)) >> 20) - ((127 - 7) << 3);
  normal = normal > kE4M3MaxCode ? VI{} + kE4M3MaxCode : normal;
  V t = v * 512.0f;
  VI sub = __builtin_convertvector((t + 8388608.0f) - 8388608.0f, VI);
  VI code = v < 0.015625f ? sub : normal;
  return v >= kE4M3Max ? VI{} + kE4M3MaxCode : code;
}

inline V e4m3DecodeScales(VI code) {
  VI exponent = code >> 3, mant = code & 7;
  V sub = __builtin_convertvector(mant, V) * 0.001953125f;
  V normal = (V)(((exponent + 120) << 23) | (mant << 20));
  return exponent == 0 ? sub : normal;
}

// 2^e as float bits for biased exponents 0..254 (0 is the subnormal 2^-127).
inline VI exp2Bits(VI biased) {
  return biased == 0 ? VI{} + 0x00400000 : biased << 23;
}

struct GroupScales {
  alignas(64) float decoded[kLanes];         // 2^e, or float(E4M3) * s2; NaN for non-finite blocks
  alignas(64) float multiplier[kLanes];      // MXFP4: 2^-e
  alignas(64) double reciprocal[kLanes];     // NVFP4: 1 / decoded, correctly rounded in double
  alignas(64) float inverse[kLanes];         // NVFP4: 1 / decoded, correctly rounded in float
  alignas(64) int32_t fmaOk[kLanes];         // NVFP4: vectorOk, and fakeQuantFma is exact
  uint32_t vectorOkMask = 0, fmaOkMask = 0;  // bit i: lane i of vectorOk, fmaOk
  alignas(64) int32_t vectorOk[kLanes];      // finite, non-zero scale, nearest rounding
  alignas(64) int32_t bytes[kLanes];
};

// Bit i set where lane i is non-zero.
inline uint32_t laneMask(VI v) {
#ifdef __AVX512F__
  return _mm512_test_epi32_mask((__m512i)v, (__m512i)v);
#else
  uint32_t m = 0;
  for (int i = 0; i < kLanes; ++i) m |= uint32_t(v[i] != 0) << i;
  return m;
#endif
}

// amax / d6 correctly rounded (d6 = 6 s2: the E4M3 scale before encoding).
inline V scaleQuotients(V amax, VI finite, float d6) {
#ifdef __AVX512F__
  // Markstein's correction as in fakeQuantFma, without a division on the group's critical path.
  // Exact when the inverse is normal, the finite quotients stay below 2^20 and d6 >= 2^-80 (the
  // remainder of a quotient >= 2^-11 is then a multiple of 2^-137; smaller quotients encode to 0
  // either way). Non-finite lanes are replaced by the caller.
  if (d6 >= 0x1p-80f && d6 <= 0x1p80f && !laneMask(finite & (amax > d6 * 0x1p20f))) {
    __m512 a = (__m512)amax, d = _mm512_set1_ps(d6), inverse = _mm512_set1_ps(1.0f / d6);
    __m512 q = _mm512_mul_ps(a, inverse);
    return (V)_mm512_fmadd_ps(_mm512_fnmadd_ps(q, d, a), inverse, q);
  }
#else
  (void)finite;
#endif
  return amax / d6;
}

inline void groupScales(const Job& job, VU amaxBits, GroupScales& g) {
  VI finite = amaxBits < 0x7F800000u;
  VI bytes;
  V decoded, multiplier{};
  if (job.cfg.format == FP4_FORMAT_MXFP4) {
    // mxfp4SharedExponent, 16 lanes: subnormal amax (biased 0) always clamps to -127.
    VI biased = (VI)(amaxBits >> 23);
    VI e = biased - 127;
    VI shared;
    if (job.cfg.scale_rule == FP4_SCALE_RULE_FLOOR) {
      shared = e - 2;
    } else {
      VI atMostOneAndHalf = (amaxBits & 0x7FFFFFu) <= 0x400000u;
      shared = atMostOneAndHalf ? e - 2 : e - 1;
    }
    shared = biased == 0 ? VI{} - 127 : shared;
    shared = shared < -127 ? VI{} - 127 : (shared > 127 ? VI{} + 127 : shared);
    bytes = shared + kE8M0Bias;
    decoded = (V)exp2Bits(bytes);
    multiplier = (V)exp2Bits(kE8M0Bias - shared);
    bytes = finite ? bytes : VI{} + kE8M0NaN;
  } else {
    V scaleValue = scaleQuotients((V)amaxBits, finite, 6.0f * job.globalScale);
    bytes = e4m3EncodeScales(scaleValue);
    decoded = e4m3DecodeScales(bytes) * job.globalScale;
    bytes = finite ? bytes : VI{} + kE4M3NaN;
  }
  decoded = finite ? decoded : (V)(VU{} + 0x7FC00000u);
  VI ok = finite & (decoded != 0.0f);
  if (job.cfg.rounding == FP4_ROUNDING_STOCHASTIC) ok = VI{};
  std::memcpy(g.decoded, &decoded, sizeof decoded);
  std::memcpy(g.multiplier, &multiplier, sizeof multiplier);
  if (job.cfg.format == FP4_FORMAT_NVFP4) {
    // fakeQuantFma's bounds: a normal inverse, quotients below 2^20 (so no overflow), and a
    // decoded scale large enough that the remainder of a quotient >= 0.25 cannot underflow.
    V inverse = 1.0f / decoded;
    VI fmaOk =
        ok & (decoded >= 0x1p-100f) & (decoded <= 0x1p100f) & ((V)amaxBits <= decoded * 0x1p20f);
    std::memcpy(g.inverse, &inverse, sizeof inverse);
    std::memcpy(g.fmaOk, &fmaOk, sizeof fmaOk);
    g.fmaOkMask = laneMask(fmaOk);
  }
  std::memcpy(g.vectorOk, &ok, sizeof ok);
  g.vectorOkMask = laneMask(ok);
  std::memcpy(g.bytes, &bytes, sizeof bytes);
}

// NVFP4: the double reciprocals of the decoded scales, for the paths without FMA (two vector
// divisions per 16 blocks instead of a scalar one per block).
inline void groupReciprocals(GroupScales& g) {
  V decoded;
  std::memcpy(&decoded, g.decoded, sizeof decoded);
  VD16 reciprocal = 1.0 / __builtin_convertvector(decoded, VD16);
  std::memcpy(g.reciprocal, &reciprocal, sizeof reciprocal);
}

// NVFP4 16x16 tiles: the amax (as bits, NaN/Inf >= 0x7F800000) of each column block over rows
// [r, rEnd), after rotation if asked.
void tileAmaxBits(const Job& job, int64_t r, int64_t rEnd, std::vector<uint32_t>& tile) {
  int64_t blocks = job.cols / job.block;
  tile.assign(size_t(blocks), 0u);
  alignas(64) float buf[16];
  for (int64_t rr = r; rr < rEnd; ++rr)
    for (int64_t b = 0; b < blocks; ++b) {
      const float* p = job.x + rr * job.cols + b * job.block;
      if (job.cfg.hadamard) {
        hadamardTile(p, buf, false);
        p = buf;
      }
      uint32_t m = hmaxU((VU)load(p) & 0x7FFFFFFFu);
      if (m > tile[size_t(b)]) tile[size_t(b)] = m;
    }
}

enum class Mode { Quantize, Fake, FakeWithStats };

// Whether bits 0 .. count - 1 of mask are all set.
inline bool allSet(uint32_t mask, int count) {
  uint32_t want = (1u << count) - 1u;
  return (mask & want) == want;
}

// Codes, or fake-quantized values, of `count` consecutive blocks that all take the vector path.
template <int Block>
void vectorBlocksCodes(const float* in, const GroupScales& g, int count, uint8_t* codes) {
  constexpr bool mx = Block == kMxfp4BlockSize;
  for (int i = 0; i < count; ++i)
    for (int v = 0; v < Block / kLanes; ++v) {
      V x = load(in + i * Block + v * kLanes);
      packCodes(encodeCodes(mx, g.multiplier[i], mx ? 0.0 : g.reciprocal[i], x),
                codes + (i * Block + v * kLanes) / 2);
    }
}

// y may be `in` (fake quantization in place): each vector is read before it is written.
template <int Block>
void vectorBlocksFake(const float* in, const GroupScales& g, int count, float* y) {
  constexpr bool mx = Block == kMxfp4BlockSize;
  for (int i = 0; i < count; ++i)
    for (int v = 0; v < Block / kLanes; ++v) {
      V x = load(in + i * Block + v * kLanes);
      store(y + i * Block + v * kLanes,
            fakeQuant(mx, g.multiplier[i], mx ? 0.0 : g.reciprocal[i], g.decoded[i], x));
    }
}

// Block maxima (bits of |x|; NaN/Inf >= 0x7F800000) of `count` consecutive blocks at `in`,
// lane i for block i.
template <int Block>
inline VU groupAmaxBits(const float* in, int count) {
  VU perBlock[kLanes];
  for (int i = 0; i < kLanes; ++i) {
    VU m{};
    if (i < count)
      for (int v = 0; v < Block / kLanes; ++v)
        m = maxU(m, (VU)load(in + i * Block + v * kLanes) & 0x7FFFFFFFu);
    perBlock[i] = m;
  }
  return reduceMax16(perBlock);
}

// Up to 16 consecutive blocks of row r from block b0: their inputs, maxima and scales.
struct Group {
  int64_t r = 0, b0 = 0;
  int count = 0;
  const float* in = nullptr;
  VU amaxBits{};
  GroupScales g;
};

// Quantizes (or fake-quantizes) one group whose maxima and scales are known.
template <Mode M, int Block>
void processGroup(const Job& job, Group& group, StatsAccumulator& acc, fp4_error_stats* stats) {
  constexpr int vecsPerBlock = Block / kLanes;
  constexpr bool mx = Block == kMxfp4BlockSize;
  const int64_t blocks = job.cols / Block, r = group.r, b0 = group.b0;
  const int count = group.count;
  const float* in = group.in;
  const VU amaxBits = group.amaxBits;
  GroupScales& g = group.g;
  if (M == Mode::Quantize)
    for (int i = 0; i < count; ++i) job.scales[r * blocks + b0 + i] = uint8_t(g.bytes[i]);
#ifdef __AVX512F__
  if (!mx && M == Mode::Fake && allSet(g.fmaOkMask, count)) {
    if (job.y) {
      float* y = job.y + r * job.cols + b0 * Block;
      for (int i = 0; i < count; ++i)
        store(y + i * kLanes, fakeQuantFma(g.inverse + i, g.decoded + i, load(in + i * kLanes)));
    }
    return;
  }
#endif
  if (!mx) groupReciprocals(g);
  if (M != Mode::FakeWithStats && allSet(g.vectorOkMask, count)) {
    // The common case, in loops without calls so that their constants stay in registers.
    const int64_t flat = r * job.cols + b0 * Block;
    if (M == Mode::Quantize)
      vectorBlocksCodes<Block>(in, g, count, job.codes + flat / 2);
    else if (job.y)
      vectorBlocksFake<Block>(in, g, count, job.y + flat);
    return;
  }

  for (int i = 0; i < count; ++i) {
    const float* vals = in + i * Block;
    const int64_t c0 = (b0 + i) * Block, bi = r * blocks + b0 + i;
    const float decoded = g.decoded[i];
    const bool finite = amaxBits[i] < 0x7F800000u;
    float* y = M != Mode::Quantize && job.y ? job.y + r * job.cols + c0 : nullptr;
    VD blockErr{};
    if (g.vectorOk[i]) {
      const float clipLimit = 6.0f * decoded;
      for (int v = 0; v < vecsPerBlock; ++v) {
        V x = load(vals + v * kLanes);
        const double reciprocal = mx ? 0.0 : g.reciprocal[i];
        if (M == Mode::Quantize) {
          packCodes(encodeCodes(mx, g.multiplier[i], reciprocal, x),
                    job.codes + (r * job.cols + c0) / 2 + v * 8);
          continue;
        }
#ifdef __AVX512F__
        V q = !mx && g.fmaOk[i] ? fakeQuantFma(g.inverse + i, g.decoded + i, x)
                                : fakeQuant(mx, g.multiplier[i], reciprocal, decoded, x);
#else
        V q = fakeQuant(mx, g.multiplier[i], reciprocal, decoded, x);
#endif
        if (y) store(y + v * kLanes, q);
        if (M == Mode::FakeWithStats)
          blockErr += acc.add(x, q, (V)((VU)x & 0x7FFFFFFFu), clipLimit);
      }
    } else {
      BlockScale s;
      s.byte = uint8_t(g.bytes[i]);
      s.decoded = decoded;
      s.finite = finite;
      uint8_t codes[32];
      scalarBlockCodes(job, s, vals, r, c0, codes);
      if (M == Mode::Quantize) {
        packScalarCodes(codes, Block, job.codes + (r * job.cols + c0) / 2);
        continue;
      }
      alignas(64) float q[32];
      for (int e = 0; e < Block; ++e) q[e] = e2m1Decode(codes[e]) * decoded;
      if (y) std::memcpy(y, q, sizeof(float) * size_t(Block));
      if (M != Mode::FakeWithStats) continue;
      if (!finite) {
        for (int e = 0; e < Block; ++e) stats->nonfinite += !isFiniteFloat(vals[e]);
      } else {
        float clipLimit = decoded > 0.0f ? 6.0f * decoded : 0.0f;
        for (int v = 0; v < vecsPerBlock; ++v) {
          V x = load(vals + v * kLanes);
          blockErr += acc.add(x, load(q + v * kLanes), (V)((VU)x & 0x7FFFFFFFu), clipLimit);
        }
      }
    }
    if (M != Mode::FakeWithStats) continue;
    const float nan = bitsToFloat(0x7FC00000u);
    if (job.blockSqErr) job.blockSqErr[bi] = finite ? float(treeSumD(blockErr)) : nan;
    if (job.blockAmax) job.blockAmax[bi] = finite ? bitsToFloat(amaxBits[i]) : nan;
  }
}

// Quantizes (or fake-quantizes) rows [row0, row1) in groups of up to 16 blocks of Block floats.
template <Mode M, int Block>
void processRows(const Job& job, int64_t row0, int64_t row1, fp4_error_stats* stats) {
  const int64_t blocks = job.cols / Block;
  const bool tiles = job.cfg.nvfp4_2d_blocks != 0;
  StatsAccumulator acc(stats);
  if (!tiles && !job.cfg.hadamard) {
    // Software pipelining: the next group's maxima and scales (a long dependency chain through
    // two divisions) are computed before this group's elements, so that the two overlap.
    Group groups[2];
    auto prepare = [&](Group& group, int64_t r, int64_t b0) {
      group.r = r, group.b0 = b0;
      group.count = int(std::min<int64_t>(kLanes, blocks - b0));
      group.in = job.x + r * job.cols + b0 * Block;
      group.amaxBits = groupAmaxBits<Block>(group.in, group.count);
      groupScales(job, group.amaxBits, group.g);
    };
    prepare(groups[0], row0, 0);
    for (int now = 0;; now ^= 1) {
      int64_t r = groups[now].r, b0 = groups[now].b0 + kLanes;
      if (b0 >= blocks) b0 = 0, ++r;
      if (r < row1) prepare(groups[now ^ 1], r, b0);
      processGroup<M, Block>(job, groups[now], acc, stats);
      if (r >= row1) break;
    }
  } else {
    std::vector<uint32_t> tile;
    alignas(64) float rotated[kLanes * 32];
    Group group;
    for (int64_t r = row0; r < row1; ++r) {
      if (tiles && (r - row0) % 16 == 0) tileAmaxBits(job, r, std::min(r + 16, row1), tile);
      for (int64_t b0 = 0; b0 < blocks; b0 += kLanes) {
        group.r = r, group.b0 = b0;
        group.count = int(std::min<int64_t>(kLanes, blocks - b0));
        group.in = job.x + r * job.cols + b0 * Block;
        if (job.cfg.hadamard) {
          hadamard(group.in, rotated, int64_t(group.count) * Block, false);
          group.in = rotated;
        }
        if (tiles) {
          uint32_t t[kLanes] = {};
          std::memcpy(t, tile.data() + b0, sizeof(uint32_t) * size_t(group.count));
          std::memcpy(&group.amaxBits, t, sizeof t);
        } else {
          group.amaxBits = groupAmaxBits<Block>(group.in, group.count);
        }
        groupScales(job, group.amaxBits, group.g);
        processGroup<M, Block>(job, group, acc, stats);
      }
    }
  }
  if (M == Mode::FakeWithStats) acc.flush();
}

#if defined(__AVX512F__) && defined(__AVX512DQ__)
// ---- AVX-512 fake quantization without statistics: contiguous blocks in three phases ----
//
// Without 2-D tiles or the Hadamard rotation, the blocks of a row range are consecutive in
// memory. They are fake-quantized a segment of up to kSegmentBlocks at a time: (1) the block
// maxima, 16 blocks per transposing reduction; (2) the scales of 16 blocks per vector, from
// those maxima; (3) the elements, each block with its constants broadcast from memory. Phase 3
// re-reads the segment from L1/L2. Blocks outside the fast formulas' ranges below (NaN/Inf,
// extreme scales) go through processGroup one block at a time.

constexpr int kSegmentBlocks = 256;
// Blocks whose maxima one call of fakeWholeTensor keeps (64 K NVFP4 elements; 16 KB of stack).
constexpr int64_t kWholeTensorBlocks = 4096;

struct SegmentScales {
  alignas(64) float first[kSegmentBlocks];   // MXFP4: 6 * 2^e; NVFP4: 1 / decoded (0 if 0)
  alignas(64) float second[kSegmentBlocks];  // MXFP4: 2^e (0 for an all-zero block); NVFP4: decoded
  alignas(64) uint32_t sign[kSegmentBlocks];  // NVFP4: the sign bit kept in y (0: y is +0)
  uint32_t slow[kSegmentBlocks / kLanes];     // per group: bit i, block i goes to processGroup
  bool anySlow = false;
};

// MXFP4 fake quantization of 16 elements in the input's own scale (no multiplication by 2^-e
// and back): with c = min(|x|, 6 * 2^e), M = 2^(22 + max(exponent(c), e)) is the magic number
// that e2m1Round uses in the scaled domain, times 2^e, and (c + M) - M rounds c to the E2M1
// grid times 2^e with the same ties. Exact while M stays a normal float: e in [-126, 103] (or an
// all-zero block, for which any M gives 0). `bound` = 6 * 2^e, `floor` = 2^e.
inline __m512 mxFakeFlat(__m512 x, const float* bound, const float* floor) {
  // VRANGEPS imm 0x0A: min(|x|, bound) with the sign cleared (x is finite here).
  __m512 c = _mm512_range_ps(x, _mm512_set1_ps(*bound), 0x0A);
  // maxU, not _mm512_max_epu32: GCC 12 warns about the intrinsic's undefined pass-through.
  __m512 m = (__m512)(maxU((VU)c & 0x7F800000u, (VU)_mm512_set1_ps(*floor)) + (22u << 23));
  __m512 r = _mm512_sub_ps(_mm512_add_ps(c, m), m);
  // r | (x & sign): the sign of the input, as the codes carry it.
  return _mm512_castsi512_ps(_mm512_ternarylogic_epi32(
      _mm512_castps_si512(r), _mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN), 0xF8));
}

// NVFP4: the quotient x / decoded correctly rounded by Markstein's correction (as fakeQuantFma,
// on the signed input: the rounding is symmetric), clamped to 6 and made non-negative in one
// VRANGEPS, rounded with e2m1Round's magic number, signed and scaled back. The magic number comes
// from a table indexed by the low 4 bits of the quotient's biased exponent b: 2^22 for b = 125
// to 127 (|q| in [0.25, 2)), 2^23 for b = 128, 2^24 for b = 129 ([4, 8), clamped to at most 6).
// The other b that share those bits round to the same values with any of the three: below 0.25
// everything gives 0, and from 8 up the clamped 6 is on all three grids. For a block whose scale
// decodes to 0, inverse, decoded and sign are 0 and every element gives +0, as ref.cpp.
inline __m512 nvFakeFlat(__m512 x, const float* inverse, const float* decoded,
                         const uint32_t* signMask) {
  const __m512 magic =
      _mm512_setr_ps(0x1p23f, 0x1p24f, 0x1p22f, 0x1p22f, 0x1p22f, 0x1p22f, 0x1p22f, 0x1p22f,
                     0x1p22f, 0x1p22f, 0x1p22f, 0x1p22f, 0x1p22f, 0x1p22f, 0x1p22f, 0x1p22f);
  __m512 inv = _mm512_set1_ps(*inverse), d = _mm512_set1_ps(*decoded);
  __m512 q = _mm512_mul_ps(x, inv);
  __m512 s = _mm512_fmadd_ps(_mm512_fnmadd_ps(q, d, x), inv, q);
  __m512 c = _mm512_range_ps(s, _mm512_set1_ps(6.0f), 0x0A);
  // VPERMPS reads bits 3:0 of the index. (The masked form: GCC 12 warns about the plain one.)
  __m512 m = _mm512_mask_permutexvar_ps(magic, 0xFFFF, (__m512i)((VU)s >> 23), magic);
  __m512 r = _mm512_sub_ps(_mm512_add_ps(c, m), m);
  __m512i signed_ = _mm512_ternarylogic_epi32(_mm512_castps_si512(r), _mm512_castps_si512(x),
                                              _mm512_set1_epi32(int32_t(*signMask)), 0xF8);
  return _mm512_mul_ps(_mm512_castsi512_ps(signed_), d);
}

// The flat path's element types at either end: fp32, or BF16 (raw bits), widened exactly as it
// is loaded and rounded to nearest even as it is stored (integer arithmetic: VCVTNEPS2BF16 flushes
// subnormals). That is io::floatToBf16, LibTorch's cast, for every value the kernels output: their
// only NaN is 0x7FC00000 (ref.cpp), which rounds to 0x7FC0 (a test feeds NaN payloads to check it).
inline __m512 loadWide(const float* p) {
  return _mm512_loadu_ps(p);
}
inline __m512 loadWide(const uint16_t* p) {
  VH h;
  std::memcpy(&h, p, sizeof h);
  return (__m512)(__builtin_convertvector(h, VU) << 16);
}
inline void storeNarrow(float* p, __m512 v) {
  _mm512_storeu_ps(p, v);
}
inline void storeNarrow(uint16_t* p, __m512 v) {
  const VU bits = (VU)v;
  const VH h = __builtin_convertvector((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16, VH);
  std::memcpy(p, &h, sizeof h);
}

// Phase 1: the maxima (bits of |x|; NaN/Inf >= 0x7F800000) of `count` blocks from `in`. Whole
// groups skip groupAmaxBits' per-block count test and its maximum with 0.
template <int Block, typename In>
void blockMaxima(const In* in, int64_t count, uint32_t* amaxBits) {
  const int64_t whole = count / kLanes * kLanes;
  for (int64_t b = 0; b < whole; b += kLanes) {
    const In* group = in + b * Block;
    VU perBlock[kLanes];
    for (int i = 0; i < kLanes; ++i) {
      VU m = (VU)loadWide(group + i * Block) & 0x7FFFFFFFu;
      for (int v = 1; v < Block / kLanes; ++v)
        m = maxU(m, (VU)loadWide(group + i * Block + v * kLanes) & 0x7FFFFFFFu);
      perBlock[i] = m;
    }
    VU m = reduceMax16(perBlock);
    std::memcpy(amaxBits + b, &m, sizeof m);
  }
  if (whole < count) {
    // As groupAmaxBits, for the last (partial) group.
    VU perBlock[kLanes];
    const In* group = in + whole * Block;
    for (int i = 0; i < kLanes; ++i) {
      VU m{};
      if (i < count - whole)
        for (int v = 0; v < Block / kLanes; ++v)
          m = maxU(m, (VU)loadWide(group + i * Block + v * kLanes) & 0x7FFFFFFFu);
      perBlock[i] = m;
    }
    VU m = reduceMax16(perBlock);
    std::memcpy(amaxBits + whole, &m, sizeof m);  // the buffers have room for whole groups
  }
}

// The E4M3 scale values (as floats) of 16 values v >= 0: e4m3DecodeScales(e4m3EncodeScales(v))
// without the codes. From 2^-6 up, the mantissa rounded to 3 bits (ties to even; a carry bumps
// the exponent) and saturated at 448; below, the nearest multiple of 2^-9, by adding 2^14 (whose
// ulp that is). Non-finite lanes are replaced by the caller.
inline V e4m3RoundScales(V v) {
  VU bits = (VU)v;
  VU normal = minU((bits + 0x7FFFFu + ((bits >> 20) & 1u)) & 0xFFF00000u, splatU(0x43E00000u));
  V subnormal = (v + 0x1p14f) - 0x1p14f;
  return v < 0x1p-6f ? subnormal : (V)normal;
}

// Phase 2 for NVFP4, in mask registers and with the per-call constants hoisted: it costs about
// as much per block as the element loop's quotient, so it is kept short.
inline void nvSegmentScales(const Job& job, const uint32_t* amaxBits, int count, SegmentScales& s) {
  const float s2 = job.globalScale, d6 = 6.0f * s2;
  const __m512 d6v = _mm512_set1_ps(d6), inverse6 = _mm512_set1_ps(1.0f / d6);
  const __m512 s2v = _mm512_set1_ps(s2), quotientLimit = _mm512_set1_ps(d6 * 0x1p20f);
  // scaleQuotients' bounds for Markstein's correction of amax / d6.
  const bool d6Ok = d6 >= 0x1p-80f && d6 <= 0x1p80f;
  // A non-zero decoded scale lies in [2^-9 s2, 448 s2]: inside nvFakeFlat's [2^-100, 2^100]
  // whenever s2 is in [2^-91, 2^91], and then only the quotient bound needs a test per block.
  const bool rangeOk = s2 >= 0x1p-91f && s2 <= 0x1p91f;
  const __m512i infBits = _mm512_set1_epi32(0x7F800000);
  s.anySlow = false;
  for (int b = 0; b < count; b += kLanes) {
    const int n = std::min(kLanes, count - b);
    const __m512 amax = _mm512_castsi512_ps(_mm512_load_si512(amaxBits + b));
    const __mmask16 finite = _mm512_cmplt_epu32_mask(_mm512_castps_si512(amax), infBits);
    __m512 scaleValue;
    if (d6Ok && !(finite & _mm512_cmp_ps_mask(amax, quotientLimit, _CMP_GT_OQ))) {
      __m512 q = _mm512_mul_ps(amax, inverse6);
      scaleValue = _mm512_fmadd_ps(_mm512_fnmadd_ps(q, d6v, amax), inverse6, q);
    } else {
      scaleValue = _mm512_div_ps(amax, d6v);
    }
    const __m512 decoded = _mm512_mul_ps((__m512)e4m3RoundScales((V)scaleValue), s2v);
    const __mmask16 zero = _mm512_cmp_ps_mask(decoded, _mm512_setzero_ps(), _CMP_EQ_OQ);
    __mmask16 ok =
        _mm512_cmp_ps_mask(amax, _mm512_mul_ps(decoded, _mm512_set1_ps(0x1p20f)), _CMP_LE_OQ);
    if (!rangeOk)
      ok &= _mm512_cmp_ps_mask(decoded, _mm512_set1_ps(0x1p-100f), _CMP_GE_OQ) &
            _mm512_cmp_ps_mask(decoded, _mm512_set1_ps(0x1p100f), _CMP_LE_OQ);
    const __mmask16 fast = finite & (zero | ok);
    // 1 / decoded, and the kept sign bit; both 0 where the scale decodes to 0.
    _mm512_store_ps(s.first + b,
                    _mm512_maskz_div_ps(__mmask16(~zero), _mm512_set1_ps(1.0f), decoded));
    _mm512_store_ps(s.second + b, decoded);
    _mm512_store_si512(s.sign + b,
                       _mm512_maskz_mov_epi32(__mmask16(~zero), _mm512_set1_epi32(INT32_MIN)));
    const uint32_t slow = ~uint32_t(fast) & ((1u << n) - 1u);
    s.slow[b / kLanes] = slow;
    s.anySlow |= slow != 0;
  }
}

// Phase 2: the scales of `count` (<= kSegmentBlocks) blocks from their maxima.
template <int Block>
void segmentScales(const Job& job, const uint32_t* amaxBits, int count, SegmentScales& s) {
  if (Block == kNvfp4BlockSize) return nvSegmentScales(job, amaxBits, count, s);
  s.anySlow = false;
  for (int b = 0; b < count; b += kLanes) {
    const int n = std::min(kLanes, count - b);
    VU amax;
    std::memcpy(&amax, amaxBits + b, sizeof amax);
    VI finite = amax < 0x7F800000u;
    // mxfp4SharedExponent as in groupScales.
    VI biased = (VI)(amax >> 23);
    VI e = biased - 127;
    VI shared;
    if (job.cfg.scale_rule == FP4_SCALE_RULE_FLOOR) {
      shared = e - 2;
    } else {
      VI atMostOneAndHalf = (amax & 0x7FFFFFu) <= 0x400000u;
      shared = atMostOneAndHalf ? e - 2 : e - 1;
    }
    shared = biased == 0 ? VI{} - 127 : shared;
    shared = shared < -127 ? VI{} - 127 : (shared > 127 ? VI{} + 127 : shared);
    VI fast = finite & (shared <= 103) & ((shared >= -126) | (amax == 0u));
    V second = (V)(shared >= -126 ? (shared + kE8M0Bias) << 23 : VI{});
    V first = second * 6.0f;
    std::memcpy(s.first + b, &first, sizeof first);
    std::memcpy(s.second + b, &second, sizeof second);
    uint32_t slow = ~laneMask(fast) & ((1u << n) - 1u);
    s.slow[b / kLanes] = slow;
    s.anySlow |= slow != 0;
  }
}

// Phase 3 of one block that takes no fast formula: processGroup with a group of one block, on
// the block widened to fp32 (the flat path rounds to nearest: no element index is needed).
template <int Block, typename In, typename Out>
void slowBlock(const Job& job, const In* in, Out* y, uint32_t amaxBits) {
  alignas(64) float x[Block], q[Block];
  for (int v = 0; v < Block; v += kLanes) _mm512_store_ps(x + v, loadWide(in + v));
  Job one = job;
  one.rows = 1, one.cols = Block, one.x = x, one.y = q;
  Group group;
  group.count = 1;
  group.in = x;
  group.amaxBits = VU{};
  group.amaxBits[0] = amaxBits;
  groupScales(one, group.amaxBits, group.g);
  StatsAccumulator unused(nullptr);
  processGroup<Mode::Fake, Block>(one, group, unused, nullptr);
  for (int v = 0; v < Block; v += kLanes) storeNarrow(y + v, _mm512_load_ps(q + v));
}

template <int Block, typename In, typename Out>
inline void fastBlocks(const In* in, Out* y, const SegmentScales& s, int from, int to) {
  // Each input vector is loaded once (GCC would fold it into every instruction that reads it,
  // and an unaligned input splits every such load in two), and one block ahead: a load issued
  // after a store that overlaps it modulo 4 KB waits for that store (4K aliasing), as happens
  // when y starts 16 bytes past x modulo 4 KB (two std::vectors allocated one after the other).
  // The last block is peeled so that the loop reads ahead without a test.
  if (from >= to) return;
  if (Block == kMxfp4BlockSize) {
    auto one = [&](int i, __m512 x0, __m512 x1) {
      storeNarrow(y + i * Block, mxFakeFlat(x0, s.first + i, s.second + i));
      storeNarrow(y + i * Block + kLanes, mxFakeFlat(x1, s.first + i, s.second + i));
    };
    __m512 x0 = loadWide(in + from * Block), x1 = loadWide(in + from * Block + kLanes);
    for (int i = from; i < to - 1; ++i) {
      __m512 next0 = loadWide(in + (i + 1) * Block);
      __m512 next1 = loadWide(in + (i + 1) * Block + kLanes);
      asm("" : "+v"(next0), "+v"(next1));
      one(i, x0, x1);
      x0 = next0, x1 = next1;
    }
    one(to - 1, x0, x1);
  } else {
    auto one = [&](int i, __m512 x) {
      storeNarrow(y + i * Block, nvFakeFlat(x, s.first + i, s.second + i, s.sign + i));
    };
    __m512 x = loadWide(in + from * Block);
    for (int i = from; i < to - 1; ++i) {
      __m512 next = loadWide(in + (i + 1) * Block);
      asm("" : "+v"(next));
      one(i, x);
      x = next;
    }
    one(to - 1, x);
  }
}

// Phases 2 and 3 of `count` (<= kSegmentBlocks) blocks at `in` (output at `y`), with maxima.
template <int Block, typename In, typename Out>
void fakeSegment(const Job& job, const In* in, Out* y, int count, const uint32_t* amaxBits) {
  SegmentScales s;
  segmentScales<Block>(job, amaxBits, count, s);
  if (!s.anySlow) return fastBlocks<Block>(in, y, s, 0, count);
  for (int b = 0; b < count; b += kLanes) {
    const int n = std::min(kLanes, count - b);
    uint32_t slow = s.slow[b / kLanes];
    if (!slow) {
      fastBlocks<Block>(in, y, s, b, b + n);
      continue;
    }
    for (int i = b; i < b + n; ++i) {
      if (slow >> (i - b) & 1u)
        slowBlock<Block>(job, in + i * Block, y + i * Block, amaxBits[i]);
      else
        fastBlocks<Block>(in, y, s, i, i + 1);
    }
  }
}

// The max |x| over the finite elements of `count` blocks at `in`, given their maxima (the
// buffer has room for whole groups of 16, lanes past `count` holding 0): one vector pass over the
// maxima, and only if one is NaN or Inf, the max over finite blocks and the finite elements of
// the others.
template <int Block, typename In>
uint32_t finiteMaxBits(const In* in, int64_t count, const uint32_t* amaxBits) {
  VU m{};
  for (int64_t b = 0; b < count; b += kLanes) {
    VU a;
    std::memcpy(&a, amaxBits + b, sizeof a);
    m = maxU(m, a);
  }
  uint32_t amax = hmaxU(m);
  if (amax < 0x7F800000u) return amax;
  m = VU{};
  for (int64_t b = 0; b < count; b += kLanes) {
    VU a;
    std::memcpy(&a, amaxBits + b, sizeof a);
    m = maxU(m, a < 0x7F800000u ? a : VU{});
  }
  amax = hmaxU(m);
  for (int64_t b = 0; b < count; ++b) {
    if (amaxBits[b] < 0x7F800000u) continue;
    for (int v = 0; v < Block; v += kLanes) {
      VU bits = (VU)loadWide(in + b * Block + v) & 0x7FFFFFFFu;
      const uint32_t finite = hmaxU(bits < 0x7F800000u ? bits : VU{});
      amax = finite > amax ? finite : amax;
    }
  }
  return amax;
}

// Rows [row0, row1) of a flatBlocks job from `x` to `y` (either may be BF16); *absMax, if asked,
// the max |x| over their finite elements.
template <int Block, typename In, typename Out>
void fakeFlat(const Job& job, const In* x, Out* y, int64_t row0, int64_t row1, float* absMax) {
  // Segments of 4 KB of fp32 input, so that phase 3 re-reads them from L1 while it writes y (16 KB
  // ones made MXFP4 at 1 M elements 7% slower than before the phases), unless the whole range
  // fits in one segment (fewer loop overheads for small tensors).
  const int64_t begin = row0 * (job.cols / Block), end = row1 * (job.cols / Block);
  const int segment = end - begin <= kSegmentBlocks ? kSegmentBlocks : 4096 / (Block * 4);
  alignas(64) uint32_t amaxBits[kSegmentBlocks];
  uint32_t finiteMax = 0;
  for (int64_t b = begin; b < end; b += segment) {
    const int count = int(std::min<int64_t>(segment, end - b));
    blockMaxima<Block>(x + b * Block, count, amaxBits);
    if (absMax)
      finiteMax = std::max(finiteMax, finiteMaxBits<Block>(x + b * Block, count, amaxBits));
    if (y) fakeSegment<Block>(job, x + b * Block, y + b * Block, count, amaxBits);
  }
  if (absMax) *absMax = bitsToFloat(finiteMax);
}

template <int Block>
void fakeTyped(const Job& job, int64_t row0, int64_t row1, float* absMax) {
  if (job.xBf16 && job.yBf16) return fakeFlat<Block>(job, job.xBf16, job.yBf16, row0, row1, absMax);
  if (job.xBf16) return fakeFlat<Block>(job, job.xBf16, job.y, row0, row1, absMax);
  if (job.yBf16) return fakeFlat<Block>(job, job.x, job.yBf16, row0, row1, absMax);
  fakeFlat<Block>(job, job.x, job.y, row0, row1, absMax);
}

void fakeQuantizeTyped(const Job& job, int64_t row0, int64_t row1, float* absMax) {
  if (job.block == kMxfp4BlockSize)
    fakeTyped<kMxfp4BlockSize>(job, row0, row1, absMax);
  else
    fakeTyped<kNvfp4BlockSize>(job, row0, row1, absMax);
}

// NVFP4 fake quantization of a whole small tensor without statistics, measuring its amax on the
// way: the block maxima of phase 1 give the tensor amax (the max over finite elements), so the
// tensor is read once for the maxima and once for the elements instead of three times.
bool fakeWholeTensor(Job& job) {
  const int64_t blocks = job.rows * (job.cols / kNvfp4BlockSize);
  if (job.block != kNvfp4BlockSize || !flatBlocks(job.cfg) || blocks > kWholeTensorBlocks)
    return false;
  alignas(64) uint32_t amaxBits[kWholeTensorBlocks + kLanes];
  blockMaxima<kNvfp4BlockSize>(job.x, blocks, amaxBits);
  const uint32_t amax = finiteMaxBits<kNvfp4BlockSize>(job.x, blocks, amaxBits);
  job.globalScale = nvfp4GlobalScale(bitsToFloat(amax));
  if (!job.y) return true;
  for (int64_t b = 0; b < blocks; b += kSegmentBlocks)
    fakeSegment<kNvfp4BlockSize>(job, job.x + b * kNvfp4BlockSize, job.y + b * kNvfp4BlockSize,
                                 int(std::min<int64_t>(kSegmentBlocks, blocks - b)), amaxBits + b);
  return true;
}
#endif

template <Mode M>
void processRows(const Job& job, int64_t row0, int64_t row1, fp4_error_stats* stats) {
  if (job.block == kMxfp4BlockSize)
    processRows<M, kMxfp4BlockSize>(job, row0, row1, stats);
  else
    processRows<M, kNvfp4BlockSize>(job, row0, row1, stats);
}

void quantize(const Job& job, int64_t row0, int64_t row1) {
  processRows<Mode::Quantize>(job, row0, row1, nullptr);
}

void fakeQuantize(const Job& job, int64_t row0, int64_t row1, fp4_error_stats* stats) {
  if (stats || job.blockSqErr || job.blockAmax) {
    fp4_error_stats unused;
    processRows<Mode::FakeWithStats>(job, row0, row1, stats ? stats : &unused);
    return;
  }
#if defined(__AVX512F__) && defined(__AVX512DQ__)
  if (flatBlocks(job.cfg)) {
    if (job.y) fakeQuantizeTyped(job, row0, row1, nullptr);  // else nothing to write or measure
    return;
  }
#endif
  processRows<Mode::Fake>(job, row0, row1, nullptr);
}

void dequantize(const Job& job, int64_t row0, int64_t row1) {
  const int block = job.block;
  const int64_t blocks = job.cols / block;
  for (int64_t r = row0; r < row1; ++r) {
    for (int64_t b = 0; b < blocks; ++b) {
      uint8_t byte = job.scalesIn[r * blocks + b];
      float scale = job.cfg.format == FP4_FORMAT_MXFP4 ? e8m0Decode(byte)
                                                       : e4m3Decode(byte) * job.globalScale;
      int64_t flat = r * job.cols + b * block;
      for (int i = 0; i < block; i += kLanes) {
        VB8 packed;
        std::memcpy(&packed, job.codesIn + (flat + i) / 2, 8);
        VU8 wide = __builtin_convertvector(packed, VU8);
        VU8 lo = wide & 15u, hi = wide >> 4;
        VU code =
            __builtin_shufflevector(lo, hi, 0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
        VU idx = code & 7u;
        VU magnitude = idx >= 2u ? (idx + 252u) << 22 : (idx == 1u ? splatU(0x3F000000u) : VU{});
        V q = (V)(magnitude | (code & 8u) << 28) * scale;
        store(job.y + flat + i, q);
      }
    }
  }
}

float amax(const Job& job, int64_t row0, int64_t row1, bool rotate) {
  if (!rotate) {
    // Rows are contiguous: one pass over all their magnitudes, four accumulators, and no
    // NaN/Inf filter unless the maximum shows there is one (then the pass below).
    const float* p = job.x + row0 * job.cols;
    const int64_t n = (row1 - row0) * job.cols, n4 = n / (4 * kLanes) * (4 * kLanes);
    VU m0{}, m1{}, m2{}, m3{};
    for (int64_t i = 0; i < n4; i += 4 * kLanes) {
      m0 = maxU(m0, (VU)load(p + i) & 0x7FFFFFFFu);
      m1 = maxU(m1, (VU)load(p + i + kLanes) & 0x7FFFFFFFu);
      m2 = maxU(m2, (VU)load(p + i + 2 * kLanes) & 0x7FFFFFFFu);
      m3 = maxU(m3, (VU)load(p + i + 3 * kLanes) & 0x7FFFFFFFu);
    }
    for (int64_t i = n4; i < n; i += kLanes) m0 = maxU(m0, (VU)load(p + i) & 0x7FFFFFFFu);
    uint32_t m = hmaxU(maxU(maxU(m0, m1), maxU(m2, m3)));
    if (m < 0x7F800000u) return bitsToFloat(m);
  }
  VU m{};
  alignas(64) float buf[16];
  for (int64_t r = row0; r < row1; ++r) {
    const float* row = job.x + r * job.cols;
    for (int64_t c = 0; c < job.cols; c += kLanes) {
      const float* p = row + c;
      if (rotate) {
        hadamardTile(p, buf, false);
        p = buf;
      }
      VU bits = (VU)load(p) & 0x7FFFFFFFu;
      m = maxU(m, bits < 0x7F800000u ? bits : VU{});  // NaN and Inf do not count
    }
  }
  return bitsToFloat(hmaxU(m));
}

}  // namespace

const BackendOps& ops() {
#if defined(__AVX512F__) && defined(__AVX512DQ__)
  static const BackendOps o{FP4LAB_SIMD_NAME, quantize,        dequantize,       fakeQuantize, amax,
                            hadamard,         fakeWholeTensor, fakeQuantizeTyped};
#else
  static const BackendOps o{FP4LAB_SIMD_NAME, quantize, dequantize, fakeQuantize, amax,
                            hadamard,         nullptr,  nullptr};
#endif
  return o;
}

}  // namespace fp4lab::kernels::FP4LAB_SIMD_NS
