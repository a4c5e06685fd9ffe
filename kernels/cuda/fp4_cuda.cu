// CUDA kernels behind fp4_cuda.h: quantize, dequantize, fused fake-quant with statistics, the
// 16x16 Hadamard rotation and tensor amax, bit-identical to ref.cpp (the CPU reference).
// Layout: one thread per 8 consecutive elements (an "octet"); a block of 16 or 32 elements is
// a group of 2 or 4 neighbouring lanes of one warp, reduced with shuffles.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "fp4lab/kernels/formats.h"
#include "fp4lab/kernels/fp4.h"
#include "fp4lab/kernels/fp4_cuda.h"
#include "last_error.h"
#include "validate.h"

namespace fp4lab::kernels::cuda {
namespace {

constexpr int kOctet = 8;
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFullMask = 0xFFFFFFFFu;
// The NaN x86 produces and propagates (the CPU reference writes these bits for NaN blocks).
// GPU arithmetic would give the canonical 0x7FFFFFFF instead, so NaN outputs are written as
// bits, never computed.
constexpr uint32_t kQuietNaNBits = 0x7FC00000u;
constexpr uint32_t kNegativeQuietNaNBits = 0xFFC00000u;
constexpr uint32_t kInfinityBits = 0x7F800000u;

// ---- Host-side error reporting ------------------------------------------------------------

fp4_status fail(fp4_status status, const char* fmt, ...) {
  char buf[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  fp4lab_set_last_error(status, buf);
  return status;
}

fp4_status cudaFail(cudaError_t err, const char* what, const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  return fail(FP4_ERR_CUDA, "fp4_cuda: %s failed: %s (%s) at %s:%d%s", what,
              cudaGetErrorString(err), cudaGetErrorName(err), base ? base + 1 : file, line,
              err == cudaErrorIllegalAddress || err == cudaErrorLaunchFailure
                  ? " (a buffer is too small or not on this device; the CUDA context is now "
                    "unusable)"
                  : "");
}

#define FP4_CUDA_TRY(call, what)                                                    \
  do {                                                                              \
    cudaError_t fp4Err_ = (call);                                                   \
    if (fp4Err_ != cudaSuccess) return cudaFail(fp4Err_, what, __FILE__, __LINE__); \
  } while (0)

// A kernel launch reports bad configurations at once and faults later; this catches the former.
#define FP4_CUDA_LAUNCHED(what) FP4_CUDA_TRY(cudaGetLastError(), what)

#define FP4_TRY(expr)                            \
  do {                                           \
    fp4_status fp4Status_ = (expr);              \
    if (fp4Status_ != FP4_OK) return fp4Status_; \
  } while (0)

// ---- Statistics partials ----------------------------------------------------------------

// Summed in double per element (the reference does the same), so values of 1e30 or 1e-30
// neither overflow nor underflow; the order differs from the CPU's, hence "to rounding".
struct StatsPartial {
  double sumX2, sumErr2, sumXq, sumQ2, maxAbsErr;
  unsigned long long count, clipped, flushed, nonfinite;
};

__device__ __forceinline__ void combine(StatsPartial& into, const StatsPartial& from) {
  into.sumX2 += from.sumX2;
  into.sumErr2 += from.sumErr2;
  into.sumXq += from.sumXq;
  into.sumQ2 += from.sumQ2;
  into.maxAbsErr = fmax(into.maxAbsErr, from.maxAbsErr);
  into.count += from.count;
  into.clipped += from.clipped;
  into.flushed += from.flushed;
  into.nonfinite += from.nonfinite;
}

__device__ __forceinline__ StatsPartial shuffleXor(const StatsPartial& s, int offset) {
  StatsPartial o;
  o.sumX2 = __shfl_xor_sync(kFullMask, s.sumX2, offset);
  o.sumErr2 = __shfl_xor_sync(kFullMask, s.sumErr2, offset);
  o.sumXq = __shfl_xor_sync(kFullMask, s.sumXq, offset);
  o.sumQ2 = __shfl_xor_sync(kFullMask, s.sumQ2, offset);
  o.maxAbsErr = __shfl_xor_sync(kFullMask, s.maxAbsErr, offset);
  o.count = __shfl_xor_sync(kFullMask, s.count, offset);
  o.clipped = __shfl_xor_sync(kFullMask, s.clipped, offset);
  o.flushed = __shfl_xor_sync(kFullMask, s.flushed, offset);
  o.nonfinite = __shfl_xor_sync(kFullMask, s.nonfinite, offset);
  return o;
}

// Reduces over the thread block in a fixed order (so results repeat run to run); the total
// is valid in thread 0. Every thread of the block must call it.
__device__ StatsPartial reduceBlock(StatsPartial s) {
  __shared__ StatsPartial warpSums[kWarps];
  for (int offset = 16; offset > 0; offset >>= 1) combine(s, shuffleXor(s, offset));
  int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) warpSums[warp] = s;
  __syncthreads();
  StatsPartial total{};
  if (threadIdx.x == 0)
    for (int w = 0; w < kWarps; ++w) combine(total, warpSums[w]);
  return total;
}

__global__ void __launch_bounds__(kThreads)
    finalizeStatsKernel(const StatsPartial* partials, int count, StatsPartial* out) {
  StatsPartial s{};
  for (int i = threadIdx.x; i < count; i += kThreads) combine(s, partials[i]);
  StatsPartial total = reduceBlock(s);
  if (threadIdx.x == 0) *out = total;
}

// ---- Element helpers --------------------------------------------------------------------

__device__ __forceinline__ bool isNaN(float f) {
  return f != f;
}

template <bool kVector>
__device__ __forceinline__ void loadOctet(const float* p, float (&v)[kOctet]) {
  if (kVector) {
    float4 a = reinterpret_cast<const float4*>(p)[0];
    float4 b = reinterpret_cast<const float4*>(p)[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
    v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
#pragma unroll
    for (int i = 0; i < kOctet; ++i) v[i] = p[i];
  }
}

template <bool kVector>
__device__ __forceinline__ void storeOctet(float* p, const float (&v)[kOctet]) {
  if (kVector) {
    reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
  } else {
#pragma unroll
    for (int i = 0; i < kOctet; ++i) p[i] = v[i];
  }
}

// Eight codes, even element in the low nibble, as one little-endian word (4 packed bytes).
template <bool kVector>
__device__ __forceinline__ void storeCodes(uint8_t* p, uint32_t packed) {
  if (kVector) {
    *reinterpret_cast<uint32_t*>(p) = packed;
  } else {
#pragma unroll
    for (int k = 0; k < 4; ++k) p[k] = static_cast<uint8_t>(packed >> (8 * k));
  }
}

template <bool kVector>
__device__ __forceinline__ uint32_t loadCodes(const uint8_t* p) {
  if (kVector) return *reinterpret_cast<const uint32_t*>(p);
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

// fp32 bits of E2M1 magnitude `idx`: 2^(e-1) (1 + m/2) is ((idx + 252) << 22) for idx >= 2.
__device__ __forceinline__ uint32_t e2m1MagnitudeBits(uint32_t idx) {
  return idx >= 2u ? (idx + 252u) << 22 : (idx == 1u ? 0x3F000000u : 0u);
}

// The 16x16 random Hadamard transform of the tile held by a lane pair (the even lane holds
// elements 0..7, the odd lane 8..15). Each output sums its 16 terms in order j = 0..15 and
// is then scaled by 1/4, as ref.cpp does. Row i = 8 * upper + k of H is row k of the upper
// half with the sign of columns 8..15 flipped when upper, so that flip is folded into the
// inputs: multiplying by +-1 is exact, and the per-term coefficients become constants.
template <bool kInverse>
__device__ __forceinline__ void hadamardOctet(float (&v)[kOctet], bool upper) {
  float t[16];
#pragma unroll
  for (int k = 0; k < kOctet; ++k) {
    float other = __shfl_xor_sync(kFullMask, v[k], 1);
    t[k] = upper ? other : v[k];
    t[k + 8] = upper ? v[k] : other;
  }
#pragma unroll
  for (int j = 8; j < 16; ++j) t[j] = upper ? -t[j] : t[j];
#pragma unroll
  for (int k = 0; k < kOctet; ++k) {
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      float coef = kInverse ? hadamardEntry(k, j) : hadamardEntry(k, j) * hadamardSign(j);
      acc += coef * t[j];
    }
    float out = acc * 0.25f;
    if (kInverse) out = out * hadamardSign((upper ? 8 : 0) + k);
    v[k] = out;
  }
}

__device__ __forceinline__ uint32_t absBits(float f) {
  return floatBits(f) & 0x7FFFFFFFu;
}

// ---- Scales -----------------------------------------------------------------------------

struct DeviceBlockScale {
  uint8_t byte;
  float decoded;     // 2^e, or float(E4M3) * s2; NaN when the block is not finite
  float multiplier;  // MXFP4: 2^-e (rounds exactly as dividing by 2^e)
  bool finite;
  bool zero;  // codes are all 0: a non-finite block, or an NVFP4 scale of 0 (or NaN)
};

template <fp4_format kFormat>
__device__ __forceinline__ DeviceBlockScale blockScaleFor(uint32_t amaxBits, float globalScale,
                                                          bool floorRule) {
  DeviceBlockScale s;
  s.multiplier = 0.0f;
  if (amaxBits >= kInfinityBits) {
    s.finite = false;
    s.zero = true;
    s.byte = kFormat == FP4_FORMAT_MXFP4 ? kE8M0NaN : kE4M3NaN;
    s.decoded = bitsToFloat(kQuietNaNBits);
    return s;
  }
  s.finite = true;
  float amax = bitsToFloat(amaxBits);
  if (kFormat == FP4_FORMAT_MXFP4) {
    int e = mxfp4SharedExponent(amax, floorRule ? ScaleRule::Floor : ScaleRule::Ceil);
    s.byte = static_cast<uint8_t>(e + kE8M0Bias);
    s.decoded = exp2Exact(e);
    s.multiplier = exp2Exact(-e);
    s.zero = false;
  } else {
    s.byte = e4m3EncodeScale(amax / (6.0f * globalScale));
    s.decoded = e4m3Decode(s.byte) * globalScale;
    // A NaN scale needs s2 == 0 (a tensor amax below ~2e-42) and an all-zero block: the
    // reference then writes code 0 and NaN, which is what `zero` plus the NaN path give.
    s.zero = !(s.decoded > 0.0f);
  }
  return s;
}

// ---- Stochastic rounding: Philox shared by the four elements of a counter, like formats.h ---

struct UniformStream {
  uint64_t seed;
  uint64_t cachedBlock = ~0ull;  // never a real counter: indices >> 2 are below 2^62
  Philox4 cached = {};
  __device__ explicit UniformStream(uint64_t s) : seed(s) {}
  __device__ float at(uint64_t index) {
    uint64_t block = index >> 2;
    if (block != cachedBlock) {
      Philox4 ctr = {{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0u, 0u}};
      cached = philox4x32(ctr, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
      cachedBlock = block;
    }
    uint32_t word = (index & 3) == 0   ? cached.v[0]
                    : (index & 3) == 1 ? cached.v[1]
                    : (index & 3) == 2 ? cached.v[2]
                                       : cached.v[3];
    return static_cast<float>(word >> 8) * 5.9604644775390625e-08f;  // * 2^-24
  }
};

// ---- Pre-pass: tensor amax (finite values) and NVFP4 16x16 tile amax (all values) ---------

struct PrepassArgs {
  const float* x;
  int64_t cols;
  int64_t octets;
  int hadamard;
  uint32_t* tensorAmaxBits;  // may be null
  uint32_t* tileAmaxBits;    // NVFP4 2-D blocks, [ceil(rows/16)][cols/16]; may be null
};

template <bool kVector>
__global__ void __launch_bounds__(kThreads) prepassKernel(PrepassArgs a) {
  uint32_t finiteMax = 0;
  const int64_t blocksPerRow = a.cols / kNvfp4BlockSize;
  for (int64_t base = int64_t(blockIdx.x) * kThreads; base < a.octets;
       base += int64_t(gridDim.x) * kThreads) {
    int64_t o = base + threadIdx.x;
    bool active = o < a.octets;
    float v[kOctet] = {};
    if (active) loadOctet<kVector>(a.x + o * kOctet, v);
    if (a.hadamard) hadamardOctet<false>(v, o & 1);
    uint32_t allMax = 0;
#pragma unroll
    for (int i = 0; i < kOctet; ++i) {
      uint32_t b = absBits(v[i]);
      allMax = max(allMax, b);
      if (b < kInfinityBits) finiteMax = max(finiteMax, b);
    }
    if (a.tileAmaxBits) {
      allMax = max(allMax, __shfl_xor_sync(kFullMask, allMax, 1));
      if (active && (o & 1) == 0 && allMax != 0) {
        int64_t flat = o * kOctet;
        int64_t r = flat / a.cols;
        int64_t b = (flat - r * a.cols) / kNvfp4BlockSize;
        atomicMax(a.tileAmaxBits + (r / 16) * blocksPerRow + b, allMax);
      }
    }
  }
  if (a.tensorAmaxBits) {
    finiteMax = __reduce_max_sync(kFullMask, finiteMax);
    if (threadIdx.x % 32 == 0 && finiteMax != 0) atomicMax(a.tensorAmaxBits, finiteMax);
  }
}

// Plain tensor amax of `count` floats (any count and alignment).
__global__ void __launch_bounds__(kThreads)
    tensorAmaxKernel(const float* x, int64_t count, uint32_t* out) {
  uint32_t m = 0;
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * kThreads) {
    uint32_t b = absBits(x[i]);
    if (b < kInfinityBits) m = max(m, b);
  }
  m = __reduce_max_sync(kFullMask, m);
  if (threadIdx.x % 32 == 0 && m != 0) atomicMax(out, m);
}

// ---- Quantize / fused fake-quant --------------------------------------------------------

struct QuantizeArgs {
  const float* x;
  float* y;        // fake quant output (may be null)
  uint8_t* codes;  // quantize outputs
  uint8_t* scales;
  float* blockSqErr;               // fake quant (may be null)
  float* blockAmax;                // fake quant (may be null)
  StatsPartial* partials;          // fake quant statistics, one per thread block (may be null)
  const uint32_t* tileAmaxBits;    // NVFP4 2-D blocks (null for 1-D)
  const uint32_t* tensorAmaxBits;  // measured NVFP4 amax, or null: use globalScale
  float globalScale;
  int64_t cols;
  int64_t octets;
  uint64_t seed;
  uint64_t seedOffset;
  int hadamard;
  int stochastic;
  int floorRule;
};

template <fp4_format kFormat, bool kFake, bool kVector>
__global__ void __launch_bounds__(kThreads) quantizeKernel(QuantizeArgs a) {
  constexpr int kBlock = kFormat == FP4_FORMAT_MXFP4 ? kMxfp4BlockSize : kNvfp4BlockSize;
  constexpr int kLanesPerBlock = kBlock / kOctet;  // 4 or 2 neighbouring lanes
  const float globalScale = kFormat == FP4_FORMAT_NVFP4 && a.tensorAmaxBits
                                ? nvfp4GlobalScale(bitsToFloat(*a.tensorAmaxBits))
                                : a.globalScale;
  const int64_t blocksPerRow = a.cols / kBlock;
  const bool measureErrors = kFake && (a.partials || a.blockSqErr);
  StatsPartial stats{};
  UniformStream uniforms(a.seed);

  // The loop bound is uniform over the thread block, so every lane reaches every shuffle.
  for (int64_t base = int64_t(blockIdx.x) * kThreads; base < a.octets;
       base += int64_t(gridDim.x) * kThreads) {
    const int64_t o = base + threadIdx.x;
    const bool active = o < a.octets;
    const bool leader = o % kLanesPerBlock == 0;
    const int64_t flat = o * kOctet;
    const int64_t blockIndex = flat / kBlock;  // = row * blocksPerRow + column block

    float v[kOctet] = {};
    if (active) loadOctet<kVector>(a.x + flat, v);
    if (a.hadamard) hadamardOctet<false>(v, o & 1);

    uint32_t amaxBits = 0;
#pragma unroll
    for (int i = 0; i < kOctet; ++i) amaxBits = max(amaxBits, absBits(v[i]));
#pragma unroll
    for (int offset = 1; offset < kLanesPerBlock; offset <<= 1)
      amaxBits = max(amaxBits, __shfl_xor_sync(kFullMask, amaxBits, offset));
    if (kFormat == FP4_FORMAT_NVFP4 && a.tileAmaxBits && active) {
      int64_t r = flat / a.cols;
      amaxBits = a.tileAmaxBits[(r / 16) * blocksPerRow + (blockIndex - r * blocksPerRow)];
    }
    const DeviceBlockScale s = blockScaleFor<kFormat>(amaxBits, globalScale, a.floorRule != 0);

    uint32_t packed = 0;
    float q[kOctet];
#pragma unroll
    for (int i = 0; i < kOctet; ++i) {
      uint32_t code = 0;
      if (!s.zero) {
        if (a.stochastic) {
          uint64_t index = uint64_t(flat + i) + a.seedOffset;
          code = e2m1EncodeStochastic(v[i] / s.decoded, uniforms.at(index));
        } else {
          float mag = absFloat(v[i]);
          float scaled = kFormat == FP4_FORMAT_MXFP4 ? mag * s.multiplier : mag / s.decoded;
          code = e2m1SignBit(v[i]) | static_cast<uint32_t>(e2m1NearestIndex(scaled));
        }
      }
      packed |= code << (4 * i);
      if (kFake) {
        q[i] = isNaN(s.decoded)
                   ? bitsToFloat(kQuietNaNBits)
                   : bitsToFloat(e2m1MagnitudeBits(code & 7u) | (code & 8u) << 28) * s.decoded;
      }
    }

    if (!kFake) {
      if (active) {
        storeCodes<kVector>(a.codes + flat / 2, packed);
        if (leader) a.scales[blockIndex] = s.byte;
      }
      continue;
    }

    if (a.y && active) storeOctet<kVector>(a.y + flat, q);
    if (!measureErrors) {
      if (a.blockAmax && active && leader)
        a.blockAmax[blockIndex] = s.finite ? bitsToFloat(amaxBits) : bitsToFloat(kQuietNaNBits);
      continue;
    }
    double blockErr = 0.0;
    if (active) {
      if (!s.finite) {
#pragma unroll
        for (int i = 0; i < kOctet; ++i) stats.nonfinite += !isFiniteFloat(v[i]);
      } else {
        const float clipLimit = s.decoded > 0.0f ? 6.0f * s.decoded : 0.0f;
#pragma unroll
        for (int i = 0; i < kOctet; ++i) {
          double x = v[i], qd = q[i];
          double err = x - qd;
          stats.sumX2 += x * x;
          stats.sumErr2 += err * err;
          stats.sumXq += x * qd;
          stats.sumQ2 += qd * qd;
          stats.maxAbsErr = fmax(stats.maxAbsErr, fabs(err));
          stats.clipped += clipLimit > 0.0f && absFloat(v[i]) > clipLimit;
          stats.flushed += v[i] != 0.0f && q[i] == 0.0f;
          blockErr += err * err;
        }
        stats.count += kOctet;
      }
    }
#pragma unroll
    for (int offset = 1; offset < kLanesPerBlock; offset <<= 1)
      blockErr += __shfl_xor_sync(kFullMask, blockErr, offset);
    if (active && leader) {
      if (a.blockSqErr)
        a.blockSqErr[blockIndex] =
            s.finite ? static_cast<float>(blockErr) : bitsToFloat(kQuietNaNBits);
      if (a.blockAmax)
        a.blockAmax[blockIndex] = s.finite ? bitsToFloat(amaxBits) : bitsToFloat(kQuietNaNBits);
    }
  }

  if (kFake && a.partials) {
    StatsPartial total = reduceBlock(stats);
    if (threadIdx.x == 0) a.partials[blockIdx.x] = total;
  }
}

// ---- Dequantize -------------------------------------------------------------------------

template <fp4_format kFormat, bool kVector>
__global__ void __launch_bounds__(kThreads)
    dequantizeKernel(const uint8_t* codes, const uint8_t* scales, float globalScale, float* y,
                     int64_t octets) {
  constexpr int kBlock = kFormat == FP4_FORMAT_MXFP4 ? kMxfp4BlockSize : kNvfp4BlockSize;
  for (int64_t o = int64_t(blockIdx.x) * kThreads + threadIdx.x; o < octets;
       o += int64_t(gridDim.x) * kThreads) {
    const int64_t flat = o * kOctet;
    const uint32_t packed = loadCodes<kVector>(codes + flat / 2);
    const uint8_t byte = scales[flat / kBlock];
    // A NaN scale decodes (on the CPU) to NaN bits with the scale's sign, whatever the code.
    bool nanScale;
    uint32_t nanBits = kQuietNaNBits;
    float scale;
    if (kFormat == FP4_FORMAT_MXFP4) {
      nanScale = byte == kE8M0NaN;
      scale = e8m0Decode(byte);
    } else {
      nanScale = (byte & 0x7F) == kE4M3NaN;
      if (byte & 0x80) nanBits = kNegativeQuietNaNBits;
      scale = e4m3Decode(byte) * globalScale;
    }
    // An NVFP4 scale times a huge (unvalidated) s2 can overflow to Inf; 0 * Inf is then the
    // x86 default NaN (sign set) on the CPU, and the GPU's NaN differs, so write those bits too.
    const bool infiniteScale = !nanScale && absBits(scale) == kInfinityBits;
    float q[kOctet];
#pragma unroll
    for (int i = 0; i < kOctet; ++i) {
      uint32_t code = (packed >> (4 * i)) & 15u;
      q[i] = nanScale ? bitsToFloat(nanBits)
             : infiniteScale && (code & 7u) == 0
                 ? bitsToFloat(kNegativeQuietNaNBits)
                 : bitsToFloat(e2m1MagnitudeBits(code & 7u) | (code & 8u) << 28) * scale;
    }
    storeOctet<kVector>(y + flat, q);
  }
}

// ---- Hadamard -----------------------------------------------------------------------------

template <bool kVector, bool kInverse>
__global__ void __launch_bounds__(kThreads)
    hadamardKernel(const float* x, float* y, int64_t octets) {
  for (int64_t base = int64_t(blockIdx.x) * kThreads; base < octets;
       base += int64_t(gridDim.x) * kThreads) {
    int64_t o = base + threadIdx.x;
    bool active = o < octets;
    float v[kOctet] = {};
    if (active) loadOctet<kVector>(x + o * kOctet, v);
    hadamardOctet<kInverse>(v, o & 1);
    if (active) storeOctet<kVector>(y + o * kOctet, v);
  }
}

// ---- Host side: validation is shared with dispatch.cpp (validate.h) ---------------------

bool alignedTo(const void* p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

fp4_status checkFloatBuffer(const void* p, const char* name, bool required) {
  if (!p) return required ? fail(FP4_ERR_NULL_POINTER, "fp4_cuda: %s is NULL", name) : FP4_OK;
  if (!alignedTo(p, alignof(float)))
    return fail(FP4_ERR_MISALIGNED,
                "fp4_cuda: %s (%p) is not 4-byte aligned (copy it to a float buffer)", name, p);
  return FP4_OK;
}

fp4_status requireDevice() {
  if (fp4_cuda_device_count() > 0) return FP4_OK;
  return fail(FP4_ERR_UNAVAILABLE,
              "fp4_cuda: no usable CUDA device (no GPU, no driver, or CUDA_VISIBLE_DEVICES hides "
              "them); use the CPU functions of fp4.h");
}

// Passing a host pointer to a kernel would fault and poison the whole CUDA context, so each
// buffer is checked to be reachable from the current device first (a driver query, ~1 us).
fp4_status checkDevicePointer(const void* p, const char* name) {
  if (!p) return FP4_OK;
  cudaPointerAttributes attr;
  cudaError_t err = cudaPointerGetAttributes(&attr, p);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return fail(FP4_ERR_ARGUMENT, "fp4_cuda: %s (%p) is not a pointer CUDA knows: %s", name, p,
                cudaGetErrorString(err));
  }
  if (attr.type == cudaMemoryTypeUnregistered || attr.devicePointer == nullptr)
    return fail(FP4_ERR_ARGUMENT,
                "fp4_cuda: %s (%p) is host memory; copy it to the GPU (cudaMemcpy) or use the "
                "CPU functions of fp4.h",
                name, p);
  int device = 0;
  FP4_CUDA_TRY(cudaGetDevice(&device), "cudaGetDevice");
  if (attr.type == cudaMemoryTypeDevice && attr.device != device)
    return fail(FP4_ERR_ARGUMENT,
                "fp4_cuda: %s (%p) lives on device %d but the current device is %d "
                "(cudaSetDevice first)",
                name, p, attr.device, device);
  return FP4_OK;
}

// ---- Launch configuration and scratch memory ----------------------------------------------

// Grid for a grid-stride kernel: as many thread blocks as can be resident at once (no second
// wave, no tail), fewer for small tensors.
template <class Kernel>
fp4_status gridFor(Kernel kernel, int64_t work, int* grid) {
  int device = 0, sms = 0, perSm = 0;
  FP4_CUDA_TRY(cudaGetDevice(&device), "cudaGetDevice");
  FP4_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
               "cudaDeviceGetAttribute(multiprocessors)");
  FP4_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, kernel, kThreads, 0),
               "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  int64_t cap = int64_t(sms > 0 ? sms : 1) * (perSm > 0 ? perSm : 1);
  int64_t need = (work + kThreads - 1) / kThreads;
  *grid = int(need < 1 ? 1 : (need < cap ? need : cap));
  return FP4_OK;
}

// Per-call device scratch, stream-ordered where the device has memory pools (so a call does
// not synchronize for it), released by the destructor on every return path.
class Scratch {
 public:
  explicit Scratch(cudaStream_t stream) : m_stream(stream) {}
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() {
    if (!m_ptr) return;
    if (m_async)
      cudaFreeAsync(m_ptr, m_stream);
    else
      cudaFree(m_ptr);
  }

