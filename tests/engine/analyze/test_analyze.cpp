// Tests for fp4lab_analyze: on a small synthetic Hugging Face folder (random weights with planted
// outliers), every format's statistics equal a direct computation from the reference kernels'
// quantize/dequantize; the layer selection honours the defaults, --include and --exclude; the JSON
// parses with the run log's metric names; malformed folders throw fp4lab::Error.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "../temp_dir.h"
#include "fp4lab/analyze/analyze.h"
#include "fp4lab/common/files.h"
#include "fp4lab/error.h"
#include "fp4lab/io/safetensors.h"
#include "fp4lab/kernels/formats.h"
#include "fp4lab/kernels/fp4.h"

namespace an = fp4lab::analyze;
using fp4lab::io::DType;
using fp4lab::io::SafetensorsWriter;

namespace {

uint16_t toBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFF + ((u >> 16) & 1);  // round to nearest even
  return uint16_t(u >> 16);
}
float fromBf16(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct Model {
  std::map<std::string, std::vector<float>> weights;  // as stored (BF16-rounded)
  std::map<std::string, std::pair<int64_t, int64_t>> shapes;
};

// A two-layer Llama-shaped folder: BF16 linears with a few planted outliers, an F32 norm,
// embeddings and lm_head.
Model writeModel(const std::string& dir) {
  Model m;
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  SafetensorsWriter w;
  auto addBf16 = [&](const std::string& name, int64_t rows, int64_t cols, int outliers) {
    std::vector<float> v(size_t(rows * cols));
    for (float& x : v) x = normal(rng);
    for (int k = 0; k < outliers; ++k) v[(size_t(k) * 7919) % v.size()] = (k % 2 ? -1 : 1) * 0.5f;
    std::vector<uint16_t> bits(v.size());
    for (size_t i = 0; i < v.size(); ++i) bits[i] = toBf16(v[i]), v[i] = fromBf16(bits[i]);
    w.add(name, DType::BF16, {rows, cols}, bits.data(), bits.size() * 2);
    m.weights[name] = v;
    m.shapes[name] = {rows, cols};
  };
  addBf16("model.embed_tokens.weight", 64, 64, 0);
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    addBf16(p + "self_attn.q_proj.weight", 64, 64, 3);
    addBf16(p + "self_attn.k_proj.weight", 32, 64, 0);
    addBf16(p + "self_attn.v_proj.weight", 32, 64, 1);
    addBf16(p + "self_attn.o_proj.weight", 64, 64, 0);
    addBf16(p + "mlp.gate_proj.weight", 128, 64, 2);
    addBf16(p + "mlp.up_proj.weight", 128, 64, 0);
    addBf16(p + "mlp.down_proj.weight", 64, 128, 5);
    w.addFloat32(p + "input_layernorm.weight", {64}, std::vector<float>(64, 1.0f));
  }
  addBf16("lm_head.weight", 64, 64, 0);
  w.write(fp4lab::files::join(dir, "model.safetensors"));
  fp4lab::files::writeFileAtomically(fp4lab::files::join(dir, "config.json"),
                                     "{\"model_type\": \"llama\"}");
  return m;
}

// The statistics computed directly from the reference path's quantize + dequantize.
fp4_error_stats referenceStats(const fp4_config& cfg, const std::vector<float>& x, int64_t rows,
                               int64_t cols, float tensorAmax) {
  REQUIRE(fp4_set_backend(FP4_BACKEND_REFERENCE) == FP4_OK);
  std::vector<uint8_t> codes(size_t(fp4_packed_bytes(rows, cols)));
  std::vector<uint8_t> scales(size_t(fp4_scale_count(cfg.format, rows, cols)));
  float global = 1.0f;
  REQUIRE(fp4_quantize(&cfg, x.data(), rows, cols, tensorAmax, codes.data(), scales.data(),
                       &global) == FP4_OK);
  std::vector<float> y(x.size());
  REQUIRE(fp4_dequantize(&cfg, codes.data(), scales.data(), global, rows, cols, y.data()) ==
          FP4_OK);
  REQUIRE(fp4_set_backend(FP4_BACKEND_AUTO) == FP4_OK);
  const int64_t block = fp4_block_size(cfg.format), perRow = cols / block;
  fp4_error_stats s;
  fp4_stats_clear(&s);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const double xv = x[size_t(r * cols + c)], q = y[size_t(r * cols + c)];
      const uint8_t code = scales[size_t(r * perRow + c / block)];
      // The block's scale and largest value in float, as the kernels define them.
      const float scale = cfg.format == FP4_FORMAT_MXFP4 ? fp4lab::e8m0Decode(code)
                                                         : fp4lab::e4m3Decode(code) * global;
      const double err = xv - q;
      s.count++;
      s.sum_x2 += xv * xv;
      s.sum_err2 += err * err;
      s.sum_xq += xv * q;
      s.sum_q2 += q * q;
      s.max_abs_err = std::max(s.max_abs_err, std::fabs(err));
      if (scale > 0.0f && std::fabs(float(xv)) > 6.0f * scale) s.clipped++;
      if (xv != 0 && q == 0) s.flushed++;
    }
  return s;
}

