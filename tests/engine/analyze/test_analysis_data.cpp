// Tests for the analysis data beyond the statistics (fp4lab_analyze): per-block errors, scale-code,
// block-amax and weight histograms, outlier counts, against the kernels' own outputs and the
// reference path's quantize/dequantize on random F32 tensors of several shapes; a planted outlier;
// the HDF5 analysis file (round trip through readAnalysisFile, the same /quant reader as run logs,
// and an independent reading with HDF5's C API); bad output paths and files; the sensitivity file
// in both encodings.
#include <catch2/catch.hpp>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "../temp_dir.h"
#include "fp4lab/analyze/analyze.h"
#include "fp4lab/analyze/sensitivity_file.h"
#include "fp4lab/common/files.h"
#include "fp4lab/error.h"
#include "fp4lab/io/safetensors.h"
#include "fp4lab/kernels/fp4.h"
#include "fp4lab/log/run_log.h"

namespace an = fp4lab::analyze;
using fp4lab::io::SafetensorsWriter;

namespace {

struct Tensor {
  std::string module;
  int64_t rows, cols;
  std::vector<float> w;
};

// Unfused module names (no shared NVFP4 group scale), shapes whose columns are multiples of 32
// and rows multiples of 16 (so every format measures them), random scales per tensor.
std::vector<Tensor> randomTensors(uint32_t seed) {
  std::mt19937 rng(seed);
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{16, 32},  {48, 64},   {32, 96},
                                                           {80, 160}, {144, 256}, {16, 512}};
  std::vector<Tensor> out;
  for (size_t i = 0; i < shapes.size(); ++i) {
    Tensor t{"model.layers." + std::to_string(i) + ".mlp.down_proj",
             shapes[i].first,
             shapes[i].second,
             {}};
    const float sigma = std::ldexp(1.0f, -int(rng() % 12));  // 1 .. 2^-11
    std::normal_distribution<float> normal(0.0f, sigma);
    std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
    t.w.resize(size_t(t.rows * t.cols));
    for (float& v : t.w) {
      v = normal(rng);
      const float u = uniform(rng);
      if (u < 0.01f)
        v *= 40.0f;  // heavy tail
      else if (u < 0.02f)
        v = 0.0f;  // exact zeros
      else if (u < 0.025f)
        v = -0.0f;  // negative zeros
      else if (u < 0.03f)
        v *= 1e-6f;  // tiny values (histogram underflow bins)
    }
    if (i == 2)  // an all-zero row of blocks
      std::fill(t.w.begin(), t.w.begin() + t.cols, 0.0f);
    out.push_back(std::move(t));
  }
  return out;
}

void writeFolder(const std::string& dir, const std::vector<Tensor>& tensors) {
  fp4lab::files::createDirectories(dir);
  SafetensorsWriter w;
  for (const Tensor& t : tensors) w.addFloat32(t.module + ".weight", {t.rows, t.cols}, t.w);
  w.write(fp4lab::files::join(dir, "model.safetensors"));
  fp4lab::files::writeFileAtomically(fp4lab::files::join(dir, "config.json"),
                                     "{\"model_type\": \"llama\"}");
}

struct Quantized {
  std::vector<float> y;
  std::vector<uint8_t> scales;
  float global = 1.0f;
};

// The reference path's quantize + dequantize.
Quantized referenceQuantize(const fp4_config& cfg, const Tensor& t, float tensorAmax) {
  REQUIRE(fp4_set_backend(FP4_BACKEND_REFERENCE) == FP4_OK);
  Quantized q;
  std::vector<uint8_t> codes(size_t(fp4_packed_bytes(t.rows, t.cols)));
  q.scales.resize(size_t(fp4_scale_count(cfg.format, t.rows, t.cols)));
  REQUIRE(fp4_quantize(&cfg, t.w.data(), t.rows, t.cols, tensorAmax, codes.data(), q.scales.data(),
                       &q.global) == FP4_OK);
  q.y.resize(t.w.size());
  REQUIRE(fp4_dequantize(&cfg, codes.data(), q.scales.data(), q.global, t.rows, t.cols,
                         q.y.data()) == FP4_OK);
  REQUIRE(fp4_set_backend(FP4_BACKEND_AUTO) == FP4_OK);
  return q;
}

// The bin of a magnitude by the documented rule, with std::log2 (not the library's bit tricks).
int binOf(const an::LogBins& b, double v) {
  v = std::fabs(v);
  if (std::isnan(v)) return b.size() - 1;
  if (v == 0) return 0;
  if (v >= std::ldexp(1.0, b.maxExp)) return b.size() - 2;
  if (v < std::ldexp(1.0, b.minExp)) return 1;
  return 2 + int(std::floor((std::log2(v) - b.minExp) * b.binsPerOctave));
}

