// The scalar reference: fp4-numerics written as code, one element at a time, never optimized.
// It shares no rounding code with the fast paths (it searches the value grids directly), so
// agreeing with it checks the bit tricks in formats.h as well as the vector kernels.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend.h"

namespace fp4lab::kernels {
namespace {

// Nearest E2M1 magnitude to a >= 0; a tie goes to the even index; beyond 6 saturates.
uint8_t e2m1EncodeReference(float v) {
  float a = std::fabs(v);
  // Saturate first: for huge a the fp32 distances to 4 and 6 round equal and would tie.
  if (a >= kE2M1Max) return static_cast<uint8_t>((std::signbit(v) ? 8 : 0) | 7);
  int best = 0;
  for (int idx = 1; idx < 8; ++idx) {
    float dBest = std::fabs(a - e2m1Magnitude(best));
    float d = std::fabs(a - e2m1Magnitude(idx));
    if (d < dBest || (d == dBest && idx % 2 == 0)) best = idx;
  }
  return static_cast<uint8_t>((std::signbit(v) ? 8 : 0) | best);
}

uint8_t e2m1EncodeStochasticReference(float v, float uniform) {
  float a = std::fabs(v);
  int lower = 0;
  for (int idx = 0; idx < 8; ++idx)
    if (e2m1Magnitude(idx) <= a) lower = idx;
  int chosen = lower;
  if (lower < 7) {
    float lo = e2m1Magnitude(lower), hi = e2m1Magnitude(lower + 1);
    float p = (a - lo) / (hi - lo);
    if (uniform < p) chosen = lower + 1;
  }
  return static_cast<uint8_t>((std::signbit(v) ? 8 : 0) | chosen);
}

// Nearest non-negative E4M3 value to v >= 0 by search; ties to the even code; saturates at 448.
uint8_t e4m3EncodeReference(float v) {
  if (std::isnan(v)) return kE4M3NaN;
  if (v >= kE4M3Max) return kE4M3MaxCode;
  int best = 0;
  for (int code = 1; code <= kE4M3MaxCode; ++code) {
    double dBest = std::fabs(double(v) - double(e4m3Decode(uint8_t(best))));
    double d = std::fabs(double(v) - double(e4m3Decode(uint8_t(code))));
    if (d < dBest || (d == dBest && code % 2 == 0)) best = code;
  }
  return uint8_t(best);
}

// MXFP4 shared exponent by its definition, in exact double arithmetic.
int mxExponentReference(float amax, fp4_scale_rule rule) {
  if (amax == 0.0f) return -127;
  int e;
  if (rule == FP4_SCALE_RULE_CEIL) {
    e = -300;  // smallest e with amax <= 6 * 2^e
    while (double(amax) > 6.0 * std::ldexp(1.0, e)) ++e;
  } else {
    int k = -300;  // floor(log2(amax)) = largest k with 2^k <= amax
    while (std::ldexp(1.0, k + 1) <= double(amax)) ++k;
    e = k - 2;
  }
  return e < -127 ? -127 : (e > 127 ? 127 : e);
}

float roundElement(const Job& job, float scaled, int64_t r, int64_t c) {
  if (job.cfg.rounding == FP4_ROUNDING_STOCHASTIC) {
    uint64_t index = uint64_t(r) * uint64_t(job.cols) + uint64_t(c) + job.cfg.seed_offset;
    return e2m1EncodeStochasticReference(scaled, stochasticUniform(job.cfg.seed, index));
  }
  return e2m1EncodeReference(scaled);
}

// y = (H/4) diag(d) x, each output summed in order j = 0..15 (the order every backend uses).
void hadamardTile(const float* x, float* y, bool inverse) {
  float out[16];
  for (int i = 0; i < 16; ++i) {
    float acc = 0.0f;
    for (int j = 0; j < 16; ++j) {
      // inverse: x = diag(d) (H/4) y, so the sign applies to the output instead.
      float term =
          inverse ? hadamardEntry(i, j) * x[j] : hadamardEntry(i, j) * hadamardSign(j) * x[j];
      acc += term;
    }
    out[i] = inverse ? acc * 0.25f * hadamardSign(i) : acc * 0.25f;
  }
  for (int i = 0; i < 16; ++i) y[i] = out[i];
}

void hadamard(const float* x, float* y, int64_t count, bool inverse) {
  for (int64_t t = 0; t < count; t += 16) hadamardTile(x + t, y + t, inverse);
}

// Row r of the input as the quantizer sees it (rotated when asked).
std::vector<float> inputRow(const Job& job, int64_t r) {
  std::vector<float> row(job.x + r * job.cols, job.x + (r + 1) * job.cols);
  if (job.cfg.hadamard) hadamard(row.data(), row.data(), job.cols, false);
  return row;
}

bool blockIsFinite(const float* v, int n) {
  for (int i = 0; i < n; ++i)
    if (!std::isfinite(v[i])) return false;
  return true;
}

float blockAmaxOf(const float* v, int n) {
  float m = 0.0f;
  for (int i = 0; i < n; ++i) m = std::fmax(m, std::fabs(v[i]));
  return m;
}

// Scale byte and the fp32 value each element is divided by, for block b of row r.
struct BlockScale {
  uint8_t byte;
  float divisor;  // 2^e (MXFP4) or float(E4M3) * s2 (NVFP4); 0 => the block decodes to zero
  bool finite;
  float amax;
};

// Rows [row0, row1) as the quantizer sees them (rotated when asked).
struct Rows {
  int64_t row0;
  std::vector<std::vector<float>> data;
  const std::vector<float>& operator[](int64_t r) const { return data[r - row0]; }
};

Rows rowsFor(const Job& job, int64_t row0, int64_t row1) {
  Rows rows{row0, {}};
  for (int64_t r = row0; r < row1; ++r) rows.data.push_back(inputRow(job, r));
  return rows;
}

BlockScale blockScale(const Job& job, const Rows& rows, int64_t rowIndex, int64_t block) {
  const std::vector<float>& row = rows[rowIndex];
  const float* v = row.data() + block * job.block;
  BlockScale s{};
  if (job.cfg.format == FP4_FORMAT_MXFP4) {
    s.finite = blockIsFinite(v, job.block);
    s.amax = s.finite ? blockAmaxOf(v, job.block) : NAN;
    if (!s.finite) return {kE8M0NaN, NAN, false, NAN};
    int e = mxExponentReference(s.amax, job.cfg.scale_rule);
    s.byte = uint8_t(e + kE8M0Bias);
    s.divisor = float(std::ldexp(1.0, e));
    return s;
  }
  // NVFP4: amax over the 1x16 block, or over the 16x16 tile holding it.
  int64_t tileRow0 = rowIndex, tileRow1 = rowIndex + 1;
  if (job.cfg.nvfp4_2d_blocks) {
    tileRow0 = rowIndex - rowIndex % 16;
    tileRow1 = std::min<int64_t>(tileRow0 + 16, job.rows);
  }
  s.finite = true;
  s.amax = 0.0f;
  for (int64_t rr = tileRow0; rr < tileRow1; ++rr) {
    const float* t = rows[rr].data() + block * job.block;
    if (!blockIsFinite(t, job.block)) s.finite = false;
    s.amax = std::fmax(s.amax, blockAmaxOf(t, job.block));
  }
  if (!s.finite) return {kE4M3NaN, NAN, false, NAN};
  float s2 = job.globalScale;
  s.byte = e4m3EncodeReference(s.amax / (6.0f * s2));
  s.divisor = e4m3Decode(s.byte) * s2;
  return s;
}

void quantize(const Job& job, int64_t row0, int64_t row1) {
  auto rows = rowsFor(job, row0, row1);
  int64_t blocksPerRow = job.cols / job.block;
  for (int64_t r = row0; r < row1; ++r) {
    for (int64_t b = 0; b < blocksPerRow; ++b) {
      BlockScale s = blockScale(job, rows, r, b);
      job.scales[r * blocksPerRow + b] = s.byte;
      for (int i = 0; i < job.block; ++i) {
        int64_t c = b * job.block + i;
        uint8_t code = 0;
        if (s.finite && s.divisor != 0.0f) code = roundElement(job, rows[r][c] / s.divisor, r, c);
        int64_t flat = r * job.cols + c;
        uint8_t& byte = job.codes[flat / 2];
        byte = (flat % 2 == 0) ? uint8_t((byte & 0xF0) | code) : uint8_t((byte & 0x0F) | code << 4);
      }
    }
  }
}

float decodeScale(const Job& job, uint8_t byte) {
  if (job.cfg.format == FP4_FORMAT_MXFP4) return e8m0Decode(byte);
  return e4m3Decode(byte) * job.globalScale;
}

void dequantize(const Job& job, int64_t row0, int64_t row1) {
  int64_t blocksPerRow = job.cols / job.block;
  for (int64_t r = row0; r < row1; ++r) {
    for (int64_t c = 0; c < job.cols; ++c) {
      int64_t flat = r * job.cols + c;
      uint8_t byte = job.codesIn[flat / 2];
      uint8_t code = (flat % 2 == 0) ? (byte & 0x0F) : (byte >> 4);
      float scale = decodeScale(job, job.scalesIn[r * blocksPerRow + c / job.block]);
      job.y[flat] = e2m1Decode(code) * scale;
    }
  }
}

void fakeQuantize(const Job& job, int64_t row0, int64_t row1, fp4_error_stats* wanted) {
  fp4_error_stats unused;
  fp4_error_stats* stats = wanted ? wanted : &unused;
  auto rows = rowsFor(job, row0, row1);
  int64_t blocksPerRow = job.cols / job.block;
  for (int64_t r = row0; r < row1; ++r) {
    for (int64_t b = 0; b < blocksPerRow; ++b) {
      BlockScale s = blockScale(job, rows, r, b);
      double blockErr = 0.0;
      for (int i = 0; i < job.block; ++i) {
        int64_t c = b * job.block + i;
        float x = rows[r][c];
        uint8_t code = 0;
        if (s.finite && s.divisor != 0.0f) code = roundElement(job, x / s.divisor, r, c);
        float scale = decodeScale(job, s.byte);
        float q = e2m1Decode(code) * scale;
        if (job.y) job.y[r * job.cols + c] = q;
        if (!s.finite) {
          if (!std::isfinite(x)) stats->nonfinite++;
          continue;
        }
        double err = double(x) - double(q);
        stats->count++;
        stats->sum_x2 += double(x) * x;
        stats->sum_err2 += err * err;
        stats->sum_xq += double(x) * q;
        stats->sum_q2 += double(q) * q;
        stats->max_abs_err = std::fmax(stats->max_abs_err, std::fabs(err));
        if (scale > 0.0f && std::fabs(x) > 6.0f * scale) stats->clipped++;
        if (x != 0.0f && q == 0.0f) stats->flushed++;
        blockErr += err * err;
      }
      int64_t bi = r * blocksPerRow + b;
      if (job.blockSqErr) job.blockSqErr[bi] = s.finite ? float(blockErr) : NAN;
      if (job.blockAmax) job.blockAmax[bi] = s.amax;
    }
  }
}

float amax(const Job& job, int64_t row0, int64_t row1, bool rotate) {
  float m = 0.0f;
  for (int64_t r = row0; r < row1; ++r) {
    std::vector<float> row(job.x + r * job.cols, job.x + (r + 1) * job.cols);
    if (rotate) hadamard(row.data(), row.data(), job.cols, false);
    for (float v : row)
      if (std::isfinite(v)) m = std::fmax(m, std::fabs(v));
  }
  return m;
}

}  // namespace

const BackendOps& referenceBackend() {
  static const BackendOps ops{"reference", quantize, dequantize, fakeQuantize,
                              amax,        hadamard, nullptr,    nullptr};
  return ops;
}

}  // namespace fp4lab::kernels
