// Every optimized CPU backend against the scalar reference, bit for bit, on fresh random data of
// several distributions and magnitudes, at odd shapes: >10 M values per format by default.
//
// Each comparison is registered once per optimized backend (BACKEND_TEST_CASE): "... (generic)"
// runs by default; "... (avx2)" and "... (avx512)" are hidden ([.avx2], [.avx512]) and run as
// their own CTest entries, kernels_avx2 and kernels_avx512 (test_kernels "[avx512]"). On a CPU
// without the instruction set such a run exits with 77 before any test starts, which CTest
// reports as skipped (SKIP_RETURN_CODE 77), instead of passing without having compared anything.
// FP4LAB_TEST_MASK_ISA=avx512 (kernel_fixtures.h) takes that path on a CPU that has AVX-512.
#define CATCH_CONFIG_EXTERNAL_INTERFACES  // Catch::TestEventListenerBase, for IsaSkipListener
#include <catch2/catch.hpp>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "kernel_fixtures.h"

using namespace fp4test;

namespace {

struct Shape {
  int64_t rows, cols;
};

// The optimized backend the running BACKEND_TEST_CASE compares with the reference.
fp4_backend g_backendUnderTest = FP4_BACKEND_GENERIC;

std::vector<fp4_backend> optimizedBackends() {
  return {g_backendUnderTest};
}

// The tag of a backend's BACKEND_TEST_CASEs: [generic], [avx2], [avx512].
const char* backendTag(fp4_backend b) {
  return b == FP4_BACKEND_AVX2 ? "avx2" : (b == FP4_BACKEND_AVX512 ? "avx512" : "generic");
}

// Runs one BACKEND_TEST_CASE body on `backend`. A run that selects only cases of missing
// instruction sets never gets here (IsaSkipListener); one that mixes them with runnable cases
// fails these, as they cannot be reported as skipped next to the others.
void runOnBackend(fp4_backend backend, void (*body)()) {
  if (!backendUsable(backend)) {
    const std::string tag = std::string("[") + backendTag(backend) + "]";
    FAIL("this CPU (or FP4LAB_TEST_MASK_ISA) lacks " << fp4_backend_name(backend) << ": select "
                                                     << tag << " alone to have these cases "
                                                     << "reported as skipped, or exclude them "
                                                     << "with ~" << tag);
  }
  REQUIRE(fp4_set_backend(backend) == FP4_OK);  // BackendScope ignores a failure
  g_backendUnderTest = backend;
  body();
}

// Before any test runs: if every selected test case needs an instruction set this CPU lacks,
// print why and exit with 77 (CTest: SKIP_RETURN_CODE), so the run reads as skipped, not passed.
struct IsaSkipListener : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testRunStarting(Catch::TestRunInfo const& info) override {
    TestEventListenerBase::testRunStarting(info);
    const Catch::IConfig& config = *m_config;
    const std::vector<Catch::TestCase> selected =
        Catch::filterTests(Catch::getAllTestCasesSorted(config), config.testSpec(), config);
    std::string missing;
    for (const Catch::TestCase& test : selected) {
      const char* lacking = nullptr;
      for (fp4_backend b : {FP4_BACKEND_AVX2, FP4_BACKEND_AVX512})
        if (!backendUsable(b) &&
            std::find(test.tags.begin(), test.tags.end(), backendTag(b)) != test.tags.end())
          lacking = backendTag(b);
      if (!lacking) return;  // a runnable test case: run normally
      if (missing.find(lacking) == std::string::npos)
        missing += std::string(missing.empty() ? "" : ", ") + lacking;
    }
    if (selected.empty()) return;
    const char* mask = std::getenv("FP4LAB_TEST_MASK_ISA");
    std::printf("skipped: no %s on this CPU%s%s (%zu test cases need it)\n", missing.c_str(),
                mask ? ", or masked by FP4LAB_TEST_MASK_ISA=" : "", mask ? mask : "",
                selected.size());
    std::fflush(stdout);
    std::exit(77);
  }
};
CATCH_REGISTER_LISTENER(IsaSkipListener)

std::string describe(const fp4_config& cfg, Distribution d, Shape s, const char* backend) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s %s%s%s%s, %s, %" PRId64 "x%" PRId64 ", backend %s",
                cfg.format == FP4_FORMAT_MXFP4 ? "MXFP4" : "NVFP4",
                cfg.scale_rule == FP4_SCALE_RULE_FLOOR ? "floor" : "ceil",
                cfg.nvfp4_2d_blocks ? " 2-D" : "", cfg.hadamard ? " hadamard" : "",
                cfg.rounding == FP4_ROUNDING_STOCHASTIC ? " stochastic" : "", name(d), s.rows,
                s.cols, backend);
  return buf;
}