int64_t sum(const std::vector<int64_t>& v) {
  int64_t s = 0;
  for (int64_t x : v) s += x;
  return s;
}

}  // namespace

TEST_CASE("log bins follow their documented edges", "[analyze][histogram]") {
  for (const an::LogBins* b : {&an::weightBins(), &an::amaxRatioBins()}) {
    CHECK(b->size() == (b->maxExp - b->minExp) * b->binsPerOctave + 4);
    CHECK(b->index(0.0f) == 0);
    CHECK(b->index(-0.0f) == 0);
    CHECK(b->index(std::ldexp(1.0f, b->minExp - 1)) == 1);
    CHECK(b->index(std::ldexp(1.0f, b->minExp)) == 2);
    CHECK(b->index(std::ldexp(1.0f, b->maxExp)) == b->size() - 2);
    CHECK(b->index(INFINITY) == b->size() - 2);
    CHECK(b->index(NAN) == b->size() - 1);
    CHECK(std::isnan(b->lowerEdge(b->size() - 1)));
    for (int i = 2; i <= b->size() - 2; ++i) {
      const double want = std::exp2(b->minExp + double(i - 2) / b->binsPerOctave);
      CHECK(b->lowerEdge(i) == Approx(want).epsilon(1e-7));
      // An edge belongs to its own bin, the float just below it to the bin before.
      const float edge = float(b->lowerEdge(i));
      CHECK(b->index(edge) == i);
      CHECK(b->index(std::nextafter(edge, 0.0f)) == i - 1);
    }
  }
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> logs(-30, 12);
  int mismatches = 0;
  for (int i = 0; i < 20000; ++i) {
    const float v = float(std::exp2(logs(rng)));
    mismatches += an::weightBins().index(v) != binOf(an::weightBins(), v);
  }
  CHECK(mismatches == 0);
}