  fp4_status allocate(size_t bytes) {
    int device = 0, pools = 0;
    FP4_CUDA_TRY(cudaGetDevice(&device), "cudaGetDevice");
    FP4_CUDA_TRY(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device),
                 "cudaDeviceGetAttribute(memory pools)");
    m_async = pools != 0;
    if (m_async)
      FP4_CUDA_TRY(cudaMallocAsync(&m_ptr, bytes, m_stream), "cudaMallocAsync (scratch)");
    else
      FP4_CUDA_TRY(cudaMalloc(&m_ptr, bytes), "cudaMalloc (scratch)");
    return FP4_OK;
  }
  char* data() const { return static_cast<char*>(m_ptr); }

 private:
  cudaStream_t m_stream;
  void* m_ptr = nullptr;
  bool m_async = false;
};

size_t alignUp(size_t n) {
  return (n + 15) / 16 * 16;
}

// Scratch layout: tensor amax bits | tile amax bits | per-block statistics | the total.
struct ScratchLayout {
  size_t amaxOffset = 0, tileOffset = 0, partialsOffset = 0, totalOffset = 0, bytes = 0;
  ScratchLayout(size_t tiles, size_t partials) {
    tileOffset = alignUp(sizeof(uint32_t));
    partialsOffset = tileOffset + alignUp(tiles * sizeof(uint32_t));
    totalOffset = partialsOffset + alignUp(partials * sizeof(StatsPartial));
    bytes = totalOffset + sizeof(StatsPartial);
  }
};