// Compares every output of `got` with the reference's; returns the number of values compared.
int64_t compare(const Outputs& ref, const Outputs& got, const std::string& what) {
  INFO(what);
  REQUIRE(ref.quantizeStatus == FP4_OK);
  REQUIRE(got.quantizeStatus == FP4_OK);
  REQUIRE(got.fakeStatus == FP4_OK);
  REQUIRE(got.dequantStatus == FP4_OK);
  CHECK(got.codes == ref.codes);
  CHECK(got.scales == ref.scales);
  CHECK(std::memcmp(&got.globalScale, &ref.globalScale, 4) == 0);
  int64_t diff = firstDifference(got.fake, ref.fake);
  INFO("first fake-quant difference at element " << diff);
  CHECK(diff == -1);
  CHECK(sameBits(got.dequant, ref.dequant));
  // The invariant QAT depends on: fake quantization == dequantize(quantize(x)).
  CHECK(sameBits(got.fake, got.dequant));
  CHECK(sameBits(got.blockAmax, ref.blockAmax));
  for (size_t i = 0; i < ref.blockSqErr.size(); ++i) {
    if (!close(got.blockSqErr[i], ref.blockSqErr[i], 2e-5)) {
      FAIL_CHECK("block " << i << " squared error " << got.blockSqErr[i] << " vs reference "
                          << ref.blockSqErr[i]);
      break;
    }
  }
  const fp4_error_stats &a = got.stats, &b = ref.stats;
  CHECK(a.count == b.count);
  CHECK(a.clipped == b.clipped);
  CHECK(a.flushed == b.flushed);
  CHECK(a.nonfinite == b.nonfinite);
  CHECK(close(a.sum_x2, b.sum_x2, 1e-5));
  CHECK(close(a.sum_err2, b.sum_err2, 1e-5));
  CHECK(close(a.sum_xq, b.sum_xq, 1e-5));
  CHECK(close(a.sum_q2, b.sum_q2, 1e-5));
  CHECK(close(a.max_abs_err, b.max_abs_err, 1e-6));
  return int64_t(ref.fake.size());
}

// Runs one config over distributions x shapes on every backend; returns values compared.
int64_t sweep(const fp4_config& cfg, const std::vector<Distribution>& dists,
              const std::vector<Shape>& shapes, uint64_t seed, float tensorAmaxFactor = -1.0f) {
  int64_t compared = 0;
  for (Distribution d : dists) {
    for (Shape s : shapes) {
      std::vector<float> x = makeData(d, s.rows, s.cols, seed++);
      float amax = -1.0f;
      if (tensorAmaxFactor > 0)
        amax = fp4_tensor_amax(x.data(), int64_t(x.size())) * tensorAmaxFactor;
      Outputs ref;
      {
        BackendScope scope(FP4_BACKEND_REFERENCE);
        ref = runAll(cfg, x, s.rows, s.cols, amax);
      }
      for (fp4_backend b : optimizedBackends()) {
        BackendScope scope(b);
        compared += compare(ref, runAll(cfg, x, s.rows, s.cols, amax),
                            describe(cfg, d, s, fp4_backend_name(b)));
      }
    }
  }
  return compared;
}

const std::vector<Distribution> kAllDistributions = {
    Distribution::Normal,   Distribution::HeavyTailed, Distribution::BlockScaled,
    Distribution::Outliers, Distribution::Sparse,      Distribution::Denormal};

// About 1.9 M values per distribution: odd row counts, wide and narrow rows.
const std::vector<Shape> kMainShapes = {{1, 4096},   {3, 2048},   {17, 1024}, {33, 512},
                                        {255, 4096}, {1023, 768}, {4097, 32}};

// Fake quantization without statistics (y only): every optimized backend, out of place and in
// place, equals the reference bit for bit. Returns the reference's output.
std::vector<float> checkNoStatisticsPath(const fp4_config& cfg, const std::vector<float>& x,
                                         Shape s, float amax, Distribution d,
                                         const std::string& note) {
  std::vector<float> ref(x.size(), -7.0f);
  {
    BackendScope scope(FP4_BACKEND_REFERENCE);
    REQUIRE(fp4_fake_quantize(&cfg, x.data(), s.rows, s.cols, amax, ref.data(), nullptr, nullptr,
                              nullptr) == FP4_OK);
  }
  for (fp4_backend be : optimizedBackends()) {
    BackendScope scope(be);
    INFO(describe(cfg, d, s, fp4_backend_name(be)) << note << ", tensor amax " << amax);
    std::vector<float> got(x.size(), -7.0f), inPlace = x;
    REQUIRE(fp4_fake_quantize(&cfg, x.data(), s.rows, s.cols, amax, got.data(), nullptr, nullptr,
                              nullptr) == FP4_OK);
    CHECK(firstDifference(got, ref) == -1);
    REQUIRE(fp4_fake_quantize(&cfg, inPlace.data(), s.rows, s.cols, amax, inPlace.data(), nullptr,
                              nullptr, nullptr) == FP4_OK);
    CHECK(firstDifference(inPlace, ref) == -1);
  }
  return ref;
}

}  // namespace