TEST_CASE("per-block errors and histograms equal the kernels' and the reference's",
          "[analyze][blocks][histogram]") {
  const uint32_t seed = GENERATE(1u, 2u, 3u);
  INFO("seed " << seed);
  fp4lab::testing::TempDir dir;
  const std::vector<Tensor> tensors = randomTensors(seed);
  writeFolder(dir.path.string(), tensors);
  an::Options o;
  o.modelDir = dir.path.string();
  o.threads = 2;
  const an::Analysis a = an::analyzeModel(o);
  REQUIRE(a.layers.size() == tensors.size());
  const size_t F = a.formats.size();
  REQUIRE(F == 4);

  for (size_t l = 0; l < tensors.size(); ++l) {
    const Tensor& t = tensors[l];
    REQUIRE(a.layers[l].module == t.module);
    // The weight histogram, by the documented rule, and the outlier counts.
    const an::LayerOutliers& out = a.outliers[l];
    const an::LogBins& wb = an::weightBins();
    std::vector<int64_t> neg(size_t(wb.size()), 0), pos(size_t(wb.size()), 0);
    double s2 = 0;
    for (float v : t.w) {
      (std::signbit(v) ? neg : pos)[size_t(binOf(wb, v))]++;
      s2 += double(v) * v;
    }
    CHECK(out.negative == neg);
    CHECK(out.positive == pos);
    CHECK(sum(out.negative) + sum(out.positive) == t.rows * t.cols);
    const double rms = std::sqrt(s2 / double(t.w.size()));
    CHECK(out.rms == Approx(rms).epsilon(1e-12));
    int64_t n3 = 0, n6 = 0, n10 = 0;
    for (float v : t.w) {
      const double m = std::fabs(double(v));
      n3 += m > 3 * rms, n6 += m > 6 * rms, n10 += m > 10 * rms;
    }
    CHECK(out.over3 == n3);
    CHECK(out.over6 == n6);
    CHECK(out.over10 == n10);

    for (size_t f = 0; f < F; ++f) {
      const an::Entry& e = a.entries[l * F + f];
      INFO(t.module << " " << t.rows << "x" << t.cols << " " << e.format);
      REQUIRE(e.measured);
      const fp4_config cfg = an::formatConfig(e.format);
      const bool nv = cfg.format == FP4_FORMAT_NVFP4;
      const int64_t block = fp4_block_size(cfg.format), blocks = t.rows * t.cols / block;
      const float tensorAmax = fp4_tensor_amax(t.w.data(), int64_t(t.w.size()));
      CHECK(e.tensorAmax == tensorAmax);

      // The kernels' own fused pass on the same tensor (the fastest backend).
      std::vector<float> sq(static_cast<size_t>(blocks)), bamax(static_cast<size_t>(blocks));
      fp4_error_stats ks;
      REQUIRE(fp4_fake_quantize(&cfg, t.w.data(), t.rows, t.cols, nv ? tensorAmax : -1.0f, nullptr,
                                &ks, sq.data(), bamax.data()) == FP4_OK);
      CHECK(std::memcmp(&ks, &e.stats, sizeof ks) == 0);
      REQUIRE(e.blockMse.size() == size_t(blocks));
      for (int64_t b = 0; b < blocks; ++b) REQUIRE(e.blockMse[size_t(b)] == sq[size_t(b)] / block);

      // The reference path: per-block MSE from quantize + dequantize, the scale codes it wrote.
      const Quantized q = referenceQuantize(cfg, t, nv ? tensorAmax : -1.0f);
      std::vector<int64_t> scaleHist(256, 0);
      for (uint8_t s : q.scales) scaleHist[s]++;
      CHECK(e.scaleHist == scaleHist);
      CHECK(e.blockCount() == blocks);
      CHECK(sum(e.amaxHist) == blocks);
      const int64_t perRow = t.cols / block;
      int64_t worse = 0;
      for (int64_t b = 0; b < blocks; ++b) {
        double err2 = 0;
        for (int64_t i = 0; i < block; ++i) {
          const size_t k = size_t(b * block + i);
          err2 += (double(t.w[k]) - q.y[k]) * (double(t.w[k]) - q.y[k]);
        }
        const double want = err2 / double(block);
        worse += std::fabs(e.blockMse[size_t(b)] - want) > 1e-6 * want + 1e-30;
      }
      CHECK(worse == 0);

      // Block amax / tensor amax from the weights themselves (tiles of 16 rows for nvfp4-2d).
      std::vector<int64_t> amaxHist(size_t(an::amaxRatioBins().size()), 0);
      for (int64_t r = 0; r < t.rows; ++r)
        for (int64_t c = 0; c < perRow; ++c) {
          int64_t r0 = r, r1 = r + 1;
          if (cfg.nvfp4_2d_blocks) r0 = r - r % 16, r1 = r0 + 16;
          float m = 0;
          for (int64_t rr = r0; rr < r1; ++rr)
            for (int64_t i = 0; i < block; ++i)
              m = std::max(m, std::fabs(t.w[size_t(rr * t.cols + c * block + i)]));
          amaxHist[size_t(binOf(an::amaxRatioBins(), double(m / tensorAmax)))]++;
        }
      CHECK(e.amaxHist == amaxHist);
      CHECK(e.amaxHist.back() == 0);                                   // no NaN blocks
      CHECK(e.amaxHist[size_t(an::amaxRatioBins().size() - 2)] >= 1);  // the tensor's amax block
    }
  }
  // The all-zero row of layer 2: zero-amax blocks, E8M0 code 0 (2^-127), E4M3 code 0.
  for (size_t f = 0; f < F; ++f) {
    const an::Entry& e = a.entries[2 * F + f];
    if (e.format == "nvfp4-2d") continue;  // its tile also holds the next 15 rows
    CHECK(e.amaxHist[0] >= tensors[2].cols / fp4_block_size(an::formatConfig(e.format).format));
    CHECK(e.scaleHist[0] >= 1);
  }
}

TEST_CASE("a planted outlier shows in the outlier counts and in its block", "[analyze][outlier]") {
  fp4lab::testing::TempDir dir;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  Tensor t{"model.layers.0.self_attn.o_proj", 64, 128, std::vector<float>(64 * 128)};
  for (float& v : t.w) v = std::clamp(normal(rng), -0.08f, 0.08f);  // nothing beyond 4 sigma
  const int64_t row = 37, col = 85;
  t.w[size_t(row * t.cols + col)] = -1.0f;
  writeFolder(dir.path.string(), {t});
  an::Options o;
  o.modelDir = dir.path.string();
  const an::Analysis a = an::analyzeModel(o);
  REQUIRE(a.layers.size() == 1);
  CHECK(a.outliers[0].over10 == 1);
  CHECK(a.outliers[0].over6 == 1);
  CHECK(a.outliers[0].amax == 1.0f);
  // The outlier's magnitude bin: [2^0, 2^0.25) of the negative half.
  CHECK(a.outliers[0].negative[size_t(an::weightBins().index(1.0f))] == 1);
  for (const an::Entry& e : a.entries) {
    INFO(e.format);
    const int64_t block = fp4_block_size(an::formatConfig(e.format).format);
    const int64_t perRow = t.cols / block, expected = row * perRow + col / block;
    const auto worst = std::max_element(e.blockMse.begin(), e.blockMse.end()) - e.blockMse.begin();
    if (e.format == "nvfp4-2d") {
      // The tile's 16 rows share the outlier's scale: the worst block is in its tile.
      CHECK(worst / perRow / 16 == row / 16);
      CHECK(worst % perRow == col / block);
    } else {
      CHECK(worst == expected);
      // Far above the median block.
      std::vector<float> sorted = e.blockMse;
      std::nth_element(sorted.begin(), sorted.begin() + long(sorted.size() / 2), sorted.end());
      CHECK(e.blockMse[size_t(expected)] > 10 * sorted[sorted.size() / 2]);
    }
    // Exactly one block holds the tensor amax (ratio 1, the top bin); nvfp4-2d: the 16 of its tile.
    CHECK(e.amaxHist[size_t(an::amaxRatioBins().size() - 2)] == (e.format == "nvfp4-2d" ? 16 : 1));
  }
  const nlohmann::json j = nlohmann::json::parse(an::toJson(a));
  CHECK(j["layers"][0]["worst_block"] == row * (t.cols / 32) + col / 32);
  CHECK(j["layers"][0]["outliers_10rms"] == 1);
  CHECK(j["layers"][0]["blocks"] == 64 * 128 / 32);
}

