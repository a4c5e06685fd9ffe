// The semantics of fp4-numerics.md on hand-made blocks whose answers are worked out by hand,
// checked on every backend (reference included), plus the edge cases: zeros, -0.0, denormals,
// huge values, NaN/Inf.
#include <catch2/catch.hpp>

#include <cfloat>

#include "fp4lab/kernels/formats.h"
#include "kernel_fixtures.h"

using namespace fp4test;

namespace {

std::vector<fp4_backend> allBackends() {
  std::vector<fp4_backend> out;
  for (fp4_backend b :
       {FP4_BACKEND_REFERENCE, FP4_BACKEND_GENERIC, FP4_BACKEND_AVX2, FP4_BACKEND_AVX512})
    if (fp4_backend_available(b)) out.push_back(b);
  return out;
}

uint8_t codeAt(const Outputs& o, size_t i) {
  return (i % 2 == 0) ? (o.codes[i / 2] & 0x0F) : (o.codes[i / 2] >> 4);
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

}  // namespace

TEST_CASE("MXFP4 hand-worked block, ceil and floor", "[reference][mxfp4]") {
  for (fp4_backend b : allBackends()) {
    BackendScope scope(b);
    INFO("backend " << fp4_backend_name(b));
    std::vector<float> x(32, 0.0f);
    x[0] = 12.0f;  // amax: ceil gives e = 1 (6 * 2 = 12)
    x[1] = -1.0f;  // -0.5 -> code 0x9
    x[2] = 0.5f;   // 0.25: tie -> 0
    x[3] = 2.5f;   // 1.25: tie -> 1.0 -> 2.0
    x[4] = 7.0f;   // 3.5: tie -> 4 -> 8.0
    x[5] = -0.0f;  // keeps its sign
    fp4_config cfg = fp4_default_config(FP4_FORMAT_MXFP4);
    Outputs o = runAll(cfg, x, 1, 32);
    REQUIRE(o.quantizeStatus == FP4_OK);
    CHECK(o.scales[0] == 128);
    CHECK(codeAt(o, 0) == 0x7);
    CHECK(codeAt(o, 1) == 0x9);
    CHECK(codeAt(o, 2) == 0x0);
    CHECK(codeAt(o, 3) == 0x2);
    CHECK(codeAt(o, 4) == 0x6);
    CHECK(codeAt(o, 5) == 0x8);
    CHECK(o.fake[0] == 12.0f);
    CHECK(o.fake[1] == -1.0f);
    CHECK(o.fake[2] == 0.0f);
    CHECK(o.fake[3] == 2.0f);
    CHECK(o.fake[4] == 8.0f);
    CHECK(bits(o.fake[5]) == 0x80000000u);
    CHECK(o.stats.clipped == 0);
    CHECK(o.stats.flushed == 1);  // 0.5 became 0
    CHECK(o.stats.count == 32);
    CHECK(o.stats.max_abs_err == 1.0);  // 7 -> 8

    // amax 13: ceil takes e = 2 and never clips; floor takes e = 1 and clips 6.5 to 6.
    x[0] = 13.0f;
    o = runAll(cfg, x, 1, 32);
    CHECK(o.scales[0] == 129);
    CHECK(o.fake[0] == 12.0f);  // 13 / 4 = 3.25 -> 3 -> 12
    CHECK(o.stats.clipped == 0);
    cfg.scale_rule = FP4_SCALE_RULE_FLOOR;
    o = runAll(cfg, x, 1, 32);
    CHECK(o.scales[0] == 128);
    CHECK(o.fake[0] == 12.0f);  // 6.5 saturates to 6
    CHECK(o.stats.clipped == 1);
  }
}

TEST_CASE("NVFP4 hand-worked tensor: global scale, E4M3 block scales, underflow",
          "[reference][nvfp4]") {
  for (fp4_backend b : allBackends()) {
    BackendScope scope(b);
    INFO("backend " << fp4_backend_name(b));
    std::vector<float> x(64, 0.0f);
    x[0] = 2688.0f;  // tensor amax: s2 = 1, this block's scale = 448 (0x7E)
    x[1] = 448.0f;   // 448 / 448 = 1 -> code 2
    x[16] = 6.0f;    // block 1: amax 6 -> scale 1.0 (0x38)
    x[17] = -2.9f;   // -> -3
    x[18] = 0.3f;    // -> 0.5
    x[32] = 0.001f;  // block 2: 0.001 / 6 is below half the smallest subnormal: scale 0
    // block 3 stays all zero: scale 0
    fp4_config cfg = fp4_default_config(FP4_FORMAT_NVFP4);
    Outputs o = runAll(cfg, x, 1, 64);
    REQUIRE(o.quantizeStatus == FP4_OK);
    CHECK(o.globalScale == 1.0f);
    CHECK(o.scales[0] == 0x7E);
    CHECK(o.scales[1] == 0x38);
    CHECK(o.scales[2] == 0x00);
    CHECK(o.scales[3] == 0x00);
    CHECK(codeAt(o, 0) == 0x7);
    CHECK(codeAt(o, 1) == 0x2);
    CHECK(codeAt(o, 16) == 0x7);
    CHECK(codeAt(o, 17) == 0xD);
    CHECK(codeAt(o, 18) == 0x1);
    CHECK(codeAt(o, 32) == 0x0);
    CHECK(o.fake[0] == 2688.0f);
    CHECK(o.fake[1] == 448.0f);
    CHECK(o.fake[17] == -3.0f);
    CHECK(o.fake[18] == 0.5f);
    CHECK(o.fake[32] == 0.0f);
    CHECK(o.stats.flushed == 1);

    // A calibrated amax: s2 = 1344 / 2688 = 0.5 is what ModelOpt's weight_scale_2 would hold.
    o = runAll(cfg, x, 1, 64, 1344.0f);
    CHECK(o.globalScale == 0.5f);
    CHECK(o.scales[0] == 0x7E);   // 2688 / 3 saturates to 448
    CHECK(o.fake[0] == 1344.0f);  // clipped to 6 * 448 * 0.5
    CHECK(o.stats.clipped >= 1);
  }
}

TEST_CASE("All-zero tensors and blocks", "[reference][edge]") {
  for (fp4_backend b : allBackends()) {
    BackendScope scope(b);
    std::vector<float> x(96, 0.0f);
    Outputs nv = runAll(fp4_default_config(FP4_FORMAT_NVFP4), x, 2, 48);
    CHECK(nv.globalScale == 1.0f);
    for (uint8_t s : nv.scales) CHECK(s == 0);
    for (uint8_t c : nv.codes) CHECK(c == 0);
    for (float v : nv.fake) CHECK(bits(v) == 0u);
    CHECK(std::isnan(fp4_stats_sqnr_db(&nv.stats)));  // undefined, not a crash
    Outputs mx = runAll(fp4_default_config(FP4_FORMAT_MXFP4), x, 3, 32);
    for (uint8_t s : mx.scales) CHECK(s == 0);  // 2^-127
    for (float v : mx.fake) CHECK(bits(v) == 0u);
  }
}

TEST_CASE("Denormal inputs, huge values and FLT_MAX", "[reference][edge]") {
  for (fp4_backend b : allBackends()) {
    BackendScope scope(b);
    INFO("backend " << fp4_backend_name(b));
    std::vector<float> x(32);
    for (int i = 0; i < 32; ++i) x[size_t(i)] = float(i - 16) * 1e-42f;  // subnormals
    for (fp4_format f : {FP4_FORMAT_MXFP4, FP4_FORMAT_NVFP4}) {
      Outputs o = runAll(fp4_default_config(f), x, 1, 32);
      REQUIRE(o.fakeStatus == FP4_OK);
      for (float v : o.fake) CHECK(std::isfinite(v));
      CHECK(o.stats.nonfinite == 0);
    }
    // NVFP4 is scale invariant in its global scale: subnormal tensors keep their shape.
    Outputs nv = runAll(fp4_default_config(FP4_FORMAT_NVFP4), x, 1, 32);
    CHECK(fp4_stats_sqnr_db(&nv.stats) > 10.0);

    std::vector<float> big(32, 1.0f);
    big[0] = FLT_MAX;
    big[1] = -3e38f;
    Outputs mx = runAll(fp4_default_config(FP4_FORMAT_MXFP4), big, 1, 32);
    REQUIRE(mx.fakeStatus == FP4_OK);
    CHECK(mx.scales[0] == 126 + 127);
    CHECK(std::isinf(mx.fake[0]));  // 4 * 2^126 overflows, as the spec warns
    Outputs nvBig = runAll(fp4_default_config(FP4_FORMAT_NVFP4), big, 1, 32);
    CHECK(std::isfinite(nvBig.fake[0]));
  }
}

TEST_CASE("NaN and Inf poison only their own block", "[reference][edge]") {
  for (fp4_backend b : allBackends()) {
    BackendScope scope(b);
    INFO("backend " << fp4_backend_name(b));
    for (fp4_format f : {FP4_FORMAT_MXFP4, FP4_FORMAT_NVFP4}) {
      int block = fp4_block_size(f);
      std::vector<float> x = makeData(Distribution::Normal, 1, 4 * block, 3);
      x[size_t(block + 3)] = NAN;
      x[size_t(2 * block)] = INFINITY;
      Outputs o = runAll(fp4_default_config(f), x, 1, 4 * block);
      REQUIRE(o.fakeStatus == FP4_OK);
      uint8_t nanScale = f == FP4_FORMAT_MXFP4 ? 0xFF : 0x7F;
      CHECK(o.scales[0] != nanScale);
      CHECK(o.scales[1] == nanScale);
      CHECK(o.scales[2] == nanScale);
      CHECK(o.scales[3] != nanScale);
      for (int i = 0; i < block; ++i) {
        CHECK(std::isfinite(o.fake[size_t(i)]));
        CHECK(std::isnan(o.fake[size_t(block + i)]));
        CHECK(std::isnan(o.fake[size_t(2 * block + i)]));
        CHECK(std::isfinite(o.fake[size_t(3 * block + i)]));
      }
      CHECK(o.stats.nonfinite == 2);
      CHECK(o.stats.count == 2 * block);
      CHECK(std::isfinite(o.stats.sum_err2));
      if (f == FP4_FORMAT_NVFP4) CHECK(std::isfinite(o.globalScale));  // amax skips NaN/Inf
    }
  }
}

TEST_CASE("Scale rules and formats behave as published on normal data", "[reference][quality]") {
  std::vector<float> x = makeData(Distribution::Normal, 64, 1024, 11);
  fp4_config ceil = fp4_default_config(FP4_FORMAT_MXFP4);
  fp4_config floor = ceil;
  floor.scale_rule = FP4_SCALE_RULE_FLOOR;
  Outputs c = runAll(ceil, x, 64, 1024), f = runAll(floor, x, 64, 1024);
  Outputs nv = runAll(fp4_default_config(FP4_FORMAT_NVFP4), x, 64, 1024);
  CHECK(c.stats.clipped == 0);  // ceil never clips
  CHECK(f.stats.clipped > 0);   // floor clips block maxima in (6, 8) * 2^e
  double sqnrMx = fp4_stats_sqnr_db(&c.stats), sqnrNv = fp4_stats_sqnr_db(&nv.stats);
  INFO("MXFP4 SQNR " << sqnrMx << " dB, NVFP4 SQNR " << sqnrNv << " dB");
  CHECK(sqnrMx > 12.0);
  CHECK(sqnrNv > sqnrMx + 1.0);  // finer blocks, finer scales
  CHECK(fp4_stats_cosine(&nv.stats) > 0.99);
  CHECK(fp4_stats_rel_l2(&nv.stats) < 0.15);
}

TEST_CASE("NVFP4 2-D tiles share one scale per 16x16 tile", "[reference][nvfp4]") {
  for (fp4_backend b : allBackends()) {
    BackendScope scope(b);
    std::vector<float> x = makeData(Distribution::HeavyTailed, 35, 64, 21);
    fp4_config cfg = fp4_default_config(FP4_FORMAT_NVFP4);
    cfg.nvfp4_2d_blocks = 1;
    Outputs o = runAll(cfg, x, 35, 64);
    REQUIRE(o.quantizeStatus == FP4_OK);
    for (int r = 0; r < 35; ++r)
      for (int blk = 0; blk < 4; ++blk)
        CHECK(o.scales[size_t(r * 4 + blk)] == o.scales[size_t((r - r % 16) * 4 + blk)]);
    // A tile scale is the block scale of the tile's amax.
    float tileAmax = 0;
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 16; ++c) tileAmax = std::max(tileAmax, std::fabs(x[size_t(r * 64 + c)]));
    CHECK(o.scales[0] == fp4lab::e4m3EncodeScale(tileAmax / (6.0f * o.globalScale)));
  }
}