// A test case comparing optimized backends with the reference, registered once per backend.
#define FP4_CONCAT_(a, b) a##b
#define FP4_CONCAT(a, b) FP4_CONCAT_(a, b)
#define BACKEND_TEST_CASE(name, tags) \
  BACKEND_TEST_CASE_(FP4_CONCAT(backendTestBody, __LINE__), name, tags)
#define BACKEND_TEST_CASE_(body, name, tags)       \
  static void body();                              \
  TEST_CASE(name " (generic)", tags "[generic]") { \
    runOnBackend(FP4_BACKEND_GENERIC, body);       \
  }                                                \
  TEST_CASE(name " (avx2)", tags "[.avx2]") {      \
    runOnBackend(FP4_BACKEND_AVX2, body);          \
  }                                                \
  TEST_CASE(name " (avx512)", tags "[.avx512]") {  \
    runOnBackend(FP4_BACKEND_AVX512, body);        \
  }                                                \
  static void body()

BACKEND_TEST_CASE("Optimized backends equal the reference bit for bit: MXFP4, >10M values",
                  "[backends][mxfp4]") {
  REQUIRE_FALSE(optimizedBackends().empty());
  fp4_config cfg = fp4_default_config(FP4_FORMAT_MXFP4);
  int64_t compared = sweep(cfg, kAllDistributions, kMainShapes, 100);
  // Each backend saw every value; count distinct values once.
  CHECK(compared / int64_t(optimizedBackends().size()) >= 10'000'000);
}

BACKEND_TEST_CASE("Optimized backends equal the reference bit for bit: NVFP4, >10M values",
                  "[backends][nvfp4]") {
  fp4_config cfg = fp4_default_config(FP4_FORMAT_NVFP4);
  int64_t compared = sweep(cfg, kAllDistributions, kMainShapes, 200);
  CHECK(compared / int64_t(optimizedBackends().size()) >= 10'000'000);
}

BACKEND_TEST_CASE("Optimized backends equal the reference: options", "[backends][options]") {
  const std::vector<Shape> shapes = {{1, 64}, {5, 160}, {31, 512}, {129, 1024}};
  const std::vector<Distribution> dists = {Distribution::Normal, Distribution::BlockScaled,
                                           Distribution::Outliers};
  SECTION("MXFP4 floor scale rule") {
    fp4_config cfg = fp4_default_config(FP4_FORMAT_MXFP4);
    cfg.scale_rule = FP4_SCALE_RULE_FLOOR;
    sweep(cfg, dists, shapes, 300);
  }
  SECTION("NVFP4 16x16 2-D blocks") {
    fp4_config cfg = fp4_default_config(FP4_FORMAT_NVFP4);
    cfg.nvfp4_2d_blocks = 1;
    sweep(cfg, dists, shapes, 400);
  }
  SECTION("NVFP4 with a calibrated tensor amax below the data's (clipping)") {
    fp4_config cfg = fp4_default_config(FP4_FORMAT_NVFP4);
    sweep(cfg, dists, shapes, 500, 0.3f);
  }
  SECTION("Hadamard, both formats") {
    for (fp4_format f : {FP4_FORMAT_MXFP4, FP4_FORMAT_NVFP4}) {
      fp4_config cfg = fp4_default_config(f);
      cfg.hadamard = 1;
      sweep(cfg, dists, shapes, 600);
    }
  }
  SECTION("Stochastic rounding, both formats, with a seed offset") {
    for (fp4_format f : {FP4_FORMAT_MXFP4, FP4_FORMAT_NVFP4}) {
      fp4_config cfg = fp4_default_config(f);
      cfg.rounding = FP4_ROUNDING_STOCHASTIC;
      cfg.seed = 0x1234567890ULL;
      cfg.seed_offset = 77;
      sweep(cfg, dists, shapes, 700);
    }
  }
  SECTION("NaN and Inf inside blocks") {
    for (fp4_format f : {FP4_FORMAT_MXFP4, FP4_FORMAT_NVFP4}) {
      for (int twoD = 0; twoD < (f == FP4_FORMAT_NVFP4 ? 2 : 1); ++twoD) {
        fp4_config cfg = fp4_default_config(f);
        cfg.nvfp4_2d_blocks = twoD;
        std::vector<float> x = makeData(Distribution::Normal, 37, 256, 800);
        std::mt19937 rng(5);
        for (int i = 0; i < 40; ++i) {
          float bad = i % 3 == 0 ? NAN : (i % 3 == 1 ? INFINITY : -INFINITY);
          x[rng() % x.size()] = bad;
        }
        Outputs ref;
        {
          BackendScope scope(FP4_BACKEND_REFERENCE);
          ref = runAll(cfg, x, 37, 256);
        }
        CHECK(ref.stats.nonfinite == 40);
        for (fp4_backend b : optimizedBackends()) {
          BackendScope scope(b);
          compare(ref, runAll(cfg, x, 37, 256), std::string("non-finite, ") + fp4_backend_name(b));
        }
      }
    }
  }
}