namespace {

// The independent reading: HDF5's C API, nothing of fp4lab.
std::vector<hsize_t> rawDims(hid_t file, const char* name) {
  hid_t ds = H5Dopen2(file, name, H5P_DEFAULT);
  REQUIRE(ds >= 0);
  hid_t space = H5Dget_space(ds);
  const int rank = H5Sget_simple_extent_ndims(space);
  std::vector<hsize_t> dims(size_t(std::max(rank, 0)));
  H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  H5Sclose(space);
  H5Dclose(ds);
  return dims;
}

template <typename T>
std::vector<T> rawRead(hid_t file, const char* name, hid_t type, size_t n) {
  std::vector<T> out(n);
  hid_t ds = H5Dopen2(file, name, H5P_DEFAULT);
  REQUIRE(ds >= 0);
  REQUIRE(H5Dread(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) >= 0);
  H5Dclose(ds);
  return out;
}

bool sameFloat(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || a == b;
}

std::vector<std::string> leftovers(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename().string().find(".tmp-") != std::string::npos)
      out.push_back(e.path().string());
  return out;
}

}  // namespace

TEST_CASE("the analysis file round-trips and reads like a run log's /quant", "[analyze][hdf5]") {
  fp4lab::testing::TempDir dir;
  std::vector<Tensor> tensors = randomTensors(7);
  tensors[1].cols = 40, tensors[1].w.resize(size_t(48 * 40));  // not a multiple of 16: unmeasured
  tensors[3].w[5] = NAN;  // a NaN block: NaN block MSE, the NaN scale code, the NaN amax bin
  writeFolder(dir.file("model"), tensors);
  an::Options o;
  o.modelDir = dir.file("model");
  const an::Analysis a = an::analyzeModel(o);
  const std::string path = dir.file("analysis.h5");
  an::writeAnalysisFile(a, path);
  CHECK(leftovers(dir.path.string()).empty());

  // Through the library's reader: the same structs, bit for bit.
  const an::Analysis b = an::readAnalysisFile(path);
  CHECK(b.modelDir == a.modelDir);
  CHECK(b.formats == a.formats);
  CHECK(b.threads == a.threads);
  CHECK(b.seconds == a.seconds);
  REQUIRE(b.layers.size() == a.layers.size());
  for (size_t l = 0; l < a.layers.size(); ++l) {
    CHECK(b.layers[l].module == a.layers[l].module);
    CHECK(b.layers[l].tensor == a.layers[l].tensor);
    CHECK(b.layers[l].rows == a.layers[l].rows);
    CHECK(b.layers[l].cols == a.layers[l].cols);
    CHECK(b.outliers[l].amax == a.outliers[l].amax);
    CHECK(b.outliers[l].rms == a.outliers[l].rms);
    CHECK(b.outliers[l].over3 == a.outliers[l].over3);
    CHECK(b.outliers[l].over6 == a.outliers[l].over6);
    CHECK(b.outliers[l].over10 == a.outliers[l].over10);
    CHECK(b.outliers[l].negative == a.outliers[l].negative);
    CHECK(b.outliers[l].positive == a.outliers[l].positive);
  }
  REQUIRE(b.entries.size() == a.entries.size());
  int unmeasured = 0;
  for (size_t i = 0; i < a.entries.size(); ++i) {
    const an::Entry &x = a.entries[i], &y = b.entries[i];
    INFO(a.layers[x.layer].module << " " << x.format);
    CHECK(y.layer == x.layer);
    CHECK(y.format == x.format);
    CHECK(y.measured == x.measured);
    unmeasured += !x.measured;
    CHECK(sameFloat(y.tensorAmax, x.tensorAmax));
    CHECK(std::memcmp(&y.stats, &x.stats, sizeof x.stats) == 0);
    CHECK(y.scaleHist == x.scaleHist);
    CHECK(y.amaxHist == x.amaxHist);
    REQUIRE(y.blockMse.size() == x.blockMse.size());
    for (size_t k = 0; k < x.blockMse.size(); ++k) REQUIRE(sameFloat(y.blockMse[k], x.blockMse[k]));
  }
  CHECK(unmeasured == 4);  // the 40-column layer, in every format
  for (size_t f = 0; f < 4; ++f) {
    const an::Entry& e = a.entries[3 * 4 + f];
    const bool nv = an::formatConfig(e.format).format == FP4_FORMAT_NVFP4;
    CHECK(std::isnan(e.blockMse[0]));
    CHECK(e.scaleHist[nv ? 0x7F : 0xFF] == (e.format == "nvfp4-2d" ? 16 : 1));
    CHECK(e.amaxHist.back() == (e.format == "nvfp4-2d" ? 16 : 1));
    CHECK(e.stats.nonfinite == 1);
  }

  // The /quant reader a run log uses, on /quant/<format>.
  for (size_t f = 0; f < a.formats.size(); ++f) {
    const an::QuantRow q = an::readQuantRow(path, "/quant/" + a.formats[f]);
    CHECK(q.rows == 1);
    CHECK(q.step == 0);
    CHECK(q.metrics == an::metricNames());
    REQUIRE(q.layers.size() == a.layers.size());
    for (size_t l = 0; l < a.layers.size(); ++l) {
      const an::Entry& e = a.entries[l * a.formats.size() + f];
      CHECK(q.layers[l] == a.layers[l].module);
      const std::vector<double> m = an::metricValues(e.stats);
      for (size_t k = 0; k < m.size(); ++k)
        CHECK(sameFloat(q.values[k][l], e.measured ? float(m[k]) : NAN));
      REQUIRE(q.blocks[l].size() == e.blockMse.size());
      CHECK(q.blockRows[l] == (e.blockMse.empty() ? 0 : a.layers[l].rows));
      for (size_t k = 0; k < e.blockMse.size(); ++k)
        REQUIRE(sameFloat(q.blocks[l][k], e.blockMse[k]));
    }
  }
  CHECK_THROWS_AS(an::readQuantRow(path, "/quant/fp8"), fp4lab::Error);
  CHECK_THROWS_AS(an::readQuantRow(path, "/quant/nvfp4", 1), fp4lab::Error);

  // An independent reading with HDF5's C API.
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  REQUIRE(file >= 0);
  const hsize_t L = a.layers.size();
  CHECK(rawDims(file, "/quant/nvfp4/sqnr_db") == std::vector<hsize_t>{1, L});
  const auto sqnr = rawRead<float>(file, "/quant/nvfp4/sqnr_db", H5T_NATIVE_FLOAT, L);
  for (size_t l = 0; l < L; ++l) {
    const an::Entry& e = a.entries[l * 4 + 2];
    REQUIRE(e.format == "nvfp4");
    if (e.measured)
      CHECK(sqnr[l] == Approx(10 * std::log10(e.stats.sum_x2 / e.stats.sum_err2)).epsilon(1e-6));
    else
      CHECK(std::isnan(sqnr[l]));
  }
  const hsize_t W = hsize_t(an::weightBins().size());
  CHECK(rawDims(file, "/analysis/weight_hist") == std::vector<hsize_t>{L, 2, W});
  const auto hist = rawRead<int64_t>(file, "/analysis/weight_hist", H5T_NATIVE_INT64, L * 2 * W);
  for (size_t l = 0; l < L; ++l) {
    int64_t n = 0;
    for (size_t k = 0; k < 2 * W; ++k) n += hist[l * 2 * W + k];
    CHECK(n == a.layers[l].rows * a.layers[l].cols);
  }
  const auto scales =
      rawRead<int64_t>(file, "/analysis/mxfp4/scale_hist", H5T_NATIVE_INT64, L * 256);
  for (size_t l = 0; l < L; ++l)
    CHECK(std::vector<int64_t>(scales.begin() + long(l * 256),
                               scales.begin() + long(l * 256 + 256)) ==
          (a.entries[l * 4].measured ? a.entries[l * 4].scaleHist : std::vector<int64_t>(256, 0)));
  const std::string block0 = "/quant/mxfp4/blocks/0";
  const hsize_t B0 = hsize_t(a.layers[0].rows * a.layers[0].cols / 32);
  CHECK(rawDims(file, block0.c_str()) == std::vector<hsize_t>{1, B0});
  CHECK(rawRead<float>(file, block0.c_str(), H5T_NATIVE_FLOAT, B0) == a.entries[0].blockMse);
  CHECK(H5Lexists(file, "/quant/mxfp4/blocks/1", H5P_DEFAULT) == 0);  // unmeasured: no dataset
  hid_t attr = H5Aopen(file, "schema_version", H5P_DEFAULT);
  REQUIRE(attr >= 0);
  int64_t version = 0;
  REQUIRE(H5Aread(attr, H5T_NATIVE_INT64, &version) >= 0);
  CHECK(version == 1);
  H5Aclose(attr);
  H5Fclose(file);
}