TEST_CASE("Far-out values saturate to 6 and a tiny tensor amax never gives a zero scale",
          "[reference][edge]") {
  for (fp4_backend b : allBackends()) {
    BackendScope scope(b);
    INFO("backend " << fp4_backend_name(b));
    // A calibrated amax of 1 for data near 1e10: every element is beyond 2^25 x its block scale,
    // where fp32 distances to 4 and 6 round equal; the spec still says saturate to 6.
    std::vector<float> x(32);
    for (int i = 0; i < 32; ++i) x[size_t(i)] = (i % 2 ? -1.0f : 1.0f) * (1e10f + float(i));
    Outputs o = runAll(fp4_default_config(FP4_FORMAT_NVFP4), x, 1, 32, 1.0f);
    REQUIRE(o.quantizeStatus == FP4_OK);
    for (int i = 0; i < 32; ++i) CHECK(codeAt(o, size_t(i)) == (i % 2 ? 0xF : 0x7));
    CHECK(o.stats.clipped == 32);

    // amax / 2688 underflows to 0 for amax < ~3.8e-42: the global scale is the smallest subnormal.
    std::vector<float> tiny(16, 0.0f);
    tiny[3] = 1e-43f;
    Outputs t = runAll(fp4_default_config(FP4_FORMAT_NVFP4), tiny, 1, 16);
    REQUIRE(t.quantizeStatus == FP4_OK);
    CHECK(t.globalScale > 0.0f);
    for (float v : t.fake) CHECK(std::isfinite(v));
  }
}