// runAll always asks for statistics; this covers the kernels' separate no-statistics path (y
// only, and in place), at widths with a partial group of 16 blocks and with none. A calibrated
// amax far below the data's (1e-7) saturates the scales: quotients beyond 2^20 leave the NVFP4
// FMA quotient for the double one, as do the denormal data's tiny scales.
BACKEND_TEST_CASE("Optimized backends equal the reference: fake-quant without statistics",
                  "[backends][fake]") {
  for (fp4_format f : {FP4_FORMAT_MXFP4, FP4_FORMAT_NVFP4}) {
    const int64_t b = fp4_block_size(f);
    const std::vector<Shape> shapes = {{1, b},       {3, 2 * b},  {7, 3 * b}, {5, 16 * b},
                                       {33, 17 * b}, {2, 31 * b}, {9, 4096},  {17, 48 * b}};
    std::vector<fp4_config> configs(4, fp4_default_config(f));
    configs[1].hadamard = 1;
    configs[2].scale_rule = FP4_SCALE_RULE_FLOOR;
    if (f == FP4_FORMAT_NVFP4) configs[2].nvfp4_2d_blocks = 1;
    configs[3].rounding = FP4_ROUNDING_STOCHASTIC;
    uint64_t seed = 1100;
    for (const fp4_config& cfg : configs) {
      for (Distribution d : kAllDistributions) {
        for (Shape s : shapes) {
          std::vector<float> x = makeData(d, s.rows, s.cols, seed++);
          if (seed % 3 == 0) x[size_t(seed) % x.size()] = seed % 2 ? NAN : -INFINITY;
          for (float amaxFactor : {-1.0f, 0.3f, 1e-7f}) {
            if (amaxFactor > 0 && f != FP4_FORMAT_NVFP4) continue;
            float amax =
                amaxFactor > 0 ? fp4_tensor_amax(x.data(), int64_t(x.size())) * amaxFactor : -1.0f;
            const std::vector<float> ref = checkNoStatisticsPath(cfg, x, s, amax, d, "");
            // A per-block output alone takes the statistics path.
            for (fp4_backend be : optimizedBackends()) {
              BackendScope scope(be);
              INFO(describe(cfg, d, s, fp4_backend_name(be)) << ", tensor amax " << amax);
              std::vector<float> amaxOnly(x.size(), -7.0f);
              std::vector<float> blockAmax(size_t(fp4_scale_count(f, s.rows, s.cols)));
              REQUIRE(fp4_fake_quantize(&cfg, x.data(), s.rows, s.cols, amax, amaxOnly.data(),
                                        nullptr, nullptr, blockAmax.data()) == FP4_OK);
              CHECK(firstDifference(amaxOnly, ref) == -1);
            }
          }
        }
      }
    }
  }
}