TEST_CASE("one /quant reader serves run logs and analysis files", "[analyze][hdf5]") {
  fp4lab::testing::TempDir dir;
  const std::string path = dir.file("log.h5");
  fp4lab::log::RunLogSchema schema;
  schema.quantLayers = {"model.layers.0.mlp.up_proj", "model.layers.0.mlp.down_proj"};
  schema.quantMetrics = {"rel_l2", "sqnr_db"};
  schema.blocksPerLayer = {4, 0};
  schema.blockRowsPerLayer = {2, 0};
  {
    fp4lab::log::RootAttributes attrs;
    attrs.runId = "r", attrs.recipe = "ptq", attrs.format = "NVFP4";
    auto w = fp4lab::log::RunLogWriter::create(path, attrs, schema);
    w.appendQuant(10, {{0.1f, 0.2f}, {20.0f, 14.0f}});
    w.appendBlocks(10, 0, {1, 2, 3, 4});
    w.appendQuant(20, {{0.05f, 0.1f}, {26.0f, 20.0f}});
    w.appendBlocks(20, 0, {5, 6, 7, 8});
    w.close();
  }
  const an::QuantRow last = an::readQuantRow(path);
  CHECK(last.rows == 2);
  CHECK(last.step == 20);
  CHECK(last.layers == schema.quantLayers);
  CHECK(last.metrics == schema.quantMetrics);
  CHECK(last.values[1] == std::vector<float>{26.0f, 20.0f});
  CHECK(last.blocks[0] == std::vector<float>{5, 6, 7, 8});
  CHECK(last.blocks[1].empty());
  CHECK(last.blockRows == std::vector<int64_t>{2, 0});
  const an::QuantRow first = an::readQuantRow(path, "/quant", 0);
  CHECK(first.step == 10);
  CHECK(first.values[0] == std::vector<float>{0.1f, 0.2f});
  CHECK(first.blocks[0] == std::vector<float>{1, 2, 3, 4});
  // A run log is not an analysis file.
  CHECK_THROWS_WITH(an::readAnalysisFile(path), Catch::Contains("not an fp4lab analysis file"));
}

