// The kernel API's contract for bad input: defined errors with a message, never undefined
// behaviour; plus backend selection and buffer-size helpers.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>

#include "kernel_fixtures.h"

using namespace fp4test;

TEST_CASE("Bad shapes and buffers give errors with a message", "[api]") {
  fp4_config mx = fp4_default_config(FP4_FORMAT_MXFP4);
  std::vector<float> x(64, 1.0f), y(64);
  std::vector<uint8_t> codes(32), scales(4);
  float s2 = 0;

  CHECK(fp4_quantize(&mx, x.data(), 1, 48, -1, codes.data(), scales.data(), &s2) == FP4_ERR_SHAPE);
  CHECK(std::string(fp4_last_error()).find("multiple of the MXFP4 block size 32") !=
        std::string::npos);
  CHECK(fp4_fake_quantize(&mx, x.data(), -1, 32, -1, y.data(), nullptr, nullptr, nullptr) ==
        FP4_ERR_SHAPE);
  CHECK(fp4_quantize(&mx, nullptr, 1, 32, -1, codes.data(), scales.data(), &s2) ==
        FP4_ERR_NULL_POINTER);
  CHECK(fp4_quantize(&mx, x.data(), 1, 32, -1, nullptr, scales.data(), &s2) ==
        FP4_ERR_NULL_POINTER);
  CHECK(fp4_dequantize(&mx, codes.data(), scales.data(), 1, 1, 32, nullptr) ==
        FP4_ERR_NULL_POINTER);
  CHECK(fp4_quantize(nullptr, x.data(), 1, 32, -1, codes.data(), scales.data(), &s2) ==
        FP4_ERR_NULL_POINTER);

  // A float pointer that is not 4-byte aligned.
  std::vector<uint8_t> raw(64 * 4 + 1);
  const float* odd = reinterpret_cast<const float*>(raw.data() + 1);
  CHECK(fp4_fake_quantize(&mx, odd, 1, 32, -1, y.data(), nullptr, nullptr, nullptr) ==
        FP4_ERR_MISALIGNED);
  CHECK(std::string(fp4_last_error()).find("aligned") != std::string::npos);

  fp4_config bad = mx;
  bad.format = fp4_format(7);
  CHECK(fp4_quantize(&bad, x.data(), 1, 32, -1, codes.data(), scales.data(), &s2) ==
        FP4_ERR_ARGUMENT);
  bad = mx;
  bad.nvfp4_2d_blocks = 1;
  CHECK(fp4_quantize(&bad, x.data(), 1, 32, -1, codes.data(), scales.data(), &s2) ==
        FP4_ERR_ARGUMENT);

  fp4_config nv = fp4_default_config(FP4_FORMAT_NVFP4);
  CHECK(fp4_quantize(&nv, x.data(), 1, 32, NAN, codes.data(), scales.data(), &s2) ==
        FP4_ERR_ARGUMENT);
  CHECK(fp4_quantize(&nv, x.data(), 1, 32, INFINITY, codes.data(), scales.data(), &s2) ==
        FP4_ERR_ARGUMENT);
  CHECK(fp4_dequantize(&nv, codes.data(), scales.data(), 0.0f, 1, 32, y.data()) ==
        FP4_ERR_ARGUMENT);
  CHECK(fp4_dequantize(&nv, codes.data(), scales.data(), NAN, 1, 32, y.data()) == FP4_ERR_ARGUMENT);
  CHECK(fp4_hadamard16(x.data(), 1, 24, 0, y.data()) == FP4_ERR_SHAPE);
}