// Everything quantize and fake-quant share: validation done, pointers and options resolved.
struct QuantizePlan {
  const fp4_config* cfg;
  int64_t rows, cols;
  bool measureAmax;   // NVFP4 without a given tensor amax
  bool tiles;         // NVFP4 16x16 blocks
  float globalScale;  // host-known s2 (when not measured)
};

fp4_status runPrepass(const QuantizePlan& plan, const float* x, uint32_t* amaxBits,
                      uint32_t* tileBits, cudaStream_t stream) {
  PrepassArgs a;
  a.x = x;
  a.cols = plan.cols;
  a.octets = plan.rows * plan.cols / kOctet;
  a.hadamard = plan.cfg->hadamard != 0;
  a.tensorAmaxBits = amaxBits;
  a.tileAmaxBits = tileBits;
  auto kernel = alignedTo(x, 16) ? prepassKernel<true> : prepassKernel<false>;
  int grid = 0;
  FP4_TRY(gridFor(kernel, a.octets, &grid));
  kernel<<<grid, kThreads, 0, stream>>>(a);
  FP4_CUDA_LAUNCHED("the amax pre-pass kernel launch");
  return FP4_OK;
}

using QuantizeKernel = void (*)(QuantizeArgs);

template <fp4_format kFormat>
QuantizeKernel quantizeKernelFor(bool fake, bool vector) {
  if (fake)
    return vector ? quantizeKernel<kFormat, true, true> : quantizeKernel<kFormat, true, false>;
  return vector ? quantizeKernel<kFormat, false, true> : quantizeKernel<kFormat, false, false>;
}