TEST_CASE("analysis files: existing, unwritable and foreign paths give clear errors",
          "[analyze][hdf5][errors]") {
  fp4lab::testing::TempDir dir;
  writeFolder(dir.file("model"), {randomTensors(3)[0]});
  an::Options o;
  o.modelDir = dir.file("model");
  const an::Analysis a = an::analyzeModel(o);

  // Never overwritten without `overwrite`; replaced with it.
  const std::string path = dir.file("out.h5");
  fp4lab::files::writeFileAtomically(path, "keep me");
  CHECK_THROWS_WITH(an::writeAnalysisFile(a, path),
                    Catch::Contains("output file exists") && Catch::Contains("--force"));
  CHECK(fp4lab::files::readFile(path) == "keep me");
  an::writeAnalysisFile(a, path, true);
  CHECK(an::readAnalysisFile(path).layers.size() == 1);

  // A missing folder, a folder as the output, a read-only folder: errors, nothing left behind.
  CHECK_THROWS_WITH(an::writeAnalysisFile(a, dir.file("nope/out.h5")),
                    Catch::Contains("output folder does not exist"));
  CHECK_THROWS_WITH(an::writeAnalysisFile(a, dir.file("model")), Catch::Contains("is a folder"));
  fp4lab::files::createDirectories(dir.file("ro"));
  ::chmod(dir.file("ro").c_str(), 0555);
  if (::access(dir.file("ro").c_str(), W_OK) != 0) {  // not when running as root
    CHECK_THROWS_WITH(an::writeAnalysisFile(a, dir.file("ro/out.h5")),
                      Catch::Contains("cannot create the analysis file"));
    CHECK(leftovers(dir.file("ro")).empty());
  }
  ::chmod(dir.file("ro").c_str(), 0755);
  CHECK(leftovers(dir.path.string()).empty());

  // Reading: missing, not HDF5, HDF5 but not an analysis.
  CHECK_THROWS_WITH(an::readAnalysisFile(dir.file("missing.h5")),
                    Catch::Contains("does not exist"));
  fp4lab::files::writeFileAtomically(dir.file("text.h5"), "not an HDF5 file at all");
  CHECK_THROWS_WITH(an::readAnalysisFile(dir.file("text.h5")), Catch::Contains("not an HDF5 file"));
  CHECK_THROWS_AS(an::readQuantRow(dir.file("text.h5")), fp4lab::Error);
  CHECK_THROWS_AS(an::readQuantRow(path, "quant"), fp4lab::Error);
}