namespace {

// The test's own BF16 conversions (not the kernels'): widening is exact; narrowing rounds to
// nearest even and maps NaN to 0x7FC0, as LibTorch's c10::BFloat16.
float widen(uint16_t h) {
  const uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
uint16_t narrow(float f) {
  if (std::isnan(f)) return 0x7FC0;
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint32_t lower = bits & 0xFFFFu, upper = bits >> 16;
  return uint16_t(upper + (lower > 0x8000u || (lower == 0x8000u && (upper & 1u))));
}

}  // namespace

// fp4_fake_quantize_typed: BF16 input and/or output is the reference's fp32 fake quantization of
// the widened input, narrowed, bit for bit, and x_amax is fp4_tensor_amax of the widened input.
// Every configuration (the AVX-512 backend converts in registers on its flat path only: nearest
// rounding without tiles or rotation; the others widen chunk by chunk), shapes with a partial
// group of blocks and several chunks (stochastic rounding keyed by the element's index across
// them), NaN and Inf, subnormal BF16 inputs and outputs, and calibrated amaxes that saturate.
BACKEND_TEST_CASE("BF16 at either end of fake quantization equals the fp32 path, narrowed",
                  "[backends][fake][bf16]") {
  for (fp4_format f : {FP4_FORMAT_MXFP4, FP4_FORMAT_NVFP4}) {
    const int64_t b = fp4_block_size(f);
    // {80, 2304}: 184 K elements in 3 chunks, enough to take the worker threads.
    const std::vector<Shape> shapes = {{1, b}, {7, 3 * b}, {33, 17 * b}, {9, 4096}, {80, 2304}};
    std::vector<fp4_config> configs(4, fp4_default_config(f));
    configs[1].hadamard = 1;
    configs[2].scale_rule = FP4_SCALE_RULE_FLOOR;
    if (f == FP4_FORMAT_NVFP4) configs[2].nvfp4_2d_blocks = 1;
    configs[3].rounding = FP4_ROUNDING_STOCHASTIC;
    configs[3].seed = 99;
    uint64_t seed = 7100;
    for (const fp4_config& cfg : configs) {
      for (Distribution d : kAllDistributions) {
        for (Shape s : shapes) {
          const size_t n = size_t(s.rows * s.cols);
          std::vector<float> x32 = makeData(d, s.rows, s.cols, seed++);
          // A NaN with a payload below BF16's bits (0x7F812345, signalling): its block's output
          // NaN keeps payload bits that plain rounding would turn into 0x7FC1, not 0x7FC0.
          const uint32_t payloadNan = 0x7F812345u;
          if (seed % 3 == 0) std::memcpy(&x32[size_t(seed) % n], &payloadNan, 4);
          if (seed % 3 == 1) x32[size_t(seed) % n] = seed % 2 ? NAN : -INFINITY;
          std::vector<uint16_t> x16(n);
          std::vector<float> wide(n);  // the BF16 input, widened
          for (size_t i = 0; i < n; ++i) wide[i] = widen(x16[i] = narrow(x32[i]));
          // -1: measured; 1: calibrated on this tensor (QAT's usual case); 0.3 and 1e-7 saturate.
          for (float amaxFactor : {-1.0f, 1.0f, 0.3f, 1e-7f}) {
            if (amaxFactor > 0 && f != FP4_FORMAT_NVFP4) continue;
            for (bool bf16In : {false, true}) {
              const std::vector<float>& in = bf16In ? wide : x32;
              const float amax =
                  amaxFactor > 0 ? fp4_tensor_amax(in.data(), int64_t(n)) * amaxFactor : -1.0f;
              std::vector<float> ref(n);
              {
                BackendScope scope(FP4_BACKEND_REFERENCE);
                REQUIRE(fp4_fake_quantize(&cfg, in.data(), s.rows, s.cols, amax, ref.data(),
                                          nullptr, nullptr, nullptr) == FP4_OK);
              }
              const float refAmax = fp4_tensor_amax(in.data(), int64_t(n));
              std::vector<uint16_t> ref16(n);
              for (size_t i = 0; i < n; ++i) ref16[i] = narrow(ref[i]);
              const void* xp = bf16In ? static_cast<const void*>(x16.data()) : x32.data();
              const fp4_dtype xt = bf16In ? FP4_DTYPE_BF16 : FP4_DTYPE_F32;
              for (fp4_backend be : optimizedBackends()) {
                BackendScope scope(be);
                INFO(describe(cfg, d, s, fp4_backend_name(be))
                     << ", tensor amax " << amax << (bf16In ? ", BF16 input" : ", fp32 input"));
                std::vector<uint16_t> got16(n, 0xFFFF);
                float xAmax = -1;
                REQUIRE(fp4_fake_quantize_typed(&cfg, xp, xt, s.rows, s.cols, amax, got16.data(),
                                                FP4_DTYPE_BF16, &xAmax) == FP4_OK);
                const auto diff16 = std::mismatch(got16.begin(), got16.end(), ref16.begin());
                INFO("first BF16 output difference at " << (diff16.first - got16.begin()) << " of "
                                                        << n);
                CHECK(diff16.first == got16.end());
                CHECK(std::memcmp(&xAmax, &refAmax, 4) == 0);
                std::vector<float> got32(n, -7.0f);
                float xAmax32 = -1;
                REQUIRE(fp4_fake_quantize_typed(&cfg, xp, xt, s.rows, s.cols, amax, got32.data(),
                                                FP4_DTYPE_F32, &xAmax32) == FP4_OK);
                CHECK(firstDifference(got32, ref) == -1);
                CHECK(std::memcmp(&xAmax32, &refAmax, 4) == 0);
                float measured = -1;  // no output: measures only
                REQUIRE(fp4_fake_quantize_typed(&cfg, xp, xt, s.rows, s.cols, amax, nullptr,
                                                FP4_DTYPE_BF16, &measured) == FP4_OK);
                CHECK(std::memcmp(&measured, &refAmax, 4) == 0);
                if (bf16In) {  // in place
                  std::vector<uint16_t> inPlace = x16;
                  REQUIRE(fp4_fake_quantize_typed(&cfg, inPlace.data(), FP4_DTYPE_BF16, s.rows,
                                                  s.cols, amax, inPlace.data(), FP4_DTYPE_BF16,
                                                  nullptr) == FP4_OK);
                  CHECK(inPlace == ref16);
                } else {
                  std::vector<float> inPlace = x32;
                  REQUIRE(fp4_fake_quantize_typed(&cfg, inPlace.data(), FP4_DTYPE_F32, s.rows,
                                                  s.cols, amax, inPlace.data(), FP4_DTYPE_F32,
                                                  nullptr) == FP4_OK);
                  CHECK(firstDifference(inPlace, ref) == -1);
                }
              }
            }
          }
        }
      }
    }
  }
}

// Results exactly halfway between two BF16 values round to the even one. NVFP4 with the tensor
// amax 2719.5 has s2 = 2719.5 / 2688 = 1 + 3 * 2^-8 (exact); blocks of grid values times s2 with
// a 6 in each have the scale 1 and come back as themselves, and 1 * s2 (0x3F818000), say, lies
// halfway between the BF16 values 0x3F81 and 0x3F82.
BACKEND_TEST_CASE("BF16 outputs halfway between two values round to even", "[backends][bf16]") {
  const fp4_config cfg = fp4_default_config(FP4_FORMAT_NVFP4);
  const float s2 = 2719.5f / 2688.0f, grid[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  std::vector<float> x(256);
  for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 3 ? 1.0f : -1.0f) * grid[i % 8] * s2;
  std::vector<float> ref(x.size());
  {
    BackendScope scope(FP4_BACKEND_REFERENCE);
    REQUIRE(fp4_fake_quantize(&cfg, x.data(), 4, 64, 2719.5f, ref.data(), nullptr, nullptr,
                              nullptr) == FP4_OK);
  }
  REQUIRE(sameBits(ref, x));
  int ties = 0;
  std::vector<uint16_t> ref16(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &ref[i], 4);
    ties += (bits & 0xFFFFu) == 0x8000u && (bits >> 16 & 1u);
    ref16[i] = narrow(ref[i]);
  }
  REQUIRE(ties > 0);
  for (fp4_backend be : optimizedBackends()) {
    BackendScope scope(be);
    std::vector<uint16_t> got(x.size());
    REQUIRE(fp4_fake_quantize_typed(&cfg, x.data(), FP4_DTYPE_F32, 4, 64, 2719.5f, got.data(),
                                    FP4_DTYPE_BF16, nullptr) == FP4_OK);
    CHECK(got == ref16);
  }
}