TEST_CASE("BF16 fake quantization refuses bad element types, pointers and overlaps", "[api]") {
  const fp4_config nv = fp4_default_config(FP4_FORMAT_NVFP4);
  std::vector<float> x(64, 1.0f), y(64);
  std::vector<uint16_t> h(65, 0x3F80);  // BF16 1.0
  float amax = 5;
  const auto message = [] { return std::string(fp4_last_error()); };
  CHECK(fp4_fake_quantize_typed(&nv, x.data(), fp4_dtype(3), 1, 64, -1, y.data(), FP4_DTYPE_F32,
                                &amax) == FP4_ERR_ARGUMENT);
  CHECK(message().find("unknown element type 3") != std::string::npos);
  CHECK(amax == 0.0f);  // set to 0 whatever the outcome
  CHECK(fp4_fake_quantize_typed(&nv, nullptr, FP4_DTYPE_BF16, 1, 64, -1, y.data(), FP4_DTYPE_F32,
                                nullptr) == FP4_ERR_NULL_POINTER);
  CHECK(fp4_fake_quantize_typed(&nv, h.data(), FP4_DTYPE_BF16, 1, 40, -1, y.data(), FP4_DTYPE_F32,
                                nullptr) == FP4_ERR_SHAPE);
  // A BF16 pointer at an odd address, an fp32 output that is not 4-byte aligned.
  const void* oddIn = reinterpret_cast<const uint8_t*>(h.data()) + 1;
  CHECK(fp4_fake_quantize_typed(&nv, oddIn, FP4_DTYPE_BF16, 1, 32, -1, y.data(), FP4_DTYPE_F32,
                                nullptr) == FP4_ERR_MISALIGNED);
  CHECK(message().find("aligned") != std::string::npos);
  void* oddOut = reinterpret_cast<uint8_t*>(y.data()) + 2;
  CHECK(fp4_fake_quantize_typed(&nv, h.data(), FP4_DTYPE_BF16, 1, 32, -1, oddOut, FP4_DTYPE_F32,
                                nullptr) == FP4_ERR_MISALIGNED);
  // BF16 to fp32 in the same buffer would overwrite inputs not read yet.
  std::vector<float> both(64, 0.0f);
  CHECK(fp4_fake_quantize_typed(&nv, both.data(), FP4_DTYPE_BF16, 1, 64, -1, both.data(),
                                FP4_DTYPE_F32, nullptr) == FP4_ERR_ARGUMENT);
  CHECK(message().find("overlaps") != std::string::npos);
  CHECK(fp4_fake_quantize_typed(&nv, x.data(), FP4_DTYPE_F32, 1, 64, -1, x.data() + 16,
                                FP4_DTYPE_BF16, nullptr) == FP4_ERR_ARGUMENT);
  // Nothing was written by any of them.
  CHECK(std::all_of(y.begin(), y.end(), [](float v) { return v == 0.0f; }));
  CHECK(std::all_of(both.begin(), both.end(), [](float v) { return v == 0.0f; }));
  CHECK(std::all_of(x.begin(), x.end(), [](float v) { return v == 1.0f; }));
}

TEST_CASE("Empty tensors are fine and touch nothing", "[api]") {
  fp4_config nv = fp4_default_config(FP4_FORMAT_NVFP4);
  fp4_error_stats stats;
  stats.count = 99;
  float s2 = 0;
  CHECK(fp4_quantize(&nv, nullptr, 0, 16, -1, nullptr, nullptr, &s2) == FP4_OK);
  CHECK(s2 == 1.0f);
  CHECK(fp4_fake_quantize(&nv, nullptr, 5, 0, -1, nullptr, &stats, nullptr, nullptr) == FP4_OK);
  CHECK(stats.count == 0);
  CHECK(fp4_tensor_amax(nullptr, 0) == 0.0f);
}

TEST_CASE("Fake quantization may run in place", "[api]") {
  for (fp4_format f : {FP4_FORMAT_MXFP4, FP4_FORMAT_NVFP4}) {
    fp4_config cfg = fp4_default_config(f);
    std::vector<float> x = makeData(Distribution::Normal, 7, 128, 1), expected(x.size());
    REQUIRE(fp4_fake_quantize(&cfg, x.data(), 7, 128, -1, expected.data(), nullptr, nullptr,
                              nullptr) == FP4_OK);
    REQUIRE(fp4_fake_quantize(&cfg, x.data(), 7, 128, -1, x.data(), nullptr, nullptr, nullptr) ==
            FP4_OK);
    CHECK(sameBits(x, expected));
  }
}