StatsPartial zeroStats() {
  StatsPartial s;
  std::memset(&s, 0, sizeof s);
  return s;
}

// Quantize (stats == nullptr path) and fake-quant share one driver.
fp4_status runQuantize(const QuantizePlan& plan, QuantizeArgs a, bool fake, fp4_error_stats* stats,
                       float* globalScaleOut, cudaStream_t stream) {
  const int64_t octets = plan.rows * plan.cols / kOctet;
  const bool vector =
      alignedTo(a.x, 16) && (!a.y || alignedTo(a.y, 16)) && (!a.codes || alignedTo(a.codes, 4));
  const QuantizeKernel kernel = plan.cfg->format == FP4_FORMAT_MXFP4
                                    ? quantizeKernelFor<FP4_FORMAT_MXFP4>(fake, vector)
                                    : quantizeKernelFor<FP4_FORMAT_NVFP4>(fake, vector);
  int grid = 0;
  FP4_TRY(gridFor(kernel, octets, &grid));
  const size_t tileCount =
      plan.tiles ? size_t((plan.rows + 15) / 16) * size_t(plan.cols / kNvfp4BlockSize) : 0;
  const bool wantStats = fake && stats;
  const bool needScratch = plan.measureAmax || plan.tiles || wantStats;

  Scratch scratch(stream);
  ScratchLayout layout(tileCount, wantStats ? size_t(grid) : 0);
  uint32_t* amaxBits = nullptr;
  uint32_t* tileBits = nullptr;
  StatsPartial* partials = nullptr;
  StatsPartial* total = nullptr;
  if (needScratch) {
    FP4_TRY(scratch.allocate(layout.bytes));
    // Zero the amax words: they are combined with atomicMax over non-negative bit patterns.
    FP4_CUDA_TRY(cudaMemsetAsync(scratch.data(), 0, layout.partialsOffset, stream),
                 "cudaMemsetAsync (scratch)");
    if (plan.measureAmax)
      amaxBits = reinterpret_cast<uint32_t*>(scratch.data() + layout.amaxOffset);
    if (plan.tiles) tileBits = reinterpret_cast<uint32_t*>(scratch.data() + layout.tileOffset);
    if (wantStats) {
      partials = reinterpret_cast<StatsPartial*>(scratch.data() + layout.partialsOffset);
      total = reinterpret_cast<StatsPartial*>(scratch.data() + layout.totalOffset);
    }
  }
  if (plan.measureAmax || plan.tiles) FP4_TRY(runPrepass(plan, a.x, amaxBits, tileBits, stream));

  a.cols = plan.cols;
  a.octets = octets;
  a.tileAmaxBits = tileBits;
  a.tensorAmaxBits = amaxBits;
  a.globalScale = plan.globalScale;
  a.partials = partials;
  a.seed = plan.cfg->seed;
  a.seedOffset = plan.cfg->seed_offset;
  a.hadamard = plan.cfg->hadamard != 0;
  a.stochastic = plan.cfg->rounding == FP4_ROUNDING_STOCHASTIC;
  a.floorRule = plan.cfg->scale_rule == FP4_SCALE_RULE_FLOOR;
  kernel<<<grid, kThreads, 0, stream>>>(a);
  FP4_CUDA_LAUNCHED(fake ? "the fake-quant kernel launch" : "the quantize kernel launch");

  if (wantStats) {
    finalizeStatsKernel<<<1, kThreads, 0, stream>>>(partials, grid, total);
    FP4_CUDA_LAUNCHED("the statistics reduction kernel launch");
    StatsPartial host = zeroStats();
    FP4_CUDA_TRY(cudaMemcpyAsync(&host, total, sizeof host, cudaMemcpyDeviceToHost, stream),
                 "cudaMemcpyAsync (statistics)");
    FP4_CUDA_TRY(cudaStreamSynchronize(stream), "cudaStreamSynchronize (statistics)");
    stats->count = int64_t(host.count);
    stats->clipped = int64_t(host.clipped);
    stats->flushed = int64_t(host.flushed);
    stats->nonfinite = int64_t(host.nonfinite);
    stats->sum_x2 = host.sumX2;
    stats->sum_err2 = host.sumErr2;
    stats->sum_xq = host.sumXq;
    stats->sum_q2 = host.sumQ2;
    stats->max_abs_err = host.maxAbsErr;
  }
  if (globalScaleOut) {
    if (plan.measureAmax) {
      uint32_t bits = 0;
      FP4_CUDA_TRY(cudaMemcpyAsync(&bits, amaxBits, sizeof bits, cudaMemcpyDeviceToHost, stream),
                   "cudaMemcpyAsync (tensor amax)");
      FP4_CUDA_TRY(cudaStreamSynchronize(stream), "cudaStreamSynchronize (tensor amax)");
      *globalScaleOut = fp4_nvfp4_global_scale(bitsToFloat(bits));
    } else {
      *globalScaleOut = plan.globalScale;
    }
  }
  return FP4_OK;
}