BACKEND_TEST_CASE("Hadamard transform: optimized equals reference, inverse restores the input",
                  "[backends][hadamard]") {
  std::vector<float> x = makeData(Distribution::HeavyTailed, 19, 256, 900);
  std::vector<float> ref(x.size()), back(x.size());
  {
    BackendScope scope(FP4_BACKEND_REFERENCE);
    REQUIRE(fp4_hadamard16(x.data(), 19, 256, 0, ref.data()) == FP4_OK);
    REQUIRE(fp4_hadamard16(ref.data(), 19, 256, 1, back.data()) == FP4_OK);
  }
  double norm = 0, normRotated = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    REQUIRE(std::fabs(back[i] - x[i]) <= 1e-5 * std::max(1.0f, std::fabs(x[i])));
    norm += double(x[i]) * x[i];
    normRotated += double(ref[i]) * ref[i];
  }
  CHECK(close(norm, normRotated, 1e-5));  // orthonormal
  for (fp4_backend b : optimizedBackends()) {
    BackendScope scope(b);
    std::vector<float> got(x.size()), gotBack(x.size());
    REQUIRE(fp4_hadamard16(x.data(), 19, 256, 0, got.data()) == FP4_OK);
    REQUIRE(fp4_hadamard16(got.data(), 19, 256, 1, gotBack.data()) == FP4_OK);
    CHECK(sameBits(got, ref));
    CHECK(sameBits(gotBack, back));
  }
}

TEST_CASE("Results do not depend on the thread count", "[backends][threads]") {
  std::vector<float> x = makeData(Distribution::HeavyTailed, 1000, 2048, 1000);
  for (fp4_format f : {FP4_FORMAT_MXFP4, FP4_FORMAT_NVFP4}) {
    fp4_config cfg = fp4_default_config(f);
    int before = fp4_get_num_threads();
    fp4_set_num_threads(1);
    Outputs one = runAll(cfg, x, 1000, 2048);
    fp4_set_num_threads(4);
    Outputs four = runAll(cfg, x, 1000, 2048);
    fp4_set_num_threads(before);
    CHECK(sameBits(one.fake, four.fake));
    CHECK(one.codes == four.codes);
    CHECK(one.stats.sum_err2 == four.stats.sum_err2);  // exact: fixed chunking, fixed merge order
    CHECK(one.stats.sum_x2 == four.stats.sum_x2);
  }
}