TEST_CASE("Backend selection: reference can be forced, unknown ones are refused", "[api]") {
  fp4_backend before = fp4_get_backend();
  REQUIRE(fp4_set_backend(FP4_BACKEND_REFERENCE) == FP4_OK);
  CHECK(fp4_get_backend() == FP4_BACKEND_REFERENCE);
  CHECK(std::string(fp4_backend_name(fp4_get_backend())) == "reference");
  CHECK(fp4_set_backend(fp4_backend(42)) == FP4_ERR_UNAVAILABLE);
  CHECK(fp4_get_backend() == FP4_BACKEND_REFERENCE);
  REQUIRE(fp4_set_backend(FP4_BACKEND_AUTO) == FP4_OK);
  CHECK(fp4_get_backend() != FP4_BACKEND_REFERENCE);
  CHECK(fp4_backend_available(FP4_BACKEND_GENERIC));
  fp4_set_backend(before);
}

TEST_CASE("Buffer sizes and the NVFP4 global scale", "[api]") {
  CHECK(fp4_block_size(FP4_FORMAT_MXFP4) == 32);
  CHECK(fp4_block_size(FP4_FORMAT_NVFP4) == 16);
  CHECK(fp4_packed_bytes(3, 64) == 96);
  CHECK(fp4_scale_count(FP4_FORMAT_MXFP4, 3, 64) == 6);
  CHECK(fp4_scale_count(FP4_FORMAT_NVFP4, 3, 64) == 12);
  CHECK(fp4_nvfp4_global_scale(2688.0f) == 1.0f);
  CHECK(fp4_nvfp4_global_scale(0.0f) == 1.0f);
  std::vector<float> x = {1.0f, -5.0f, NAN, INFINITY, 2.0f};
  CHECK(fp4_tensor_amax(x.data(), 5) == 5.0f);
}

TEST_CASE("Derived statistics follow their definitions", "[api]") {
  fp4_error_stats s;
  fp4_stats_clear(&s);
  s.count = 4;
  s.sum_x2 = 100;
  s.sum_err2 = 1;
  s.sum_xq = 99;
  s.sum_q2 = 99;
  s.clipped = 1;
  s.flushed = 2;
  CHECK(fp4_stats_mse(&s) == Approx(0.25));
  CHECK(fp4_stats_rel_l2(&s) == Approx(0.1));
  CHECK(fp4_stats_sqnr_db(&s) == Approx(20.0));
  CHECK(fp4_stats_cosine(&s) == Approx(99 / std::sqrt(100.0 * 99)));
  CHECK(fp4_stats_clip_fraction(&s) == Approx(0.25));
  CHECK(fp4_stats_zero_fraction(&s) == Approx(0.5));
  fp4_error_stats t = s;
  fp4_stats_merge(&t, &s);
  CHECK(t.count == 8);
  CHECK(fp4_stats_sqnr_db(&t) == Approx(20.0));
}

TEST_CASE("NVFP4 amaxes in compressed-tensors' reciprocal form: read back, and made exportable",
          "[api]") {
  std::mt19937 rng(20261202);
  std::uniform_real_distribution<float> exponent(-20.0f, 20.0f);
  int ambiguous = 0;
  for (int i = 0; i < 20000; ++i) {
    const float amax = std::exp2(exponent(rng));
    const float g = 2688.0f / amax;
    const float back = fp4_nvfp4_amax_from_reciprocal(g);
    REQUIRE(std::isfinite(back));
    CHECK(2688.0f / back == g);  // an amax of that g, whichever
    ambiguous += back != amax;
    // The exportable amax: at most a few ulps up, and exactly what the reciprocal reads back.
    const float e = fp4_nvfp4_exportable_amax(amax);
    CHECK(e >= amax);
    CHECK(e <= std::nextafter(std::nextafter(std::nextafter(amax, INFINITY), INFINITY), INFINITY));
    CHECK(fp4_nvfp4_amax_from_reciprocal(2688.0f / e) == e);
    CHECK(fp4_nvfp4_exportable_amax(e) == e);
  }
  // About one g in seven is reached by two amaxes (the case the exportable amax avoids).
  CHECK(ambiguous > 20000 / 14);
  CHECK(ambiguous < 20000 / 4);
  CHECK(fp4_nvfp4_amax_from_reciprocal(1.0f) == 2688.0f);
  CHECK(std::isnan(fp4_nvfp4_amax_from_reciprocal(0.0f)));
  CHECK(std::isnan(fp4_nvfp4_amax_from_reciprocal(-1.0f)));
  CHECK(fp4_nvfp4_exportable_amax(0.0f) == 0.0f);
}
