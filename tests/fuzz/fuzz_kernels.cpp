// Differential fuzzer for the FP4 kernels: every optimized CPU backend against the scalar
// reference, bit for bit (and fake quantization from and to BF16 against the reference's fp32
// result, rounded), on configurations, shapes, tensor amaxes and float bit patterns the
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

#include "../kernels/kernel_fixtures.h"
#include "fp4lab/kernels/fp4.h"

namespace {

using fp4test::sameBits;

// Everything fp4test::runAll captures (quantize, dequantize, fake quantization with every
// statistic), plus fake quantization without statistics: the path QAT runs, with its own kernels.
struct Run {
  fp4test::Outputs all;
  fp4_status plainStatus;
  std::vector<float> plain;
};

Run runBoth(const fp4_config& cfg, const std::vector<float>& x, int64_t rows, int64_t cols,
            float amax) {
  Run r{fp4test::runAll(cfg, x, rows, cols, amax), FP4_OK, std::vector<float>(x.size(), -7.0f)};
  r.plainStatus = fp4_fake_quantize(&cfg, x.data(), rows, cols, amax, r.plain.data(), nullptr,
                                    nullptr, nullptr);
  return r;
}

// fp32 to BF16 bits as c10::BFloat16: to nearest even, NaN to 0x7FC0.
uint16_t bf16(float f) {
  if (std::isnan(f)) return 0x7FC0;
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return uint16_t((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
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

  const Run ref = [&] {
    fp4test::BackendScope scope(FP4_BACKEND_REFERENCE);
    return runBoth(cfg, x, rows, cols, amax);
  }();
  const fp4test::Outputs& r = ref.all;
  // The invariant QAT relies on: fake quantization is dequantize(quantize(x)), bit for bit.
  if (r.quantizeStatus == FP4_OK && !sameBits(r.fake, r.dequant))
    mismatch("fake quantization differs from dequantize(quantize(x))", FP4_BACKEND_REFERENCE, cfg,
             rows, cols, amax);
  // BF16 at either end (fp4_fake_quantize_typed): the upper halves of x as BF16 inputs (any bit
  // pattern: NaN payloads, subnormals), and x itself as an fp32 input with a BF16 output; the
  // reference's fp32 results rounded by this file (nearest even, NaN to 0x7FC0: c10::BFloat16).
  std::vector<uint16_t> x16(x.size());
  std::vector<float> wide(x.size()), refWide(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &x[i], sizeof bits);
    x16[i] = uint16_t(bits >> 16);
    bits = uint32_t(x16[i]) << 16;
    std::memcpy(&wide[i], &bits, sizeof bits);
  }
  fp4_status refWideStatus;
  {
    fp4test::BackendScope scope(FP4_BACKEND_REFERENCE);
    refWideStatus = fp4_fake_quantize(&cfg, wide.data(), rows, cols, amax, refWide.data(), nullptr,
                                      nullptr, nullptr);
  }
  const float refWideAmax = fp4_tensor_amax(wide.data(), int64_t(wide.size()));
  std::vector<uint16_t> want16(x.size()), wantFromF32(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    want16[i] = bf16(refWide[i]);
    wantFromF32[i] = bf16(ref.plain[i]);
  }
  for (fp4_backend b :
       {FP4_BACKEND_REFERENCE, FP4_BACKEND_GENERIC, FP4_BACKEND_AVX2, FP4_BACKEND_AVX512}) {
    if (!fp4_backend_available(b)) continue;
    fp4test::BackendScope scope(b);
    std::vector<uint16_t> got16(x.size(), 0xFFFF);
    float gotAmax = -1;
    if (fp4_fake_quantize_typed(&cfg, x16.data(), FP4_DTYPE_BF16, rows, cols, amax, got16.data(),
                                FP4_DTYPE_BF16, &gotAmax) != refWideStatus)
      mismatch("BF16 -> BF16: the status differs from fp32 fake quantization's", b, cfg, rows, cols,
               amax);
    if (refWideStatus == FP4_OK &&
        (got16 != want16 || std::memcmp(&gotAmax, &refWideAmax, sizeof gotAmax) != 0))
      mismatch("BF16 -> BF16 differs from fp32 fake quantization, rounded", b, cfg, rows, cols,
               amax);
    if (fp4_fake_quantize_typed(&cfg, x.data(), FP4_DTYPE_F32, rows, cols, amax, got16.data(),
                                FP4_DTYPE_BF16, nullptr) != ref.plainStatus)
      mismatch("fp32 -> BF16: the status differs from fp32 fake quantization's", b, cfg, rows, cols,
               amax);
    if (ref.plainStatus == FP4_OK && got16 != wantFromF32)
      mismatch("fp32 -> BF16 differs from fp32 fake quantization, rounded", b, cfg, rows, cols,
               amax);
  }

  for (fp4_backend b : {FP4_BACKEND_GENERIC, FP4_BACKEND_AVX2, FP4_BACKEND_AVX512}) {
    if (!fp4_backend_available(b)) continue;
    fp4test::BackendScope scope(b);
    const Run got = runBoth(cfg, x, rows, cols, amax);
    const fp4test::Outputs& g = got.all;
    if (g.quantizeStatus != r.quantizeStatus || g.fakeStatus != r.fakeStatus ||
        g.dequantStatus != r.dequantStatus || got.plainStatus != ref.plainStatus)
      mismatch("the status differs from the reference", b, cfg, rows, cols, amax);
    if (r.quantizeStatus != FP4_OK) continue;
    if (g.codes != r.codes) mismatch("codes differ from the reference", b, cfg, rows, cols, amax);
    if (g.scales != r.scales)
      mismatch("scales differ from the reference", b, cfg, rows, cols, amax);
    if (std::memcmp(&g.globalScale, &r.globalScale, sizeof(float)) != 0)
      mismatch("the global scale differs from the reference", b, cfg, rows, cols, amax);
    if (!sameBits(got.plain, ref.plain))
      mismatch("fake quantization differs from the reference", b, cfg, rows, cols, amax);
    if (!sameBits(g.dequant, r.dequant))
      mismatch("dequantization differs from the reference", b, cfg, rows, cols, amax);
    if (!sameBits(g.fake, r.fake))
      mismatch("fake quantization with statistics differs from the reference", b, cfg, rows, cols,
               amax);
    if (!sameBits(g.blockAmax, r.blockAmax))
      mismatch("block amaxes differ from the reference", b, cfg, rows, cols, amax);
    if (g.stats.count != r.stats.count || g.stats.clipped != r.stats.clipped ||
        g.stats.flushed != r.stats.flushed || g.stats.nonfinite != r.stats.nonfinite)
      mismatch("statistics counts differ from the reference", b, cfg, rows, cols, amax);
  }
  return 0;
}