// Every output of the API, including fake quantization without statistics (its own code path)
// and the tensor amax, as raw bytes, so runs can be compared bit for bit.
struct AllOutputs {
  Outputs all;
  std::vector<float> fakeNoStats;
  float amax = 0;
  bool operator==(const AllOutputs& o) const {
    const Outputs &a = all, &b = o.all;
    return a.quantizeStatus == b.quantizeStatus && a.fakeStatus == b.fakeStatus &&
           a.dequantStatus == b.dequantStatus && a.codes == b.codes && a.scales == b.scales &&
           std::memcmp(&a.globalScale, &b.globalScale, 4) == 0 && sameBits(a.fake, b.fake) &&
           sameBits(a.dequant, b.dequant) && sameBits(a.blockSqErr, b.blockSqErr) &&
           sameBits(a.blockAmax, b.blockAmax) &&
           std::memcmp(&a.stats, &b.stats, sizeof a.stats) == 0 &&
           sameBits(fakeNoStats, o.fakeNoStats) && std::memcmp(&amax, &o.amax, 4) == 0;
  }
};

AllOutputs runEverything(const fp4_config& cfg, const std::vector<float>& x, Shape s) {
  AllOutputs r;
  r.all = runAll(cfg, x, s.rows, s.cols);
  r.fakeNoStats.assign(x.size(), -7.0f);
  if (fp4_fake_quantize(&cfg, x.data(), s.rows, s.cols, -1, r.fakeNoStats.data(), nullptr, nullptr,
                        nullptr) != FP4_OK)
    r.fakeNoStats.clear();
  r.amax = fp4_tensor_amax(x.data(), int64_t(x.size()));
  return r;
}

// The shapes: 32 chunks of 32 rows, 3 chunks of 16 rows (fewer chunks than threads), and an MLP
// weight of the built-in model, 176 K elements in 3 chunks of 96 rows, just above the size from
// which the pool is used.
const Shape kPoolShapes[] = {{1000, 2048}, {40, 8192}, {256, 704}};

TEST_CASE("The thread pool gives the same bits for 1, 2, 3 and 4 threads", "[backends][threads]") {
  const int before = fp4_get_num_threads();
  for (fp4_format f : {FP4_FORMAT_MXFP4, FP4_FORMAT_NVFP4}) {
    fp4_config cfg = fp4_default_config(f);
    for (Shape s : kPoolShapes) {
      std::vector<float> x = makeData(Distribution::HeavyTailed, s.rows, s.cols, 77);
      fp4_set_num_threads(1);
      const AllOutputs one = runEverything(cfg, x, s);
      REQUIRE(one.all.fakeStatus == FP4_OK);
      REQUIRE(one.fakeNoStats.size() == x.size());
      for (int threads : {2, 3, 4, 2}) {  // the pool grows, shrinks and grows again
        INFO(describe(cfg, Distribution::HeavyTailed, s, fp4_backend_name(fp4_get_backend()))
             << ", " << threads << " threads");
        fp4_set_num_threads(threads);
        CHECK(runEverything(cfg, x, s) == one);
      }
    }
  }
  fp4_set_num_threads(before);
}

TEST_CASE("Concurrent calls from two threads on different data give the one-thread results",
          "[backends][threads]") {
  const int before = fp4_get_num_threads();
  struct Case {
    fp4_config cfg;
    Shape shape;
    std::vector<float> x;
    AllOutputs expected;
  };
  std::vector<Case> cases = {
      {fp4_default_config(FP4_FORMAT_MXFP4), kPoolShapes[0], {}, {}},
      {fp4_default_config(FP4_FORMAT_NVFP4), kPoolShapes[1], {}, {}},
  };
  fp4_set_num_threads(1);
  for (size_t i = 0; i < cases.size(); ++i) {
    Case& c = cases[i];
    c.x = makeData(Distribution::Normal, c.shape.rows, c.shape.cols, 500 + i);
    c.expected = runEverything(c.cfg, c.x, c.shape);
  }
  for (int threads : {2, 3}) {
    fp4_set_num_threads(threads);
    int mismatches[2] = {0, 0};
    {
      std::vector<std::thread> users;
      for (size_t i = 0; i < cases.size(); ++i)
        users.emplace_back([&, i] {
          for (int rep = 0; rep < 8; ++rep)  // Catch's macros are not thread-safe: count here
            if (!(runEverything(cases[i].cfg, cases[i].x, cases[i].shape) == cases[i].expected))
              ++mismatches[i];
        });
      for (auto& t : users) t.join();
    }
    INFO(threads << " threads");
    CHECK(mismatches[0] == 0);
    CHECK(mismatches[1] == 0);
  }
  fp4_set_num_threads(before);
}

