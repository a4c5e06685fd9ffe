// Choosing the BF16 GEMM by measurement (model/gemm_choice.h): the timings and the choice they
// make, the cache file (read, written, one answer per key, a damaged file measured again), the
// key's parts, the model's shapes, and model::linear following the choice bit for bit.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../temp_dir.h"
#include "model/causal_lm.h"
#include "model/fused_ops.h"
#include "model/gemm_choice.h"

using namespace fp4lab::model;
using fp4lab::testing::TempDir;

namespace {

nlohmann::json readJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

void writeText(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

// Restores linear()'s path after a test changes it.
struct GemmRestore {
  Bf16Gemm saved = currentBf16Gemm();
  ~GemmRestore() { setBf16Gemm(saved); }
};

bool forcedByEnvironment() {
  const char* f = std::getenv("FP4LAB_BF16_GEMM");
  return f && (std::string(f) == "bf16" || std::string(f) == "fp32");
}

}  // namespace

TEST_CASE("measureBf16Gemm times both paths and picks the faster", "[gemm]") {
  GemmChoiceOptions options;
  options.repeats = 2;
  const std::vector<GemmShape> shapes = {{64, 96, 160, 3}, {64, 160, 96, 1}};
  for (bool backward : {true, false}) {
    INFO("backward " << backward);
    options.backward = backward;
    const Bf16GemmChoice c = measureBf16Gemm(shapes, options);
    CHECK(c.source == "measured");
    CHECK(c.libTorchSeconds > 0);
    CHECK(c.fp32Seconds > 0);
    CHECK(std::isfinite(c.libTorchSeconds));
    CHECK(std::isfinite(c.fp32Seconds));
    CHECK((c.gemm == Bf16Gemm::Fp32) == (c.fp32Seconds < c.libTorchSeconds));
    CHECK(c.threads == at::get_num_threads());
    CHECK(c.describe().rfind(c.gemm == Bf16Gemm::Fp32 ? "BF16 linears on the fp32 GEMM: "
                                                      : "BF16 linears on LibTorch's BF16 GEMM: ",
                             0) == 0);
  }
}

TEST_CASE("A product larger than the budget is timed on fewer rows and extrapolated", "[gemm]") {
  GemmChoiceOptions options;
  options.maxFlops = 2.0 * 128 * 256 * 256;  // 128 rows of 256 x 256
  options.minRows = 64;
  CHECK(gemmTimingRows({100, 256, 256, 1}, options) == 100);    // within the budget
  CHECK(gemmTimingRows({128, 256, 256, 1}, options) == 128);    // exactly the budget
  CHECK(gemmTimingRows({4096, 256, 256, 1}, options) == 128);   // the budget's rows
  CHECK(gemmTimingRows({4096, 4096, 4096, 1}, options) == 64);  // at least minRows
  CHECK(gemmTimingRows({255, 4096, 4096, 1}, options) == 255);  // too few rows to split
  CHECK(gemmTimingRows({400, 256, 256, 1}, options) == 100);    // at most a quarter
  // The line through the two timings, with a fixed cost: 1 s + 0.01 s per row.
  CHECK(extrapolateGemmSeconds(1 + 0.01 * 100, 1 + 0.01 * 200, 100, 1000) ==
        Approx(1 + 0.01 * 1000));
  // Noise that makes the larger timing the faster: flat, never below either timing.
  CHECK(extrapolateGemmSeconds(2.0, 1.5, 100, 1000) == 2.0);
  // Rows only (no fixed cost): plain scaling.
  CHECK(extrapolateGemmSeconds(0.5, 1.0, 100, 800) == Approx(4.0));
}

TEST_CASE("The cache key names the CPU, LibTorch, the threads and the shapes", "[gemm]") {
  const std::vector<GemmShape> a = {{256, 64, 64, 2}}, b = {{256, 64, 64, 3}};
  const std::string key = gemmCacheKey(a, true, 2);
  CHECK(key.find("cpu=") == 0);
  CHECK(key.find("/flags-") != std::string::npos);
  CHECK(key.find(";torch=") != std::string::npos);
  CHECK(key.find(";threads=2;") != std::string::npos);
  CHECK(key != gemmCacheKey(a, true, 1));
  CHECK(key != gemmCacheKey(a, false, 2));
  CHECK(key != gemmCacheKey(b, true, 2));
  // The same products listed in another order, or split, are the same key.
  CHECK(gemmCacheKey({{256, 64, 64, 1}, {128, 64, 32, 1}, {256, 64, 64, 1}}, true, 2) ==
        gemmCacheKey({{128, 64, 32, 1}, {256, 64, 64, 2}}, true, 2));
}

TEST_CASE("chooseBf16Gemm measures once, caches, and linear() follows", "[gemm]") {
  REQUIRE_FALSE(forcedByEnvironment());  // ctest unsets FP4LAB_BF16_GEMM (tests/CMakeLists.txt)
  GemmRestore restore;
  TempDir dir;
  GemmChoiceOptions options;
  options.cacheFile = dir.file("sub/gemm-choice.json");  // the folder is made
  options.repeats = 1;
  const std::vector<GemmShape> shapes = {{96, 48, 80, 2}};
  const Bf16GemmChoice first = chooseBf16Gemm(shapes, options);
  CHECK(first.source == "measured");
  CHECK(currentBf16Gemm() == first.gemm);
  const nlohmann::json j = readJson(options.cacheFile);
  const std::string key = gemmCacheKey(shapes, true, at::get_num_threads());
  REQUIRE(j["entries"].contains(key));
  CHECK(j["entries"][key]["gemm"] == toString(first.gemm));
  CHECK(j["entries"][key]["bf16_s"].get<double>() == first.libTorchSeconds);
  CHECK(j["entries"][key]["fp32_s"].get<double>() == first.fp32Seconds);
  // The same key again in this process: the same answer, not a new measurement.
  setBf16Gemm(first.gemm == Bf16Gemm::Fp32 ? Bf16Gemm::LibTorch : Bf16Gemm::Fp32);
  const Bf16GemmChoice again = chooseBf16Gemm(shapes, options);
  CHECK(again.gemm == first.gemm);
  CHECK(again.libTorchSeconds == first.libTorchSeconds);
  CHECK(currentBf16Gemm() == first.gemm);
}

TEST_CASE("A cached timing is taken as written, either way", "[gemm]") {
  REQUIRE_FALSE(forcedByEnvironment());  // ctest unsets FP4LAB_BF16_GEMM (tests/CMakeLists.txt)
  GemmRestore restore;
  TempDir dir;
  GemmChoiceOptions options;
  options.cacheFile = dir.file("gemm-choice.json");
  // Shapes no other test uses (the process remembers answers per key).
  for (const bool fp32Faster : {true, false}) {
    INFO("fp32 faster " << fp32Faster);
    const std::vector<GemmShape> shapes = {{72, 40, fp32Faster ? 24 : 56, 5}};
    const std::string key = gemmCacheKey(shapes, true, at::get_num_threads());
    nlohmann::json j = {
        {"entries", {{key, {{"gemm", "x"}, {"bf16_s", fp32Faster ? 2.0 : 1.0}, {"fp32_s", 1.5}}}}}};
    writeText(options.cacheFile, j.dump());
    const Bf16GemmChoice c = chooseBf16Gemm(shapes, options);
    CHECK(c.source == "cached");
    CHECK(c.gemm == (fp32Faster ? Bf16Gemm::Fp32 : Bf16Gemm::LibTorch));
    CHECK(currentBf16Gemm() == c.gemm);
    CHECK(c.fp32Seconds == 1.5);
  }
}

TEST_CASE("A damaged cache file is measured again and rewritten", "[gemm]") {
  REQUIRE_FALSE(forcedByEnvironment());  // ctest unsets FP4LAB_BF16_GEMM (tests/CMakeLists.txt)
  GemmRestore restore;
  TempDir dir;
  GemmChoiceOptions options;
  options.cacheFile = dir.file("gemm-choice.json");
  options.repeats = 1;
  const std::vector<GemmShape> shapes = {{80, 24, 40, 7}};
  for (const std::string damaged :
       {"{\"entries\": {", "[]", "{\"entries\": 3}", "\x01\x02 not json"}) {
    writeText(options.cacheFile, damaged);
    const std::vector<GemmShape> unique = {{80, 24, 40, int64_t(7 + damaged.size())}};
    const Bf16GemmChoice c = chooseBf16Gemm(unique, options);
    CHECK(c.source == "measured");
    const nlohmann::json j = readJson(options.cacheFile);
    CHECK(j["entries"].contains(gemmCacheKey(unique, true, at::get_num_threads())));
  }
  // An entry whose timings are not numbers is measured again too.
  const std::string key = gemmCacheKey(shapes, true, at::get_num_threads());
  writeText(options.cacheFile,
            nlohmann::json{{"entries", {{key, {{"bf16_s", "fast"}, {"fp32_s", 1}}}}}}.dump());
  CHECK(chooseBf16Gemm(shapes, options).source == "measured");
}

TEST_CASE("linear() computes with the chosen GEMM, bit for bit", "[gemm]") {
  REQUIRE_FALSE(forcedByEnvironment());  // ctest unsets FP4LAB_BF16_GEMM (tests/CMakeLists.txt)
  GemmRestore restore;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  const torch::Tensor x0 = at::randn({5, 33, 96}, gen).to(torch::kBFloat16);
  const torch::Tensor w0 = at::randn({80, 96}, gen) * 0.1;
  const torch::Tensor dy = at::randn({5, 33, 80}, gen).to(torch::kBFloat16);
  bool viaFp32Ran = false;
  auto run = [&](bool engine, bool viaFp32) {
    torch::Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
    at::autocast::set_autocast_enabled(c10::DeviceType::CPU, true);
    at::autocast::set_autocast_dtype(c10::DeviceType::CPU, at::kBFloat16);
    at::autocast::increment_nesting();
    torch::Tensor y = engine    ? linear(x, w, torch::Tensor())
                      : viaFp32 ? bf16LinearViaFp32(x, w, torch::Tensor())
                                : torch::linear(x, w);
    at::autocast::decrement_nesting();
    at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(c10::DeviceType::CPU, false);
    // Which path ran: the fp32 one is its own autograd function (on some CPUs the two compute
    // the same bits, so the values alone cannot tell).
    viaFp32Ran = y.grad_fn()->name().find("Bf16Linear") != std::string::npos;
    y.backward(dy);
    return std::vector<torch::Tensor>{y, x.grad(), w.grad()};
  };
  for (const Bf16Gemm gemm : {Bf16Gemm::Fp32, Bf16Gemm::LibTorch}) {
    INFO(toString(gemm));
    setBf16Gemm(gemm);
    const auto got = run(true, false);
    CHECK(viaFp32Ran == (gemm == Bf16Gemm::Fp32));
    const auto want = run(false, gemm == Bf16Gemm::Fp32);
    for (size_t i = 0; i < got.size(); ++i) CHECK(torch::equal(got[i], want[i]));
  }
}

TEST_CASE("A model's products: every linear, tied lm_head, experts on their share", "[gemm]") {
  ModelConfig c;
  c.architecture = Architecture::Llama;
  c.vocabSize = 300;
  c.hiddenSize = 64;
  c.intermediateSize = 160;
  c.numHiddenLayers = 2;
  c.numAttentionHeads = 4;
  c.numKeyValueHeads = 2;
  c.headDim = 16;
  c.tieWordEmbeddings = true;
  CausalLM m(c);
  const std::vector<GemmShape> shapes = m->gemmShapes(512);
  int64_t layers = 0, weights = 0;
  for (const GemmShape& s : shapes) {
    CHECK(s.rows == 512);
    layers += s.count;
    weights += s.count * s.in * s.out;
  }
  CHECK(layers == 2 * 7 + 1);  // q k v o gate up down per layer, and lm_head
  int64_t expected = 0;
  for (auto& [name, l] : m->quantLinears()) expected += l->weight.numel();
  CHECK(weights == expected);
  CHECK(std::count_if(shapes.begin(), shapes.end(),
                      [](const GemmShape& s) { return s.in == 64 && s.out == 300; }) == 1);

  ModelConfig moe = c;
  moe.architecture = Architecture::Mixtral;
  moe.numLocalExperts = 4;
  moe.numExpertsPerTok = 2;
  CausalLM mixtral(moe);
  int64_t expertLayers = 0;
  for (const GemmShape& s : mixtral->gemmShapes(512))
    if (s.rows == 512 * 2 / 4) expertLayers += s.count;
  CHECK(expertLayers == 2 * 4 * 3);  // w1, w2, w3 of 4 experts in 2 layers
}
