// Shared by the kernel tests: random data generators of several distributions and a runner that
// captures every output of the FP4 API on the currently selected backend.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "fp4lab/kernels/fp4.h"

namespace fp4test {

enum class Distribution { Normal, HeavyTailed, BlockScaled, Outliers, Sparse, Denormal };

inline const char* name(Distribution d) {
  switch (d) {
    case Distribution::Normal:
      return "normal";
    case Distribution::HeavyTailed:
      return "heavy-tailed";
    case Distribution::BlockScaled:
      return "block-scaled 1e-30..1e30";
    case Distribution::Outliers:
      return "outliers";
    case Distribution::Sparse:
      return "sparse";
    case Distribution::Denormal:
      return "denormal";
  }
  return "?";
}

inline std::vector<float> makeData(Distribution d, int64_t rows, int64_t cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::student_t_distribution<float> student(1.5f);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::vector<float> x(size_t(rows * cols));
  float blockScale = 1.0f;
  for (int64_t i = 0; i < rows * cols; ++i) {
    switch (d) {
      case Distribution::Normal:
        x[size_t(i)] = normal(rng);
        break;
      case Distribution::HeavyTailed:
        x[size_t(i)] = student(rng);
        break;
      case Distribution::BlockScaled:
        // A new magnitude every 16 elements, log-uniform over 1e-30..1e30.
        if (i % 16 == 0) blockScale = std::pow(10.0f, -30.0f + 60.0f * uniform(rng));
        x[size_t(i)] = normal(rng) * blockScale;
        break;
      case Distribution::Outliers:
        x[size_t(i)] = normal(rng) * (uniform(rng) < 0.01f ? 1000.0f : 0.01f);
        break;
      case Distribution::Sparse:
        x[size_t(i)] = uniform(rng) < 0.7f ? 0.0f : normal(rng);
        break;
      case Distribution::Denormal:
        x[size_t(i)] = normal(rng) * 1e-39f;
        break;
    }
  }
  return x;
}

struct Outputs {
  fp4_status quantizeStatus = FP4_OK, fakeStatus = FP4_OK, dequantStatus = FP4_OK;
  std::vector<uint8_t> codes, scales;
  float globalScale = 0;
  std::vector<float> fake, dequant, blockSqErr, blockAmax;
  fp4_error_stats stats{};
};

// Runs quantize, dequantize and fake-quantize (with every optional output) on the active backend.
inline Outputs runAll(const fp4_config& cfg, const std::vector<float>& x, int64_t rows,
                      int64_t cols, float tensorAmax = -1.0f) {
  Outputs o;
  int64_t nScales = fp4_scale_count(cfg.format, rows, cols);
  o.codes.assign(size_t(fp4_packed_bytes(rows, cols)), 0xAA);
  o.scales.assign(size_t(nScales), 0xAA);
  o.fake.assign(x.size(), -7.0f);
  o.dequant.assign(x.size(), -7.0f);
  o.blockSqErr.assign(size_t(nScales), -7.0f);
  o.blockAmax.assign(size_t(nScales), -7.0f);
  o.quantizeStatus = fp4_quantize(&cfg, x.data(), rows, cols, tensorAmax, o.codes.data(),
                                  o.scales.data(), &o.globalScale);
  o.dequantStatus = fp4_dequantize(&cfg, o.codes.data(), o.scales.data(), o.globalScale, rows, cols,
                                   o.dequant.data());
  o.fakeStatus = fp4_fake_quantize(&cfg, x.data(), rows, cols, tensorAmax, o.fake.data(), &o.stats,
                                   o.blockSqErr.data(), o.blockAmax.data());
  return o;
}

inline bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Index of the first differing float (by bits), or -1.
inline int64_t firstDifference(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    if (std::memcmp(&a[i], &b[i], 4) != 0) return int64_t(i);
  return a.size() == b.size() ? -1 : int64_t(std::min(a.size(), b.size()));
}

inline bool close(double a, double b, double rel) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::fabs(a - b) <= rel * std::max({std::fabs(a), std::fabs(b), 1e-300});
}

// Whether the tests may run on `backend`: fp4_backend_available(), less the backends named in
// FP4LAB_TEST_MASK_ISA (comma-separated, e.g. "avx512" or "avx2,avx512"). The mask lets a CPU
// that has an instruction set exercise the path taken on one that lacks it (a skipped test).
inline bool backendUsable(fp4_backend backend) {
  if (!fp4_backend_available(backend)) return false;
  const char* mask = std::getenv("FP4LAB_TEST_MASK_ISA");
  if (!mask) return true;
  const std::string list = std::string(",") + mask + ",";
  return list.find(std::string(",") + fp4_backend_name(backend) + ",") == std::string::npos;
}

struct BackendScope {
  fp4_backend previous;
  explicit BackendScope(fp4_backend b) : previous(fp4_get_backend()) { fp4_set_backend(b); }
  ~BackendScope() { fp4_set_backend(previous); }
};

}  // namespace fp4test