// Validation shared by quantize and fake-quant after the shape checks, mirroring
// dispatch.cpp's resolveGlobalScale: a given NVFP4 tensor amax must be finite.
fp4_status makePlan(const fp4_config* cfg, int64_t rows, int64_t cols, float tensorAmax,
                    QuantizePlan* plan) {
  plan->cfg = cfg;
  plan->rows = rows;
  plan->cols = cols;
  plan->tiles = cfg->format == FP4_FORMAT_NVFP4 && cfg->nvfp4_2d_blocks;
  plan->measureAmax = cfg->format == FP4_FORMAT_NVFP4 && tensorAmax < 0.0f;
  plan->globalScale = 1.0f;
  if (cfg->format == FP4_FORMAT_NVFP4 && !plan->measureAmax) {
    if (!std::isfinite(tensorAmax))
      return fail(FP4_ERR_ARGUMENT,
                  "fp4_cuda: NVFP4 tensor amax %g is not finite (recalibrate on finite data)",
                  double(tensorAmax));
    plan->globalScale = fp4_nvfp4_global_scale(tensorAmax);
  }
  return FP4_OK;
}

}  // namespace
}  // namespace fp4lab::kernels::cuda

using namespace fp4lab;
using namespace fp4lab::kernels::cuda;
using fp4lab::kernels::validateConfig;
using fp4lab::kernels::validateShape;

