// Differential fuzzer for the FP4 kernels: every optimized CPU backend against the scalar
// reference, bit for bit, on configurations, shapes, tensor amaxes and float bit patterns the
// fuzzer picks (NaN payloads, infinities, subnormals, huge and tiny block scales). Built with
// -fsanitize=fuzzer plus ASan/UBSan (preset `fuzz`); run by tests/fuzz/run-fuzzers.sh.
//
// Input: 16 header bytes, then raw floats for the start of the tensor; the rest of the tensor is
// filled from a generator seeded by the header, with per-block exponents spread as it says.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "fp4lab/kernels/fp4.h"

namespace {

struct Outputs {
  fp4_status quantizeStatus, fakeStatus, statsStatus;
  std::vector<uint8_t> codes, scales;
  float globalScale = 0.0f;
  std::vector<float> fake, fakeWithStats, blockAmax, dequantized;
  fp4_error_stats stats{};
};

Outputs runAll(const fp4_config& cfg, const std::vector<float>& x, int64_t rows, int64_t cols,
               float amax) {
  Outputs o;
  const auto blocks = size_t(fp4_scale_count(cfg.format, rows, cols));
  o.codes.assign(size_t(fp4_packed_bytes(rows, cols)), 0xAA);
  o.scales.assign(blocks, 0xAA);
  o.quantizeStatus = fp4_quantize(&cfg, x.data(), rows, cols, amax, o.codes.data(), o.scales.data(),
                                  &o.globalScale);
  o.dequantized.assign(x.size(), -7.0f);
  if (o.quantizeStatus == FP4_OK)
    fp4_dequantize(&cfg, o.codes.data(), o.scales.data(), o.globalScale, rows, cols,
                   o.dequantized.data());
  o.fake.assign(x.size(), -7.0f);
  o.fakeStatus =
      fp4_fake_quantize(&cfg, x.data(), rows, cols, amax, o.fake.data(), nullptr, nullptr, nullptr);
  o.fakeWithStats.assign(x.size(), -7.0f);
  o.blockAmax.assign(blocks, -7.0f);
  std::vector<float> blockSqErr(blocks);
  o.statsStatus = fp4_fake_quantize(&cfg, x.data(), rows, cols, amax, o.fakeWithStats.data(),
                                    &o.stats, blockSqErr.data(), o.blockAmax.data());
  return o;
}

bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

[[noreturn]] void mismatch(const char* what, fp4_backend backend, const fp4_config& c, int64_t rows,
                           int64_t cols, float amax) {
  std::fprintf(stderr,
               "fuzz_kernels: %s, backend %s (format %d, scale "
               "rule %d, 2-D %d, Hadamard %d, rounding %d, %lld x %lld, tensor amax %g)\n",
               what, fp4_backend_name(backend), int(c.format), int(c.scale_rule), c.nvfp4_2d_blocks,
               c.hadamard, int(c.rounding), (long long)rows, (long long)cols, double(amax));
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 16) return 0;
  fp4_config cfg = fp4_default_config(data[0] & 1 ? FP4_FORMAT_NVFP4 : FP4_FORMAT_MXFP4);
  cfg.scale_rule = (data[0] >> 1) & 1 ? FP4_SCALE_RULE_FLOOR : FP4_SCALE_RULE_CEIL;
  if (cfg.format == FP4_FORMAT_NVFP4) cfg.nvfp4_2d_blocks = (data[0] >> 2) & 1;
  cfg.hadamard = (data[0] >> 3) & 1;
  cfg.rounding = (data[0] >> 4) & 1 ? FP4_ROUNDING_STOCHASTIC : FP4_ROUNDING_NEAREST_EVEN;
  cfg.seed = data[5];
  cfg.seed_offset = data[6];
  const int block = fp4_block_size(cfg.format);
  int64_t rows = 1 + data[1] % 40;
  if (cfg.nvfp4_2d_blocks && (data[0] >> 7)) rows = 16 * (1 + data[1] % 3);  // whole tiles
  const int64_t cols = block * (1 + data[2] % 24);
  fp4_set_num_threads(1 + (data[3] & 1));

