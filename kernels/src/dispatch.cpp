// The kernels' front end: argument validation with clear errors, the backend table, NVFP4
// tensor scale, and row-chunked multithreading whose chunking (and so every result) does not
// depend on the number of threads (the threads themselves live in thread_pool.cpp).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "backend.h"
#include "last_error.h"
#include "thread_pool.h"
#include "validate.h"

namespace fp4lab::kernels {
namespace {

thread_local std::string t_lastError;

fp4_status fail(fp4_status status, const char* fmt, ...) {
  char buf[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  t_lastError = buf;
  return status;
}

bool cpuHasAvx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi2");
}
bool cpuHasAvx512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
}

const BackendOps* opsFor(fp4_backend b) {
  switch (b) {
    case FP4_BACKEND_REFERENCE:
      return &referenceBackend();
    case FP4_BACKEND_GENERIC:
      return &genericBackend();
    case FP4_BACKEND_AVX2:
      return cpuHasAvx2() ? avx2Backend() : nullptr;
    case FP4_BACKEND_AVX512:
      return cpuHasAvx512() ? avx512Backend() : nullptr;
    default:
      return nullptr;
  }
}

fp4_backend bestBackend() {
  if (opsFor(FP4_BACKEND_AVX512)) return FP4_BACKEND_AVX512;
  if (opsFor(FP4_BACKEND_AVX2)) return FP4_BACKEND_AVX2;
  return FP4_BACKEND_GENERIC;
}

fp4_backend initialBackend() {
  const char* env = std::getenv("FP4LAB_KERNELS");
  if (env && *env) {
    for (fp4_backend b :
         {FP4_BACKEND_REFERENCE, FP4_BACKEND_GENERIC, FP4_BACKEND_AVX2, FP4_BACKEND_AVX512}) {
      if (std::strcmp(env, fp4_backend_name(b)) == 0 && opsFor(b)) return b;
    }
    std::fprintf(stderr,
                 "fp4lab: FP4LAB_KERNELS=%s is not an available backend "
                 "(reference, generic, avx2, avx512); using %s\n",
                 env, fp4_backend_name(bestBackend()));
  }
  return bestBackend();
}

std::atomic<int> g_backend{-1};
std::atomic<int> g_threads{0};

fp4_backend currentBackend() {
  int b = g_backend.load();
  if (b < 0) {
    int init = initialBackend();
    g_backend.compare_exchange_strong(b, init);
    b = g_backend.load();
  }
  return fp4_backend(b);
}

const BackendOps& ops() {
  return *opsFor(currentBackend());
}

int threadCount() {
  int t = g_threads.load();
  if (t <= 0) {
    // hardware_concurrency() is a system call in glibc: ask once.
    static const int hardware = int(std::max(1u, std::thread::hardware_concurrency()));
    t = hardware;
  }
  return t;
}

// Rows per chunk: a multiple of 16 holding about 64 K elements. Chunks are the unit of both
// threading and statistics merging, so results depend on neither the thread count nor timing.
int64_t chunkRows(int64_t cols) {
  int64_t rows = std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(1, cols));
  return (rows + 15) / 16 * 16;
}

template <class Fn>
void forEachChunk(int64_t rows, int64_t cols, Fn&& fn) {
  int64_t step = chunkRows(cols);
  int64_t chunks = (rows + step - 1) / step;
  auto chunk = [&](int64_t c) { fn(c, c * step, std::min(rows, (c + 1) * step)); };
  // Small tensors are not worth waking a worker; they skip threadCount too. With the worker pool,
  // two threads gave 0.8x-1.1x at 128 K elements and 1.3x-1.6x from 160 K (performance.md).
  const bool small = chunks <= 1 || rows * cols < (int64_t(160) << 10);
  const int threads = small ? 1 : threadCount();
  if (threads <= 1) {
    for (int64_t c = 0; c < chunks; ++c) chunk(c);
    return;
  }
  runChunks(
      threads, chunks, [](void* ctx, int64_t c) { (*static_cast<decltype(chunk)*>(ctx))(c); },
      &chunk);
}