extern "C" {

int fp4_cuda_device_count(void) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // no driver or no GPU is an answer (0), not an error
    return 0;
  }
  return count;
}

fp4_status fp4_cuda_tensor_amax(const float* x, int64_t count, float* amax, void* stream) {
  if (!amax) return fail(FP4_ERR_NULL_POINTER, "fp4_cuda: amax (the host result) is NULL");
  *amax = 0.0f;
  if (count < 0) return fail(FP4_ERR_SHAPE, "fp4_cuda: negative count %lld", (long long)count);
  if (count == 0) return FP4_OK;
  FP4_TRY(checkFloatBuffer(x, "input x", true));
  FP4_TRY(requireDevice());
  FP4_TRY(checkDevicePointer(x, "input x"));
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  Scratch scratch(s);
  FP4_TRY(scratch.allocate(sizeof(uint32_t)));
  uint32_t* bits = reinterpret_cast<uint32_t*>(scratch.data());
  FP4_CUDA_TRY(cudaMemsetAsync(bits, 0, sizeof(uint32_t), s), "cudaMemsetAsync (amax)");
  int grid = 0;
  FP4_TRY(gridFor(tensorAmaxKernel, (count + kOctet - 1) / kOctet, &grid));
  tensorAmaxKernel<<<grid, kThreads, 0, s>>>(x, count, bits);
  FP4_CUDA_LAUNCHED("the tensor amax kernel launch");
  uint32_t host = 0;
  FP4_CUDA_TRY(cudaMemcpyAsync(&host, bits, sizeof host, cudaMemcpyDeviceToHost, s),
               "cudaMemcpyAsync (amax)");
  FP4_CUDA_TRY(cudaStreamSynchronize(s), "cudaStreamSynchronize (amax)");
  *amax = bitsToFloat(host);
  return FP4_OK;
}