  std::vector<float> x(size_t(rows * cols));
  const size_t given = (size - 16) / sizeof(float);
  uint32_t state = uint32_t(data[4]) | uint32_t(data[7]) << 8 | uint32_t(data[8]) << 16;
  const int spread = data[9] % 64;  // per-block exponents in [-spread/2, spread/2)
  for (size_t i = 0; i < x.size(); ++i) {
    if (i < given) {
      std::memcpy(&x[i], data + 16 + sizeof(float) * i, sizeof(float));
      continue;
    }
    state = state * 1664525u + 1013904223u;
    const float u = float(int32_t(state)) / 2147483648.0f;
    const int e =
        spread ? int(uint32_t(i / size_t(block)) * 2654435761u % uint32_t(spread)) - spread / 2 : 0;
    x[i] = std::ldexp(3.0f * u, e);
  }
  // Tensor amax: measured per call, exact, scaled (clipping or headroom), or any finite float.
  const float measured = fp4_tensor_amax(x.data(), int64_t(x.size()));
  float amax = -1.0f;
  switch ((data[3] >> 1) % 4) {
    case 1:
      amax = measured;
      break;
    case 2:
      amax = measured * (float(data[10]) / 64.0f);
      break;
    case 3:
      std::memcpy(&amax, data + 11, sizeof amax);
      if (!(amax >= 0.0f) || std::isinf(amax)) amax = -1.0f;
      break;
    default:
      break;
  }

  fp4_set_backend(FP4_BACKEND_REFERENCE);
  const Outputs ref = runAll(cfg, x, rows, cols, amax);
  // The invariant QAT relies on: fake quantization is dequantize(quantize(x)), bit for bit.
  if (ref.quantizeStatus == FP4_OK && !sameBits(ref.fake, ref.dequantized))
    mismatch("fake quantization differs from dequantize(quantize(x))", FP4_BACKEND_REFERENCE, cfg,
             rows, cols, amax);
  for (fp4_backend b : {FP4_BACKEND_GENERIC, FP4_BACKEND_AVX2, FP4_BACKEND_AVX512}) {
    if (!fp4_backend_available(b)) continue;
    fp4_set_backend(b);
    const Outputs got = runAll(cfg, x, rows, cols, amax);
    if (got.quantizeStatus != ref.quantizeStatus || got.fakeStatus != ref.fakeStatus ||
        got.statsStatus != ref.statsStatus)
      mismatch("the status differs from the reference", b, cfg, rows, cols, amax);
    if (ref.quantizeStatus != FP4_OK) continue;
    if (got.codes != ref.codes)
      mismatch("codes differ from the reference", b, cfg, rows, cols, amax);
    if (got.scales != ref.scales)
      mismatch("scales differ from the reference", b, cfg, rows, cols, amax);
    if (std::memcmp(&got.globalScale, &ref.globalScale, sizeof(float)) != 0)
      mismatch("the global scale differs from the reference", b, cfg, rows, cols, amax);
    if (!sameBits(got.fake, ref.fake))
      mismatch("fake quantization differs from the reference", b, cfg, rows, cols, amax);
    if (!sameBits(got.dequantized, ref.dequantized))
      mismatch("dequantization differs from the reference", b, cfg, rows, cols, amax);
    if (!sameBits(got.fakeWithStats, ref.fakeWithStats))
      mismatch("fake quantization with statistics differs from the reference", b, cfg, rows, cols,
               amax);
    if (!sameBits(got.blockAmax, ref.blockAmax))
      mismatch("block amaxes differ from the reference", b, cfg, rows, cols, amax);
    if (got.stats.count != ref.stats.count || got.stats.clipped != ref.stats.clipped ||
        got.stats.flushed != ref.stats.flushed || got.stats.nonfinite != ref.stats.nonfinite)
      mismatch("statistics counts differ from the reference", b, cfg, rows, cols, amax);
  }
  fp4_set_backend(FP4_BACKEND_AUTO);
  return 0;
}