std::set<std::string> modules(const std::vector<an::Layer>& layers) {
  std::set<std::string> out;
  for (const an::Layer& l : layers) out.insert(l.module);
  return out;
}

}  // namespace

TEST_CASE("analysis statistics equal the reference kernels' quantize/dequantize", "[analyze]") {
  fp4lab::testing::TempDir dir;
  const Model m = writeModel(dir.path.string());
  an::Options o;
  o.modelDir = dir.path.string();
  o.threads = 3;
  int64_t calls = 0;
  const an::Analysis a = an::analyzeModel(o, [&](const an::Progress& p) {
    ++calls;
    CHECK(p.total == 14);
  });
  REQUIRE(a.layers.size() == 14);
  CHECK(calls == 14);
  REQUIRE(a.entries.size() == 14 * 4);
  CHECK(a.formats == an::formatNames());

  // The NVFP4 tensor scale of a fused group: its members' largest amax.
  auto amaxOf = [&](const std::string& t) {
    const auto& v = m.weights.at(t);
    return fp4_tensor_amax(v.data(), int64_t(v.size()));
  };
  for (const an::Entry& e : a.entries) {
    INFO(a.layers[e.layer].module << " " << e.format);
    const an::Layer& l = a.layers[e.layer];
    REQUIRE(e.measured);
    const std::vector<float>& x = m.weights.at(l.tensor);
    const fp4_config cfg = an::formatConfig(e.format);
    float tensorAmax = -1;
    if (cfg.format == FP4_FORMAT_NVFP4) {
      const std::string p = l.module.substr(0, l.module.rfind('.') + 1);
      const std::string leaf = l.module.substr(l.module.rfind('.') + 1);
      if (leaf == "q_proj" || leaf == "k_proj" || leaf == "v_proj")
        tensorAmax = std::max({amaxOf(p + "q_proj.weight"), amaxOf(p + "k_proj.weight"),
                               amaxOf(p + "v_proj.weight")});
      else if (leaf == "gate_proj" || leaf == "up_proj")
        tensorAmax = std::max(amaxOf(p + "gate_proj.weight"), amaxOf(p + "up_proj.weight"));
      else
        tensorAmax = amaxOf(l.tensor);
      CHECK(e.tensorAmax == tensorAmax);
    }
    const fp4_error_stats r = referenceStats(cfg, x, l.rows, l.cols, tensorAmax);
    CHECK(e.stats.count == r.count);
    CHECK(e.stats.clipped == r.clipped);
    CHECK(e.stats.flushed == r.flushed);
    CHECK(e.stats.nonfinite == 0);
    CHECK(e.stats.max_abs_err == Approx(r.max_abs_err).epsilon(1e-12));
    CHECK(e.stats.sum_x2 == Approx(r.sum_x2).epsilon(1e-9));
    CHECK(e.stats.sum_err2 == Approx(r.sum_err2).epsilon(1e-9));
    CHECK(e.stats.sum_xq == Approx(r.sum_xq).epsilon(1e-9));
    CHECK(e.stats.sum_q2 == Approx(r.sum_q2).epsilon(1e-9));
    const std::vector<double> got = an::metricValues(e.stats), want = an::metricValues(r);
    for (size_t k = 0; k < got.size(); ++k) CHECK(got[k] == Approx(want[k]).epsilon(1e-9));
    CHECK(got[1] == Approx(10 * std::log10(r.sum_x2 / r.sum_err2)).epsilon(1e-9));
  }
  // Floor scales clip the planted outliers' blocks' maxima where ceil never clips.
  for (const an::Entry& e : a.entries)
    if (e.format == "mxfp4") CHECK(e.stats.clipped == 0);

  // Outliers: the planted ones, counted by hand.
  for (size_t i = 0; i < a.layers.size(); ++i) {
    const std::vector<float>& x = m.weights.at(a.layers[i].tensor);
    double s2 = 0;
    for (float v : x) s2 += double(v) * v;
    const double rms = std::sqrt(s2 / double(x.size()));
    int64_t n3 = 0, n6 = 0;
    for (float v : x) n3 += std::fabs(v) > 3 * rms, n6 += std::fabs(v) > 6 * rms;
    CHECK(a.outliers[i].over3 == n3);
    CHECK(a.outliers[i].over6 == n6);
  }
  CHECK(a.outliers[0].over6 >= 3);  // layer 0's q_proj: three planted outliers
}