// A kernel output rounded to BF16 bits, to nearest even: LibTorch's cast (io::floatToBf16) for
// every value the kernels output, whose only NaN is 0x7FC00000 (as storeNarrow in cpu_simd.inl).
uint16_t bf16Bits(float v) {
  const uint32_t bits = floatBits(v);
  return uint16_t((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

bool misaligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % alignof(float) != 0;
}

fp4_status checkFloatBuffer(const void* p, const char* name, bool required) {
  if (!p) return required ? fail(FP4_ERR_NULL_POINTER, "fp4: %s is NULL", name) : FP4_OK;
  if (misaligned(p))
    return fail(FP4_ERR_MISALIGNED,
                "fp4: %s (%p) is not 4-byte aligned (copy it to a float buffer)", name, p);
  return FP4_OK;
}

#define FP4_TRY(expr)            \
  do {                           \
    fp4_status _s = (expr);      \
    if (_s != FP4_OK) return _s; \
  } while (0)

// Tensor amax for NVFP4: the caller's calibrated value, or measured (after rotation if asked).
fp4_status resolveGlobalScale(Job& job, float tensorAmax) {
  if (job.cfg.format != FP4_FORMAT_NVFP4) return FP4_OK;
  if (tensorAmax < 0.0f) {
    const BackendOps& o = ops();
    if (job.rows <= chunkRows(job.cols)) {
      tensorAmax = o.amax(job, 0, job.rows, job.cfg.hadamard != 0);  // one chunk: no allocation
    } else {
      std::vector<float> partial(size_t((job.rows + chunkRows(job.cols) - 1) / chunkRows(job.cols)),
                                 0.0f);
      forEachChunk(job.rows, job.cols, [&](int64_t c, int64_t r0, int64_t r1) {
        partial[size_t(c)] = o.amax(job, r0, r1, job.cfg.hadamard != 0);
      });
      tensorAmax = 0.0f;
      for (float p : partial) tensorAmax = std::max(tensorAmax, p);
    }
  } else if (!std::isfinite(tensorAmax)) {
    return fail(FP4_ERR_ARGUMENT,
                "fp4: NVFP4 tensor amax %g is not finite (recalibrate on finite data)",
                double(tensorAmax));
  }
  job.globalScale = fp4_nvfp4_global_scale(tensorAmax);
  return FP4_OK;
}

}  // namespace

fp4_status validateConfig(const fp4_config* cfg) {
  if (!cfg)
    return fail(FP4_ERR_NULL_POINTER, "fp4: config is NULL (start from fp4_default_config)");
  if (cfg->format != FP4_FORMAT_MXFP4 && cfg->format != FP4_FORMAT_NVFP4)
    return fail(FP4_ERR_ARGUMENT,
                "fp4: unknown format %d (use FP4_FORMAT_MXFP4 or FP4_FORMAT_NVFP4)",
                int(cfg->format));
  if (cfg->scale_rule != FP4_SCALE_RULE_CEIL && cfg->scale_rule != FP4_SCALE_RULE_FLOOR)
    return fail(FP4_ERR_ARGUMENT, "fp4: unknown scale rule %d (ceil or floor)",
                int(cfg->scale_rule));
  if (cfg->rounding != FP4_ROUNDING_NEAREST_EVEN && cfg->rounding != FP4_ROUNDING_STOCHASTIC)
    return fail(FP4_ERR_ARGUMENT, "fp4: unknown rounding mode %d", int(cfg->rounding));
  if (cfg->nvfp4_2d_blocks && cfg->format != FP4_FORMAT_NVFP4)
    return fail(FP4_ERR_ARGUMENT,
                "fp4: 16x16 2-D blocks exist for NVFP4 only (MXFP4 blocks are 1x32)");
  return FP4_OK;
}

fp4_status validateShape(const fp4_config* cfg, int64_t rows, int64_t cols) {
  int block = fp4_block_size(cfg->format);
  if (rows < 0 || cols < 0)
    return fail(FP4_ERR_SHAPE, "fp4: negative shape %lld x %lld", (long long)rows, (long long)cols);
  if (cols % block != 0)
    return fail(FP4_ERR_SHAPE,
                "fp4: the last dimension (%lld) is not a multiple of the %s block size %d "
                "(pad the tensor or keep it in high precision)",
                (long long)cols, cfg->format == FP4_FORMAT_MXFP4 ? "MXFP4" : "NVFP4", block);
  if (cfg->hadamard && cols % kHadamardSize != 0)
    return fail(FP4_ERR_SHAPE,
                "fp4: the Hadamard transform needs a last dimension divisible by 16");
  if (cols > 0 && rows > INT64_MAX / 2 / cols)
    return fail(FP4_ERR_SHAPE, "fp4: %lld x %lld elements overflow", (long long)rows,
                (long long)cols);
  return FP4_OK;
}

}  // namespace fp4lab::kernels