fp4_status fp4_cuda_quantize(const fp4_config* cfg, const float* x, int64_t rows, int64_t cols,
                             float tensor_amax, uint8_t* codes, uint8_t* scales,
                             float* global_scale, void* stream) {
  FP4_TRY(validateConfig(cfg));
  FP4_TRY(validateShape(cfg, rows, cols));
  if (rows * cols == 0) {
    if (global_scale) *global_scale = 1.0f;
    return FP4_OK;
  }
  FP4_TRY(checkFloatBuffer(x, "input x", true));
  if (!codes || !scales)
    return fail(FP4_ERR_NULL_POINTER, "fp4_cuda: codes or scales buffer is NULL");
  QuantizePlan plan;
  FP4_TRY(makePlan(cfg, rows, cols, tensor_amax, &plan));
  FP4_TRY(requireDevice());
  FP4_TRY(checkDevicePointer(x, "input x"));
  FP4_TRY(checkDevicePointer(codes, "codes"));
  FP4_TRY(checkDevicePointer(scales, "scales"));
  QuantizeArgs a{};
  a.x = x;
  a.codes = codes;
  a.scales = scales;
  return runQuantize(plan, a, false, nullptr, global_scale, static_cast<cudaStream_t>(stream));
}

fp4_status fp4_cuda_dequantize(const fp4_config* cfg, const uint8_t* codes, const uint8_t* scales,
                               float global_scale, int64_t rows, int64_t cols, float* y,
                               void* stream) {
  FP4_TRY(validateConfig(cfg));
  FP4_TRY(validateShape(cfg, rows, cols));
  if (rows * cols == 0) return FP4_OK;
  if (!codes || !scales)
    return fail(FP4_ERR_NULL_POINTER, "fp4_cuda: codes or scales buffer is NULL");
  FP4_TRY(checkFloatBuffer(y, "output y", true));
  if (cfg->format == FP4_FORMAT_NVFP4 && !(std::isfinite(global_scale) && global_scale > 0.0f))
    return fail(FP4_ERR_ARGUMENT, "fp4_cuda: NVFP4 global scale %g must be finite and positive",
                double(global_scale));
  FP4_TRY(requireDevice());
  FP4_TRY(checkDevicePointer(codes, "codes"));
  FP4_TRY(checkDevicePointer(scales, "scales"));
  FP4_TRY(checkDevicePointer(y, "output y"));
  const int64_t octets = rows * cols / kOctet;
  const bool vector = alignedTo(codes, 4) && alignedTo(y, 16);
  auto kernel = cfg->format == FP4_FORMAT_MXFP4
                    ? (vector ? dequantizeKernel<FP4_FORMAT_MXFP4, true>
                              : dequantizeKernel<FP4_FORMAT_MXFP4, false>)
                    : (vector ? dequantizeKernel<FP4_FORMAT_NVFP4, true>
                              : dequantizeKernel<FP4_FORMAT_NVFP4, false>);
  int grid = 0;
  FP4_TRY(gridFor(kernel, octets, &grid));
  kernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(codes, scales, global_scale, y,
                                                                   octets);
  FP4_CUDA_LAUNCHED("the dequantize kernel launch");
  return FP4_OK;
}