TEST_CASE("analysis layer selection honours the defaults, include and exclude", "[analyze]") {
  fp4lab::testing::TempDir dir;
  writeModel(dir.path.string());
  an::Options o;
  o.modelDir = dir.path.string() + "/";
  const auto all = modules(an::selectLayers(o));
  CHECK(all.size() == 14);
  CHECK_FALSE(all.count("lm_head"));
  CHECK_FALSE(all.count("model.embed_tokens"));
  CHECK(all.count("model.layers.1.mlp.down_proj"));

  o.exclude = {"*.mlp.*"};
  const auto noMlp = modules(an::selectLayers(o));
  CHECK(noMlp.size() == 8);
  for (const auto& name : noMlp) CHECK(name.find("mlp") == std::string::npos);

  o.exclude = {};
  o.include = {"model.layers.1.*_proj"};
  const auto one = modules(an::selectLayers(o));
  CHECK(one.size() == 7);
  for (const auto& name : one) CHECK(name.rfind("model.layers.1.", 0) == 0);

  o.include = {"lm_head"};  // still excluded by quant.exclude's default
  CHECK_THROWS_AS(an::selectLayers(o), fp4lab::Error);

  o.include = {"model.layers.0.mlp.down_proj"};
  o.formats = {"nvfp4"};
  const an::Analysis a = an::analyzeModel(o);
  REQUIRE(a.entries.size() == 1);
  CHECK(a.entries[0].format == "nvfp4");
}

TEST_CASE("analysis JSON parses with the run log's metric names", "[analyze]") {
  fp4lab::testing::TempDir dir;
  writeModel(dir.path.string());
  an::Options o;
  o.modelDir = dir.path.string();
  o.formats = {"mxfp4", "nvfp4-2d"};
  o.exclude = {"*.layers.1.*"};
  const an::Analysis a = an::analyzeModel(o);
  const nlohmann::json j = nlohmann::json::parse(an::toJson(a));
  CHECK(j["formats"] == nlohmann::json({"mxfp4", "nvfp4-2d"}));
  REQUIRE(j["layers"].size() == 7 * 2);
  for (const auto& e : j["layers"]) {
    for (const char* key : {"module", "format", "rows", "cols", "rel_l2", "sqnr_db", "mse",
                            "cosine", "max_abs", "clip_frac", "zero_frac", "outliers_3rms",
                            "outliers_6rms", "tensor_amax"})
      CHECK(e.contains(key));
    CHECK(e["sqnr_db"].is_number());
    CHECK(e["sqnr_db"].get<double>() > 10);
    CHECK(e["cosine"].get<double>() > 0.9);
  }
  CHECK(j["layers"][0]["module"] == a.layers[0].module);
  CHECK(j["layers"][1]["format"] == "nvfp4-2d");
  const std::string table = an::formatTable(a);
  CHECK(table.find("model.layers.0.mlp.down_proj") != std::string::npos);
  CHECK(table.find("sqnr_db") != std::string::npos);
}

TEST_CASE("analysis of a malformed folder throws fp4lab::Error", "[analyze]") {
  fp4lab::testing::TempDir dir;
  an::Options o;
  o.modelDir = dir.file("missing");
  CHECK_THROWS_AS(an::analyzeModel(o), fp4lab::Error);
  o.modelDir = dir.path.string();  // empty folder
  CHECK_THROWS_AS(an::analyzeModel(o), fp4lab::Error);
  fp4lab::files::writeFileAtomically(dir.file("model.safetensors"), "not a safetensors file");
  CHECK_THROWS_AS(an::analyzeModel(o), fp4lab::Error);
  fp4lab::files::writeFileAtomically(dir.file("model.safetensors"), std::string("\x08\0\0\0\0\0\0\0{\"a\":1", 14));
  CHECK_THROWS_AS(an::analyzeModel(o), fp4lab::Error);
  o.formats = {"fp8"};
  CHECK_THROWS_AS(an::analyzeModel(o), fp4lab::Error);
}