// The pool's workers are visible as tasks of this process (Linux).
int64_t processThreads() {
  std::error_code ec;
  int64_t n = 0;
  for (std::filesystem::directory_iterator it("/proc/self/task", ec), end; !ec && it != end;
       it.increment(ec))
    ++n;
  return ec ? -1 : n;
}

TEST_CASE("fp4_set_num_threads resizes the worker pool", "[backends][threads]") {
  if (processThreads() <= 0) {
    WARN("no /proc/self/task: cannot count threads");
    return;
  }
  const int before = fp4_get_num_threads();
  fp4_config cfg = fp4_default_config(FP4_FORMAT_MXFP4);
  const Shape s = kPoolShapes[0];
  std::vector<float> x = makeData(Distribution::Normal, s.rows, s.cols, 9), y(x.size());
  auto runWith = [&](int threads) {
    fp4_set_num_threads(threads);
    CHECK(fp4_get_num_threads() == threads);
    REQUIRE(fp4_fake_quantize(&cfg, x.data(), s.rows, s.cols, -1, y.data(), nullptr, nullptr,
                              nullptr) == FP4_OK);
    return processThreads();
  };
  const int64_t two = runWith(2);  // the calling thread and one worker
  CHECK(runWith(4) == two + 2);
  CHECK(runWith(3) == two + 1);
  CHECK(runWith(1) == two + 1);  // one thread: the pool is not used (nor resized)
  CHECK(runWith(2) == two);
  fp4_set_num_threads(before);
}

// The AVX-512 no-statistics path rounds MXFP4 in the input's own scale and takes NVFP4's tensor
// amax from its block maxima; its fast formulas hold for MXFP4 exponents in [-126, 103] and for
// NVFP4 scales in [2^-100, 2^100] or decoding to 0. This sweeps block magnitudes across and
// beyond those bounds (subnormal to near FLT_MAX), all-zero and -0 blocks, blocks at the scale
// rules' boundaries (amax 1.5 * 2^k, 6 * 2^k), NVFP4 blocks whose scale decodes to 0 with
// negative elements, and NaN/Inf, on tensors of one chunk and of several.
BACKEND_TEST_CASE(
    "Optimized backends equal the reference: fake-quant without statistics, extreme scales",
    "[backends][fake][extreme]") {
  const std::vector<int> exponents = {-149, -140, -130, -128, -127, -126, -125, -124, -100,
                                      -20,  -1,   0,    1,    20,   100,  101,  102,  103,
                                      104,  105,  110,  120,  124,  125,  126,  127};
  for (fp4_format f : {FP4_FORMAT_MXFP4, FP4_FORMAT_NVFP4}) {
    const int64_t block = fp4_block_size(f);
    for (Shape s : std::vector<Shape>{{3, 40 * block}, {40, 4096}}) {
      std::mt19937_64 rng(uint64_t(f) * 1000 + uint64_t(s.rows));
      std::uniform_real_distribution<float> uniform(-1.99f, 1.99f);
      std::vector<float> x(size_t(s.rows * s.cols));
      const int64_t blocks = s.rows * s.cols / block;
      for (int64_t b = 0; b < blocks; ++b) {
        const float scale = std::ldexp(1.0f, exponents[size_t(b) % exponents.size()]);
        const int kind = int((b / int64_t(exponents.size())) % 6);
        for (int64_t i = 0; i < block; ++i) {
          float v = uniform(rng) * scale;
          if (kind == 1) v = 0.0f;
          if (kind == 2) v = i % 2 ? -0.0f : 0.0f;
          if (kind == 3 && i == 0) v = 1.5f * scale;           // amax on the 1.5 boundary
          if (kind == 3 && i == 1) v = -6.0f * scale * 0.25f;  // and 6 * 2^k
          if (kind == 4) v = -std::fabs(v) * 1e-7f;            // tiny and negative
          if (!std::isfinite(v)) v = 0.0f;
          x[size_t(b * block + i)] = v;
        }
      }
      for (int i = 0; i < 5; ++i) x[size_t(rng() % x.size())] = i % 2 ? NAN : -INFINITY;
      // The largest finite value shares its block with a NaN: the NVFP4 amax still counts it.
      x[0] = 3.4e38f, x[1] = NAN;
      std::vector<fp4_config> configs(2, fp4_default_config(f));
      configs[1].scale_rule = FP4_SCALE_RULE_FLOOR;
      for (const fp4_config& cfg : configs) {
        for (float amax : {-1.0f, 1.0f, 1e-30f, 3e38f}) {
          if (amax > 0 && f != FP4_FORMAT_NVFP4) continue;
          checkNoStatisticsPath(cfg, x, s, amax, Distribution::Normal, ", extreme scales");
        }
      }
    }
  }
}