namespace {

// A sensitivity result of random numbers, with the NaNs a real one has (KL not measured, a plan
// not measured).
an::SensitivityFile randomSensitivity(std::mt19937& rng, bool w4a4) {
  std::uniform_real_distribution<double> u(0.1, 3.0);
  std::uniform_int_distribution<int64_t> n(1, int64_t(1) << 40);
  an::SensitivityFile s;
  s.model = "/models/some model";
  s.data = "builtin:sft";
  s.format = w4a4 ? "NVFP4 W4A4, 1-D blocks" : "NVFP4 W4A16, 1-D blocks";
  s.formatName = w4a4 ? "nvfp4" : "mxfp4-floor";
  s.w4a4 = w4a4;
  s.sequences = 8, s.tokens = 2048, s.seqLen = 256, s.batchSize = 8, s.evalBatches = 1;
  s.bf16Loss = u(rng), s.ptqLoss = u(rng), s.ptqKl = w4a4 ? NAN : u(rng);
  s.bf16Bytes = n(rng), s.ptqBytes = n(rng);
  const int L = 5;
  for (int l = 0; l < L; ++l)
    s.layers.push_back({"model.layers." + std::to_string(l) + ".mlp.down_proj", 64 + l, 128, n(rng),
                        n(rng), u(rng), l == 2 ? NAN : u(rng), int64_t(L - l)});
  for (int k = 0; k <= L; ++k) {
    an::SensitivityPlan p;
    p.keep = k;
    for (int i = 0; i < k; ++i) p.kept.push_back(s.layers[size_t(L - 1 - i)].name);
    p.bytes = n(rng), p.loss = k == 3 ? NAN : u(rng), p.kl = u(rng);
    p.exclude = "*lm_head*" + std::string(k > 0 ? "," : "");
    for (size_t i = 0; i < p.kept.size(); ++i) p.exclude += (i ? "," : "") + p.kept[i];
    s.plans.push_back(p);
  }
  s.chosenKeep = 2, s.tolerance = 0.01, s.seconds = u(rng), s.threads = 2;
  return s;
}

bool sameDouble(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || a == b;
}

void checkSame(const an::SensitivityFile& a, const an::SensitivityFile& b) {
  CHECK(a.model == b.model);
  CHECK(a.data == b.data);
  CHECK(a.format == b.format);
  CHECK(a.formatName == b.formatName);
  CHECK(a.w4a4 == b.w4a4);
  CHECK(a.sequences == b.sequences);
  CHECK(a.tokens == b.tokens);
  CHECK(a.seqLen == b.seqLen);
  CHECK(a.batchSize == b.batchSize);
  CHECK(a.evalBatches == b.evalBatches);
  CHECK(sameDouble(a.bf16Loss, b.bf16Loss));
  CHECK(sameDouble(a.ptqLoss, b.ptqLoss));
  CHECK(sameDouble(a.ptqKl, b.ptqKl));
  CHECK(a.bf16Bytes == b.bf16Bytes);
  CHECK(a.ptqBytes == b.ptqBytes);
  CHECK(a.chosenKeep == b.chosenKeep);
  CHECK(sameDouble(a.tolerance, b.tolerance));
  CHECK(a.seconds == b.seconds);
  CHECK(a.threads == b.threads);
  REQUIRE(a.layers.size() == b.layers.size());
  for (size_t l = 0; l < a.layers.size(); ++l) {
    const auto &x = a.layers[l], &y = b.layers[l];
    CHECK(x.name == y.name);
    CHECK(x.rows == y.rows);
    CHECK(x.cols == y.cols);
    CHECK(x.bf16Bytes == y.bf16Bytes);
    CHECK(x.fp4Bytes == y.fp4Bytes);
    CHECK(sameDouble(x.loss, y.loss));
    CHECK(sameDouble(x.kl, y.kl));
    CHECK(x.rank == y.rank);
  }
  REQUIRE(a.plans.size() == b.plans.size());
  for (size_t p = 0; p < a.plans.size(); ++p) {
    const auto &x = a.plans[p], &y = b.plans[p];
    CHECK(x.keep == y.keep);
    CHECK(x.kept == y.kept);
    CHECK(x.bytes == y.bytes);
    CHECK(sameDouble(x.loss, y.loss));
    CHECK(sameDouble(x.kl, y.kl));
    CHECK(x.exclude == y.exclude);
  }
}

}  // namespace