fp4_status fp4_cuda_fake_quantize(const fp4_config* cfg, const float* x, int64_t rows, int64_t cols,
                                  float tensor_amax, float* y, fp4_error_stats* stats,
                                  float* block_sq_err, float* block_amax, void* stream) {
  FP4_TRY(validateConfig(cfg));
  FP4_TRY(validateShape(cfg, rows, cols));
  if (stats) fp4_stats_clear(stats);
  if (rows * cols == 0) return FP4_OK;
  FP4_TRY(checkFloatBuffer(x, "input x", true));
  FP4_TRY(checkFloatBuffer(y, "output y", false));
  FP4_TRY(checkFloatBuffer(block_sq_err, "block_sq_err", false));
  FP4_TRY(checkFloatBuffer(block_amax, "block_amax", false));
  QuantizePlan plan;
  FP4_TRY(makePlan(cfg, rows, cols, tensor_amax, &plan));
  FP4_TRY(requireDevice());
  FP4_TRY(checkDevicePointer(x, "input x"));
  FP4_TRY(checkDevicePointer(y, "output y"));
  FP4_TRY(checkDevicePointer(block_sq_err, "block_sq_err"));
  FP4_TRY(checkDevicePointer(block_amax, "block_amax"));
  if (!y && !stats && !block_sq_err && !block_amax) return FP4_OK;  // nothing asked for
  QuantizeArgs a{};
  a.x = x;
  a.y = y;
  a.blockSqErr = block_sq_err;
  a.blockAmax = block_amax;
  return runQuantize(plan, a, true, stats, nullptr, static_cast<cudaStream_t>(stream));
}

fp4_status fp4_cuda_hadamard16(const float* x, int64_t rows, int64_t cols, int inverse, float* y,
                               void* stream) {
  if (rows < 0 || cols < 0 || cols % kHadamardSize != 0)
    return fail(FP4_ERR_SHAPE,
                "fp4_cuda: Hadamard transform of %lld x %lld: the last dimension must be a "
                "multiple of 16",
                (long long)rows, (long long)cols);
  if (cols > 0 && rows > INT64_MAX / 2 / cols)
    return fail(FP4_ERR_SHAPE, "fp4_cuda: %lld x %lld elements overflow", (long long)rows,
                (long long)cols);
  if (rows * cols == 0) return FP4_OK;
  FP4_TRY(checkFloatBuffer(x, "input x", true));
  FP4_TRY(checkFloatBuffer(y, "output y", true));
  FP4_TRY(requireDevice());
  FP4_TRY(checkDevicePointer(x, "input x"));
  FP4_TRY(checkDevicePointer(y, "output y"));
  const int64_t octets = rows * cols / kOctet;
  const bool vector = alignedTo(x, 16) && alignedTo(y, 16);
  auto kernel = vector ? (inverse ? hadamardKernel<true, true> : hadamardKernel<true, false>)
                       : (inverse ? hadamardKernel<false, true> : hadamardKernel<false, false>);
  int grid = 0;
  FP4_TRY(gridFor(kernel, octets, &grid));
  kernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(x, y, octets);
  FP4_CUDA_LAUNCHED("the Hadamard kernel launch");
  return FP4_OK;
}

}  // extern "C"