using namespace fp4lab;
using namespace fp4lab::kernels;

extern "C" {

fp4_config fp4_default_config(fp4_format format) {
  fp4_config c;
  std::memset(&c, 0, sizeof c);
  c.format = format;
  c.scale_rule = FP4_SCALE_RULE_CEIL;
  c.rounding = FP4_ROUNDING_NEAREST_EVEN;
  return c;
}

int fp4_block_size(fp4_format format) {
  return format == FP4_FORMAT_MXFP4 ? kMxfp4BlockSize : kNvfp4BlockSize;
}
int64_t fp4_packed_bytes(int64_t rows, int64_t cols) {
  return rows * cols / 2;
}
int64_t fp4_scale_count(fp4_format format, int64_t rows, int64_t cols) {
  return rows * cols / fp4_block_size(format);
}

float fp4_tensor_amax(const float* x, int64_t count) {
  if (!x || count <= 0 || misaligned(x)) return 0.0f;
  Job job;
  job.cfg = fp4_default_config(FP4_FORMAT_NVFP4);
  job.x = x;
  // One row per element is wasteful; treat the buffer as rows of up to 4096.
  float m = 0.0f;
  const BackendOps& o = ops();
  const int64_t width = 4096;
  int64_t fullRows = count / width;
  job.cols = width;
  job.rows = fullRows;
  std::vector<float> partial(size_t((fullRows + chunkRows(width) - 1) / chunkRows(width)), 0.0f);
  forEachChunk(fullRows, width, [&](int64_t c, int64_t r0, int64_t r1) {
    partial[size_t(c)] = o.amax(job, r0, r1, false);
  });
  for (float p : partial) m = std::max(m, p);
  for (int64_t i = fullRows * width; i < count; ++i)
    if (std::isfinite(x[i])) m = std::max(m, std::fabs(x[i]));
  return m;
}

float fp4_nvfp4_global_scale(float tensorAmax) {
  return nvfp4GlobalScale(tensorAmax);
}

float fp4_nvfp4_amax_from_reciprocal(float g) {
  if (!(g > 0.0f) || !std::isfinite(g)) return NAN;
  if (g == 1.0f) return 2688.0f;  // also an all-zero tensor's (s2 = 1 either way)
  const double exact = 2688.0 / double(g);
  float a = float(exact);
  for (int k = 0; k < 16; ++k) a = std::nextafter(a, 0.0f);
  float best = NAN;
  for (int k = 0; k < 33; ++k, a = std::nextafter(a, INFINITY))
    if (2688.0f / a == g && (std::isnan(best) || std::fabs(a - exact) < std::fabs(best - exact)))
      best = a;
  return best;
}

float fp4_nvfp4_exportable_amax(float tensorAmax) {
  if (!(tensorAmax > 0.0f) || !std::isfinite(tensorAmax)) return tensorAmax;
  float a = tensorAmax;
  for (int k = 0; k < 8; ++k, a = std::nextafter(a, INFINITY))
    if (fp4_nvfp4_amax_from_reciprocal(2688.0f / a) == a) return a;
  return tensorAmax;
}

void fp4lab_set_last_error(fp4_status, const char* message) {
  t_lastError = message ? message : "";
}

fp4_status fp4_quantize(const fp4_config* cfg, const float* x, int64_t rows, int64_t cols,
                        float tensorAmax, uint8_t* codes, uint8_t* scales, float* globalScale) {
  FP4_TRY(validateConfig(cfg));
  FP4_TRY(validateShape(cfg, rows, cols));
  if (rows * cols == 0) {
    if (globalScale) *globalScale = 1.0f;
    return FP4_OK;
  }
  FP4_TRY(checkFloatBuffer(x, "input x", true));
  if (!codes || !scales) return fail(FP4_ERR_NULL_POINTER, "fp4: codes or scales buffer is NULL");
  Job job;
  job.cfg = *cfg;
  job.rows = rows, job.cols = cols, job.block = fp4_block_size(cfg->format);
  job.x = x, job.codes = codes, job.scales = scales;
  FP4_TRY(resolveGlobalScale(job, tensorAmax));
  const BackendOps& o = ops();
  forEachChunk(rows, cols, [&](int64_t, int64_t r0, int64_t r1) { o.quantize(job, r0, r1); });
  if (globalScale) *globalScale = job.globalScale;
  return FP4_OK;
}

fp4_status fp4_dequantize(const fp4_config* cfg, const uint8_t* codes, const uint8_t* scales,
                          float globalScale, int64_t rows, int64_t cols, float* y) {
  FP4_TRY(validateConfig(cfg));
  FP4_TRY(validateShape(cfg, rows, cols));
  if (rows * cols == 0) return FP4_OK;
  if (!codes || !scales) return fail(FP4_ERR_NULL_POINTER, "fp4: codes or scales buffer is NULL");
  FP4_TRY(checkFloatBuffer(y, "output y", true));
  if (cfg->format == FP4_FORMAT_NVFP4 && !(std::isfinite(globalScale) && globalScale > 0.0f))
    return fail(FP4_ERR_ARGUMENT, "fp4: NVFP4 global scale %g must be finite and positive",
                double(globalScale));
  Job job;
  job.cfg = *cfg;
  job.rows = rows, job.cols = cols, job.block = fp4_block_size(cfg->format);
  job.codesIn = codes, job.scalesIn = scales, job.y = y, job.globalScale = globalScale;
  const BackendOps& o = ops();
  forEachChunk(rows, cols, [&](int64_t, int64_t r0, int64_t r1) { o.dequantize(job, r0, r1); });
  return FP4_OK;
}

fp4_status fp4_fake_quantize(const fp4_config* cfg, const float* x, int64_t rows, int64_t cols,
                             float tensorAmax, float* y, fp4_error_stats* stats, float* blockSqErr,
                             float* blockAmax) {
  FP4_TRY(validateConfig(cfg));
  FP4_TRY(validateShape(cfg, rows, cols));
  if (stats) fp4_stats_clear(stats);
  if (rows * cols == 0) return FP4_OK;
  FP4_TRY(checkFloatBuffer(x, "input x", true));
  FP4_TRY(checkFloatBuffer(y, "output y", false));
  FP4_TRY(checkFloatBuffer(blockSqErr, "block_sq_err", false));
  FP4_TRY(checkFloatBuffer(blockAmax, "block_amax", false));
  Job job;
  job.cfg = *cfg;
  job.rows = rows, job.cols = cols, job.block = fp4_block_size(cfg->format);
  job.x = x, job.y = y, job.blockSqErr = blockSqErr, job.blockAmax = blockAmax;
  const BackendOps& o = ops();
  // A small NVFP4 tensor without statistics: the backend may measure the amax in its own pass.
  if (cfg->format == FP4_FORMAT_NVFP4 && tensorAmax < 0.0f && !stats && !blockSqErr && !blockAmax &&
      o.fakeQuantizeWhole && rows <= chunkRows(cols) && o.fakeQuantizeWhole(job))
    return FP4_OK;
  FP4_TRY(resolveGlobalScale(job, tensorAmax));
  // Statistics cost time: measure only when asked (a null partial tells the backend so).
  std::vector<fp4_error_stats> partial(
      stats ? size_t((rows + chunkRows(cols) - 1) / chunkRows(cols)) : 0);
  forEachChunk(rows, cols, [&](int64_t c, int64_t r0, int64_t r1) {
    if (!stats) return o.fakeQuantize(job, r0, r1, nullptr);
    fp4_stats_clear(&partial[size_t(c)]);
    o.fakeQuantize(job, r0, r1, &partial[size_t(c)]);
  });
  if (stats)
    for (const auto& p : partial) fp4_stats_merge(stats, &p);
  return FP4_OK;
}

fp4_status fp4_fake_quantize_typed(const fp4_config* cfg, const void* x, fp4_dtype xType,
                                   int64_t rows, int64_t cols, float tensorAmax, void* y,
                                   fp4_dtype yType, float* xAmax) {
  if (xAmax) *xAmax = 0.0f;
  FP4_TRY(validateConfig(cfg));
  FP4_TRY(validateShape(cfg, rows, cols));
  for (fp4_dtype t : {xType, yType})
    if (t != FP4_DTYPE_F32 && t != FP4_DTYPE_BF16)
      return fail(FP4_ERR_ARGUMENT, "fp4: unknown element type %d (FP4_DTYPE_F32 or _BF16)",
                  int(t));
  if (rows * cols == 0) return FP4_OK;
  const bool bf16In = xType == FP4_DTYPE_BF16, bf16Out = yType == FP4_DTYPE_BF16;
  if (!x) return fail(FP4_ERR_NULL_POINTER, "fp4: input x is NULL");
  if (bf16In ? reinterpret_cast<uintptr_t>(x) % 2 != 0 : misaligned(x))
    return fail(FP4_ERR_MISALIGNED, "fp4: input x (%p) is not aligned to its element type", x);
  if (y && (bf16Out ? reinterpret_cast<uintptr_t>(y) % 2 != 0 : misaligned(y)))
    return fail(FP4_ERR_MISALIGNED, "fp4: output y (%p) is not aligned to its element type", y);
  const uintptr_t xBegin = reinterpret_cast<uintptr_t>(x), yBegin = reinterpret_cast<uintptr_t>(y);
  const uintptr_t xEnd = xBegin + uintptr_t(rows * cols) * (bf16In ? 2 : 4);
  const uintptr_t yEnd = yBegin + uintptr_t(rows * cols) * (bf16Out ? 2 : 4);
  if (y && xType != yType && xBegin < yEnd && yBegin < xEnd)
    return fail(FP4_ERR_ARGUMENT,
                "fp4: y overlaps x but has another element type (write to a separate buffer)");
  Job job;
  job.cfg = *cfg;
  job.rows = rows, job.cols = cols, job.block = fp4_block_size(cfg->format);
  job.x = bf16In ? nullptr : static_cast<const float*>(x);
  job.xBf16 = bf16In ? static_cast<const uint16_t*>(x) : nullptr;
  job.y = bf16Out ? nullptr : static_cast<float*>(y);
  job.yBf16 = bf16Out ? static_cast<uint16_t*>(y) : nullptr;
  const BackendOps& o = ops();
  const int64_t chunks = (rows + chunkRows(cols) - 1) / chunkRows(cols);
  std::vector<float> partial(size_t(chunks), 0.0f);  // max |x| per chunk
  const auto largest = [&] { return *std::max_element(partial.begin(), partial.end()); };
  // NVFP4 measuring its own tensor amax: a first pass over x, which also gives x_amax.
  const bool measureFirst = cfg->format == FP4_FORMAT_NVFP4 && tensorAmax < 0.0f;
  if (o.fakeQuantizeTyped && flatBlocks(*cfg)) {
    if (measureFirst) {  // fp32: the plain max pass; BF16: the block maxima (y NULL)
      Job measure = job;
      measure.y = nullptr, measure.yBf16 = nullptr;
      forEachChunk(rows, cols, [&](int64_t c, int64_t r0, int64_t r1) {
        if (bf16In)
          o.fakeQuantizeTyped(measure, r0, r1, &partial[size_t(c)]);
        else
          partial[size_t(c)] = o.amax(measure, r0, r1, false);
      });
      tensorAmax = largest();
    }
    FP4_TRY(resolveGlobalScale(job, tensorAmax));
    if (y || (xAmax && !measureFirst))
      forEachChunk(rows, cols, [&](int64_t c, int64_t r0, int64_t r1) {
        o.fakeQuantizeTyped(job, r0, r1, xAmax && !measureFirst ? &partial[size_t(c)] : nullptr);
      });
  } else {
    // Each chunk widened to fp32 (unless it is fp32), measured, fake-quantized in place and
    // narrowed: per row (and 16-row tile) the kernels compute what they compute on the whole
    // tensor, and stochastic rounding is keyed by the element's index, which seed_offset keeps.
    const auto chunkJob = [&](int64_t r0, int64_t r1, std::vector<float>& wide) {
      Job part = job;
      part.rows = r1 - r0;
      part.cfg.seed_offset += uint64_t(r0 * cols);
      part.xBf16 = nullptr, part.yBf16 = nullptr;
      const int64_t n = part.rows * cols;
      if (bf16In || bf16Out) wide.resize(size_t(n));
      if (bf16In) {
        for (int64_t i = 0; i < n; ++i)
          wide[size_t(i)] = bitsToFloat(uint32_t(job.xBf16[r0 * cols + i]) << 16);
        part.x = wide.data();
      } else {
        part.x = job.x + r0 * cols;
      }
      part.y = !y ? nullptr : bf16Out ? wide.data() : job.y + r0 * cols;
      return part;
    };
    if (measureFirst) {
      std::vector<float> rotated(size_t(chunks), 0.0f);  // the tensor amax is after rotation
      forEachChunk(rows, cols, [&](int64_t c, int64_t r0, int64_t r1) {
        std::vector<float> wide;
        const Job part = chunkJob(r0, r1, wide);
        rotated[size_t(c)] = o.amax(part, 0, part.rows, cfg->hadamard != 0);
      });
      tensorAmax = *std::max_element(rotated.begin(), rotated.end());
    }
    FP4_TRY(resolveGlobalScale(job, tensorAmax));
    forEachChunk(rows, cols, [&](int64_t c, int64_t r0, int64_t r1) {
      std::vector<float> wide;
      Job part = chunkJob(r0, r1, wide);
      if (xAmax) partial[size_t(c)] = o.amax(part, 0, part.rows, false);
      if (!part.y) return;
      part.globalScale = job.globalScale;
      o.fakeQuantize(part, 0, part.rows, nullptr);
      if (!bf16Out) return;
      uint16_t* out = job.yBf16 + r0 * cols;
      for (int64_t i = 0, n = part.rows * cols; i < n; ++i) out[i] = bf16Bits(wide[size_t(i)]);
    });
  }
  if (xAmax) *xAmax = largest();
  return FP4_OK;
}

fp4_status fp4_hadamard16(const float* x, int64_t rows, int64_t cols, int inverse, float* y) {
  if (rows < 0 || cols < 0 || cols % kHadamardSize != 0)
    return fail(FP4_ERR_SHAPE,
                "fp4: Hadamard transform of %lld x %lld: the last dimension must be a "
                "multiple of 16",
                (long long)rows, (long long)cols);
  if (rows * cols == 0) return FP4_OK;
  FP4_TRY(checkFloatBuffer(x, "input x", true));
  FP4_TRY(checkFloatBuffer(y, "output y", true));
  const BackendOps& o = ops();
  forEachChunk(rows, cols, [&](int64_t, int64_t r0, int64_t r1) {
    o.hadamard(x + r0 * cols, y + r0 * cols, (r1 - r0) * cols, inverse != 0);
  });
  return FP4_OK;
}

void fp4_stats_clear(fp4_error_stats* s) {
  std::memset(s, 0, sizeof *s);
}

void fp4_stats_merge(fp4_error_stats* into, const fp4_error_stats* from) {
  into->count += from->count;
  into->clipped += from->clipped;
  into->flushed += from->flushed;
  into->nonfinite += from->nonfinite;
  into->sum_x2 += from->sum_x2;
  into->sum_err2 += from->sum_err2;
  into->sum_xq += from->sum_xq;
  into->sum_q2 += from->sum_q2;
  into->max_abs_err = std::max(into->max_abs_err, from->max_abs_err);
}

double fp4_stats_mse(const fp4_error_stats* s) {
  return s->count ? s->sum_err2 / double(s->count) : NAN;
}
double fp4_stats_rel_l2(const fp4_error_stats* s) {
  return s->sum_x2 > 0 ? std::sqrt(s->sum_err2 / s->sum_x2) : NAN;
}
double fp4_stats_sqnr_db(const fp4_error_stats* s) {
  if (!(s->sum_x2 > 0)) return NAN;
  if (s->sum_err2 == 0) return INFINITY;
  return 10.0 * std::log10(s->sum_x2 / s->sum_err2);
}
double fp4_stats_cosine(const fp4_error_stats* s) {
  double d = std::sqrt(s->sum_x2) * std::sqrt(s->sum_q2);
  return d > 0 ? s->sum_xq / d : NAN;
}
double fp4_stats_clip_fraction(const fp4_error_stats* s) {
  return s->count ? double(s->clipped) / double(s->count) : NAN;
}
double fp4_stats_zero_fraction(const fp4_error_stats* s) {
  return s->count ? double(s->flushed) / double(s->count) : NAN;
}

fp4_status fp4_set_backend(fp4_backend backend) {
  if (backend == FP4_BACKEND_AUTO) backend = bestBackend();
  if (!opsFor(backend))
    return fail(FP4_ERR_UNAVAILABLE, "fp4: backend %s is not available on this CPU or build",
                fp4_backend_name(backend));
  g_backend.store(int(backend));
  return FP4_OK;
}

fp4_backend fp4_get_backend(void) {
  return currentBackend();
}
int fp4_backend_available(fp4_backend backend) {
  return backend == FP4_BACKEND_AUTO || opsFor(backend) != nullptr;
}

const char* fp4_backend_name(fp4_backend backend) {
  switch (backend) {
    case FP4_BACKEND_AUTO:
      return "auto";
    case FP4_BACKEND_REFERENCE:
      return "reference";
    case FP4_BACKEND_GENERIC:
      return "generic";
    case FP4_BACKEND_AVX2:
      return "avx2";
    case FP4_BACKEND_AVX512:
      return "avx512";
  }
  return "unknown";
}

void fp4_set_num_threads(int threads) {
  g_threads.store(threads < 0 ? 0 : threads);
}
int fp4_get_num_threads(void) {
  return threadCount();
}

const char* fp4_status_string(fp4_status status) {
  switch (status) {
    case FP4_OK:
      return "ok";
    case FP4_ERR_NULL_POINTER:
      return "null pointer";
    case FP4_ERR_MISALIGNED:
      return "misaligned buffer";
    case FP4_ERR_SHAPE:
      return "bad shape";
    case FP4_ERR_ARGUMENT:
      return "bad argument";
    case FP4_ERR_UNAVAILABLE:
      return "backend unavailable";
    case FP4_ERR_CUDA:
      return "CUDA error";
  }
  return "unknown status";
}

const char* fp4_last_error(void) {
  return t_lastError.c_str();
}

}  // extern "C"