TEST_CASE("sensitivity files: HDF5 and JSON hold the same result exactly",
          "[analyze][sensitivity]") {
  fp4lab::testing::TempDir dir;
  std::mt19937 rng(std::random_device{}());
  for (const bool w4a4 : {false, true}) {
    const an::SensitivityFile s = randomSensitivity(rng, w4a4);
    const std::string h5 = dir.file(w4a4 ? "a.h5" : "b.hdf5"),
                      js = dir.file(w4a4 ? "a.json" : "b.txt");
    an::writeSensitivityFile(s, h5, false);
    an::writeSensitivityFile(s, js, false);
    CHECK(fp4lab::files::readFile(h5).compare(0, 4, "\x89HDF") == 0);
    CHECK(nlohmann::json::parse(fp4lab::files::readFile(js)).is_object());
    checkSame(an::readSensitivityFile(h5), s);
    checkSame(an::readSensitivityFile(js), s);
    // The per-layer losses are a run-log-style /quant row: the one /quant reader reads them.
    const an::QuantRow q = an::readQuantRow(h5, "/quant/" + s.formatName);
    CHECK(q.step == 0);
    CHECK(q.metrics == std::vector<std::string>{"loss", "kl", "delta_loss"});
    REQUIRE(q.layers.size() == s.layers.size());
    for (size_t l = 0; l < s.layers.size(); ++l) {
      CHECK(q.layers[l] == s.layers[l].name);
      CHECK(sameFloat(q.values[0][l], float(s.layers[l].loss)));
      CHECK(sameFloat(q.values[2][l], float(s.layers[l].loss - s.bf16Loss)));
    }
  }
}

TEST_CASE("sensitivity files: existing, foreign and damaged files give clear errors",
          "[analyze][sensitivity][errors]") {
  fp4lab::testing::TempDir dir;
  std::mt19937 rng(std::random_device{}());
  const an::SensitivityFile s = randomSensitivity(rng, false);
  for (const std::string name : {"s.h5", "s.json"}) {
    const std::string path = dir.file(name);
    fp4lab::files::writeFileAtomically(path, "keep me");
    CHECK_THROWS_WITH(an::writeSensitivityFile(s, path, false),
                      Catch::Contains("exists") && Catch::Contains("--force"));
    CHECK(fp4lab::files::readFile(path) == "keep me");
    an::writeSensitivityFile(s, path, true);
    CHECK(an::readSensitivityFile(path).plans.size() == s.plans.size());
  }
  CHECK(leftovers(dir.path.string()).size() == 0);
  const auto fails = [&](const std::string& path, const std::string& what) {
    INFO(path);
    CHECK_THROWS_WITH(an::readSensitivityFile(path),
                      Catch::Contains(what) && Catch::Contains(path));
  };
  fails(dir.file("missing.h5"), "does not exist");
  fails(dir.path.string(), "not a file");
  fp4lab::files::writeFileAtomically(dir.file("text.json"), "{ not json");
  fails(dir.file("text.json"), "not JSON and not HDF5");
  fp4lab::files::writeFileAtomically(dir.file("other.json"), R"({"model": "m", "layers": []})");
  fails(dir.file("other.json"), "not a file of fp4lab sensitivity --output");
  fp4lab::files::writeFileAtomically(dir.file("noplans.json"),
                                     R"({"bf16": {"loss": 1.0}, "plans": [{"keep": 0}]})");
  fails(dir.file("noplans.json"), "plan 0 has no keep or bytes");
  // An analysis file, and a run log, are HDF5 but not sensitivity files.
  writeFolder(dir.file("model"), {randomTensors(3)[0]});
  an::Options o;
  o.modelDir = dir.file("model");
  an::writeAnalysisFile(an::analyzeModel(o), dir.file("analysis.h5"));
  fails(dir.file("analysis.h5"), "not an fp4lab sensitivity file");
  // A file cut short: HDF5's signature, then nothing usable.
  const std::string whole = fp4lab::files::readFile(dir.file("s.h5"));
  fp4lab::files::writeFileAtomically(dir.file("cut.h5"), whole.substr(0, whole.size() / 3));
  CHECK_THROWS_AS(an::readSensitivityFile(dir.file("cut.h5")), fp4lab::Error);
}
