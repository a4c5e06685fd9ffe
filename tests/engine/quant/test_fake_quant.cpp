// Fake quantization on LibTorch tensors: the forward equals what an exporter writes, decoded
// (fp4_quantize then fp4_dequantize, the kernels' own codec); the gradients are straight-through
// or clipped; calibration takes the max; layer selection follows the globs and the defaults.
// LibTorch first: c10 defines a CHECK macro that Catch's must replace, not the other way round.
#include "quant/quantize_model.h"
#include "train/recipe.h"

#include <ATen/autocast_mode.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

using namespace fp4lab;

namespace {

// Independent of quant/: quantize to codes + scales, then decode, with the raw kernel API.
torch::Tensor exportThenDecode(const torch::Tensor& w, const fp4_config& cfg, float amax) {
  torch::Tensor x = w.to(torch::kFloat).contiguous();
  const int64_t cols = x.size(-1), rows = x.numel() / cols;
  std::vector<uint8_t> codes(size_t(fp4_packed_bytes(rows, cols)));
  std::vector<uint8_t> scales(size_t(fp4_scale_count(cfg.format, rows, cols)));
  float global = 0;
  REQUIRE(fp4_quantize(&cfg, x.data_ptr<float>(), rows, cols, amax, codes.data(), scales.data(),
                       &global) == FP4_OK);
  torch::Tensor y = torch::empty_like(x);
  REQUIRE(fp4_dequantize(&cfg, codes.data(), scales.data(), global, rows, cols,
                         y.data_ptr<float>()) == FP4_OK);
  return y;
}

bool bitEqual(const torch::Tensor& a, const torch::Tensor& b) {
  torch::Tensor x = a.contiguous(), y = b.contiguous();
  return x.sizes() == y.sizes() && x.scalar_type() == y.scalar_type() &&
         std::memcmp(x.data_ptr(), y.data_ptr(), size_t(x.nbytes())) == 0;
}

fp4_config configFor(fp4_format format, bool twoD, fp4_scale_rule rule = FP4_SCALE_RULE_CEIL) {
  fp4_config c = fp4_default_config(format);
  c.nvfp4_2d_blocks = twoD;
  c.scale_rule = rule;
  return c;
}

}  // namespace

TEST_CASE("Fake quantization equals decoding what an exporter writes", "[quant][exact]") {
  torch::manual_seed(7);
  struct Case {
    fp4_format format;
    bool twoD;
    fp4_scale_rule rule;
  };
  for (Case c : {Case{FP4_FORMAT_MXFP4, false, FP4_SCALE_RULE_CEIL},
                 Case{FP4_FORMAT_MXFP4, false, FP4_SCALE_RULE_FLOOR},
                 Case{FP4_FORMAT_NVFP4, false, FP4_SCALE_RULE_CEIL},
                 Case{FP4_FORMAT_NVFP4, true, FP4_SCALE_RULE_CEIL}}) {
    for (auto shape : {std::vector<int64_t>{64, 256}, {37, 96}, {3, 5, 64}, {704, 256}}) {
      if (c.format == FP4_FORMAT_MXFP4 && shape.back() % 32) continue;
      torch::Tensor w = torch::randn(shape) * std::exp(torch::randn({1}).item<double>() * 4);
      w.index_put_({0}, w.index({0}) * 50);  // an outlier row
      const fp4_config cfg = configFor(c.format, c.twoD, c.rule);
      for (float amax : {-1.0f, w.abs().max().item<float>() * 0.5f}) {
        INFO("format " << c.format << " 2d " << c.twoD << " rule " << c.rule << " amax " << amax
                       << " shape " << shape.size());
        CHECK(bitEqual(quant::fakeQuantize(w, cfg, amax), exportThenDecode(w, cfg, amax)));
        // The quantizer QuantLinear calls gives the same bits, with and without autograd.
        quant::FakeQuantizer q(cfg, quant::Backward::StraightThrough,
                               quant::FakeQuantizer::Role::Weight, amax >= 0);
        if (amax >= 0) q.setAmax(amax);
        torch::Tensor p = w.clone().requires_grad_(true);
        CHECK(bitEqual(q.apply(p).detach(), exportThenDecode(w, cfg, amax)));
        torch::NoGradGuard noGrad;
        CHECK(bitEqual(q.apply(p), exportThenDecode(w, cfg, amax)));
      }
    }
  }
}

TEST_CASE("BF16 inputs are quantized exactly and come back in BF16", "[quant][dtype]") {
  // BF16 tensors (and fp32 ones whose max |x| is asked for) go through in cache-sized pieces;
  // the result must be the exporter's, rounded once to BF16, at any shape: several pieces, a
  // ragged last piece, 16x16 tiles, rows wider than a piece, a single row.
  torch::manual_seed(11);
  for (fp4_format format : {FP4_FORMAT_MXFP4, FP4_FORMAT_NVFP4}) {
    for (int variant : {0, 1, 2}) {  // 1-D blocks, 16x16 tiles (NVFP4), stochastic rounding
      const bool twoD = variant == 1;
      if (twoD && format == FP4_FORMAT_MXFP4) continue;
      fp4_config cfg = configFor(format, twoD);
      if (variant == 2) cfg.rounding = FP4_ROUNDING_STOCHASTIC, cfg.seed = 99, cfg.seed_offset = 5;
      for (auto shape : {std::vector<int64_t>{8, 64},
                         {4096, 256},
                         {3, 700, 64},
                         {1, 32},
                         {37, 4096},
                         {17, 65536},
                         {130, 704 / 32 * 32}}) {
        torch::Tensor x = (torch::randn(shape) * std::exp(torch::randn({1}).item<double>() * 3))
                              .to(torch::kBFloat16);
        x.view({-1}).index_put_({0}, 1e4);  // an outlier, clipped by the amax below
        const float measured = x.to(torch::kFloat).abs().max().item<float>();
        const float amax = format == FP4_FORMAT_NVFP4 ? measured * 0.25f : -1.0f;
        INFO("format " << format << " variant " << variant << " rows x cols "
                       << x.numel() / shape.back() << " x " << shape.back());
        const torch::Tensor expected =
            exportThenDecode(x.to(torch::kFloat), cfg, amax).to(torch::kBFloat16).view(shape);
        float inputAbsMax = -1;
        torch::Tensor y = quant::fakeQuantize(x, cfg, amax, nullptr, nullptr, &inputAbsMax);
        CHECK(y.scalar_type() == torch::kBFloat16);
        CHECK(bitEqual(y, expected));
        CHECK(inputAbsMax == measured);
        CHECK(bitEqual(quant::fakeQuantize(x, cfg, amax), expected));
        // fp32 with the max |x| asked for (the clipped gradient's case) takes the pieces too.
        torch::Tensor wide = x.to(torch::kFloat);
        inputAbsMax = -1;
        CHECK(bitEqual(quant::fakeQuantize(wide, cfg, amax, nullptr, nullptr, &inputAbsMax),
                       exportThenDecode(wide, cfg, amax).view(shape)));
        CHECK(inputAbsMax == measured);
        if (format == FP4_FORMAT_NVFP4)  // the amax measured per call (quant.amax=dynamic)
          CHECK(bitEqual(
              quant::fakeQuantize(x, cfg, -1.0f),
              exportThenDecode(x.to(torch::kFloat), cfg, -1.0f).to(torch::kBFloat16).view(shape)));
      }
    }
  }
  // An empty tensor: an empty result and max |x| = 0.
  float emptyAbsMax = -1;
  torch::Tensor empty = torch::empty({0, 64}, torch::kBFloat16);
  CHECK(quant::fakeQuantize(empty, configFor(FP4_FORMAT_NVFP4, false), 1.0f, nullptr, nullptr,
                            &emptyAbsMax)
            .sizes() == empty.sizes());
  CHECK(emptyAbsMax == 0.0f);
  // NVFP4 with the amax measured per call, and NaN/Inf: the same bits as the fp32 route.
  const fp4_config nv = configFor(FP4_FORMAT_NVFP4, false);
  torch::Tensor x = torch::randn({64, 64}).to(torch::kBFloat16);
  CHECK(bitEqual(quant::fakeQuantize(x, nv, -1),
                 exportThenDecode(x.to(torch::kFloat), nv, -1).to(torch::kBFloat16)));
  x.index_put_({5, 3}, std::numeric_limits<float>::quiet_NaN());
  x.index_put_({9, 0}, std::numeric_limits<float>::infinity());
  float inputAbsMax = -1;
  torch::Tensor y = quant::fakeQuantize(x, nv, 3.0f, nullptr, nullptr, &inputAbsMax);
  torch::Tensor ref = exportThenDecode(x.to(torch::kFloat), nv, 3.0f).to(torch::kBFloat16);
  CHECK(torch::isnan(y).equal(torch::isnan(ref)));
  CHECK(torch::nan_to_num(y).equal(torch::nan_to_num(ref)));
  CHECK(inputAbsMax == x.to(torch::kFloat).nan_to_num(0, 0, 0).abs().max().item<float>());
}

TEST_CASE("fp32 inputs can come back in BF16: the fp32 result rounded once", "[quant][dtype]") {
  // What a quantizer hands a linear layer under BF16 autocast (its weights are fp32 masters): the
  // same bits as quantizing in fp32 and casting after, with the amax given, measured (-1) or asked
  // for, across pieces, ragged pieces, 16x16 tiles and stochastic rounding.
  torch::manual_seed(12);
  for (fp4_format format : {FP4_FORMAT_MXFP4, FP4_FORMAT_NVFP4}) {
    for (int variant : {0, 1, 2}) {
      if (variant == 1 && format == FP4_FORMAT_MXFP4) continue;
      fp4_config cfg = configFor(format, variant == 1);
      if (variant == 2) cfg.rounding = FP4_ROUNDING_STOCHASTIC, cfg.seed = 7, cfg.seed_offset = 3;
      for (auto shape : {std::vector<int64_t>{8, 64}, {1536, 576}, {3, 700, 64}, {37, 4096}}) {
        torch::Tensor x = torch::randn(shape) * std::exp(torch::randn({1}).item<double>() * 3);
        x.view({-1}).index_put_({1}, std::numeric_limits<float>::quiet_NaN());
        const float measured = x.nan_to_num(0).abs().max().item<float>();
        for (const float amax : {-1.0f, measured * 0.5f}) {
          INFO("format " << format << " variant " << variant << " amax " << amax << " numel "
                         << x.numel());
          const torch::Tensor expected = exportThenDecode(x, cfg, amax).view(shape);
          const torch::Tensor y =
              quant::fakeQuantize(x, cfg, amax, nullptr, nullptr, nullptr, torch::kBFloat16);
          REQUIRE(y.scalar_type() == torch::kBFloat16);
          const torch::Tensor ref = expected.to(torch::kBFloat16);
          CHECK(torch::isnan(y).equal(torch::isnan(ref)));
          CHECK(bitEqual(y.nan_to_num(0), ref.nan_to_num(0)));
          float inputAbsMax = -1;
          const torch::Tensor z =
              quant::fakeQuantize(x, cfg, amax, nullptr, nullptr, &inputAbsMax, torch::kBFloat16);
          CHECK(bitEqual(z.nan_to_num(0), ref.nan_to_num(0)));
          CHECK(inputAbsMax == measured);
        }
      }
    }
  }
  CHECK_THROWS_WITH(quant::fakeQuantize(torch::randn({2, 32}).to(torch::kBFloat16),
                                        configFor(FP4_FORMAT_MXFP4, false), -1, nullptr, nullptr,
                                        nullptr, torch::kFloat),
                    Catch::Contains("BF16 for an fp32 input"));
}

TEST_CASE("Under BF16 autocast quantized linears compute what fp32 quantizers and casts give",
          "[quant][dtype][grad]") {
  // Quantizers narrow their fp32 results for the BF16 linear themselves, weights and an input
  // shared by three linears (q/k/v) alike. The outputs and every gradient must be what fp32
  // quantizers followed by autocast's casts give: the reference quantizes the input once, in
  // fp32, and each linear casts it, so its three gradients are summed in fp32.
  torch::manual_seed(13);
  const fp4_config cfg = configFor(FP4_FORMAT_NVFP4, false);
  for (const quant::Backward backward :
       {quant::Backward::StraightThrough, quant::Backward::ClippedStraightThrough}) {
    std::vector<std::unique_ptr<quant::FakeQuantizer>> weights;
    std::vector<torch::Tensor> w0;
    for (int i = 0; i < 3; ++i) {
      weights.push_back(std::make_unique<quant::FakeQuantizer>(
          cfg, backward, quant::FakeQuantizer::Role::Weight, false));
      w0.push_back(torch::randn({48, 64}));
    }
    quant::FakeQuantizer input(cfg, backward, quant::FakeQuantizer::Role::Input, true);
    input.setAmax(1.5f);  // many |x| exceed it: the clipped gradient masks
    const torch::Tensor x0 = torch::randn({4, 5, 64}), upstream = torch::randn({3, 4, 5, 48});
    auto run = [&](bool narrowed) {
      torch::Tensor x = x0.clone().requires_grad_(true);
      std::vector<torch::Tensor> w, y;
      for (const torch::Tensor& t : w0) w.push_back(t.clone().requires_grad_(true));
      at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
      at::autocast::set_autocast_enabled(at::kCPU, false);
      const torch::Tensor shared = narrowed ? torch::Tensor() : input.apply(x);
      for (int i = 0; i < 3; ++i) {
        // The reference: the quantizers with autocast off (fp32), autocast's casts in the linear.
        at::autocast::set_autocast_enabled(at::kCPU, narrowed);
        const torch::Tensor qx = narrowed ? input.apply(x) : shared,
                            qw = weights[size_t(i)]->apply(w[size_t(i)]);
        const auto type = narrowed ? torch::kBFloat16 : torch::kFloat;
        CHECK(qx.scalar_type() == type);
        CHECK(qw.scalar_type() == type);
        at::autocast::set_autocast_enabled(at::kCPU, true);
        y.push_back(torch::linear(qx, qw));
      }
      at::autocast::set_autocast_enabled(at::kCPU, false);
      at::autocast::clear_cache();
      quant::forgetSharedInput();
      (torch::stack(y).to(torch::kFloat) * upstream).sum().backward();
      std::vector<torch::Tensor> out = {torch::stack(y).detach(), x.grad()};
      for (const torch::Tensor& t : w) out.push_back(t.grad());
      return out;
    };
    const std::vector<torch::Tensor> expected = run(false), got = run(true);
    CHECK(got[0].scalar_type() == torch::kBFloat16);
    for (size_t i = 1; i < got.size(); ++i) CHECK(got[i].scalar_type() == torch::kFloat);
    for (size_t i = 0; i < got.size(); ++i) CHECK(bitEqual(got[i], expected[i]));
  }
}

TEST_CASE("Bad shapes get a clear error", "[quant][errors]") {
  const fp4_config cfg = configFor(FP4_FORMAT_MXFP4, false);
  CHECK_THROWS_WITH(quant::fakeQuantize(torch::randn({4, 48}), cfg, -1),
                    Catch::Contains("not a multiple of the 32-element block"));
  CHECK_THROWS(quant::fakeQuantize(torch::ones({4, 32}, torch::kLong), cfg, -1));
  quant::FakeQuantizer frozen(cfg, quant::Backward::StraightThrough,
                              quant::FakeQuantizer::Role::Input, true);
  CHECK_THROWS_WITH(frozen.apply(torch::randn({2, 32})), Catch::Contains("before calibration"));
}

TEST_CASE("Straight-through and clipped straight-through gradients", "[quant][grad]") {
  torch::manual_seed(3);
  const fp4_config cfg = configFor(FP4_FORMAT_NVFP4, false);
  torch::Tensor x0 = torch::randn({16, 64});
  torch::Tensor upstream = torch::randn({16, 64});
  const float amax = 1.0f;  // many |x| exceed it
  SECTION("STE passes the gradient unchanged") {
    quant::FakeQuantizer q(cfg, quant::Backward::StraightThrough, quant::FakeQuantizer::Role::Input,
                           true);
    q.setAmax(amax);
    torch::Tensor x = x0.clone().requires_grad_(true);
    (q.apply(x) * upstream).sum().backward();
    CHECK(bitEqual(x.grad(), upstream));
  }
  SECTION("clipped STE zeroes it beyond the calibrated amax") {
    quant::FakeQuantizer q(cfg, quant::Backward::ClippedStraightThrough,
                           quant::FakeQuantizer::Role::Input, true);
    q.setAmax(amax);
    torch::Tensor x = x0.clone().requires_grad_(true);
    (q.apply(x) * upstream).sum().backward();
    torch::Tensor expected = torch::where(x0.abs() <= amax, upstream, torch::zeros_like(upstream));
    CHECK(bitEqual(x.grad(), expected));
    CHECK(x0.abs().gt(amax).any().item<bool>());  // the case is not vacuous
  }
  SECTION("the mask in every dtype and path, across threads' chunks") {
    // fp32 and BF16: the fused mask, after the pieces or (measuring) the statistics path; fp64:
    // LibTorch's masked_fill. 1 100 x 64 elements span two parallel chunks; NaNs pass.
    torch::Tensor big = torch::randn({1100, 64}), up = torch::randn({1100, 64});
    big.index_put_({7, 3}, NAN);
    for (const torch::ScalarType type : {torch::kFloat, torch::kBFloat16, torch::kDouble}) {
      for (const bool measuring : {false, true}) {
        INFO("dtype " << type << " measuring " << measuring);
        quant::forgetSharedInput();
        quant::FakeQuantizer q(cfg, quant::Backward::ClippedStraightThrough,
                               quant::FakeQuantizer::Role::Input, true);
        q.setAmax(amax);
        q.setMeasuring(measuring);
        torch::Tensor x = big.to(type).clone().requires_grad_(true);
        (q.apply(x).to(torch::kFloat) * up).sum().backward();
        const torch::Tensor beyond = big.to(type).to(torch::kFloat).abs() > amax;
        CHECK(bitEqual(x.grad(), up.to(type).masked_fill(beyond, 0)));
      }
    }
  }
}

TEST_CASE("Max calibration records the largest |x| over all batches", "[quant][calibration]") {
  model::QuantLinear linear(64, 32, false);
  quant::FakeQuantizer weight(configFor(FP4_FORMAT_NVFP4, false), quant::Backward::StraightThrough,
                              quant::FakeQuantizer::Role::Weight, true);
  auto w = std::make_shared<quant::FakeQuantizer>(weight);
  auto in = std::make_shared<quant::FakeQuantizer>(configFor(FP4_FORMAT_NVFP4, false),
                                                   quant::Backward::StraightThrough,
                                                   quant::FakeQuantizer::Role::Input, true);
  linear->weightQuantizer = w;
  linear->inputQuantizer = in;
  std::vector<quant::QuantizedLayer> layers = {{"l", linear, w, in}};
  std::vector<torch::Tensor> batches = {torch::randn({4, 64}), torch::randn({4, 64}) * 3,
                                        torch::randn({4, 64}) * 0.1};
  torch::Tensor plain = torch::linear(batches[1], linear->weight);
  quant::calibrate(layers, 3, [&](int64_t i) {
    // While calibrating the layer computes in full precision.
    torch::Tensor y = linear(batches[size_t(i)]);
    if (i == 1) CHECK(bitEqual(y, plain));
  });
  float largest = 0;
  for (auto& b : batches) largest = std::max(largest, b.abs().max().item<float>());
  // The largest |x|, moved up (by a few ulps at most, often none) to the nearest amax that
  // compressed-tensors' reciprocal form writes exactly.
  const float expected = fp4_nvfp4_exportable_amax(largest);
  CHECK(expected >= largest);
  CHECK(expected <=
        std::nextafter(std::nextafter(std::nextafter(largest, INFINITY), INFINITY), INFINITY));
  CHECK(in->amax() == expected);
  CHECK(w->amax() == fp4_nvfp4_exportable_amax(linear->weight.abs().max().item<float>()));
  // After calibration the layer computes linear(fq(x), fq(w)) with those amaxes.
  torch::Tensor x = torch::randn({5, 64});
  torch::NoGradGuard noGrad;
  torch::Tensor expectedOut =
      torch::linear(exportThenDecode(x, in->config(), expected),
                    exportThenDecode(linear->weight, w->config(), w->amax()));
  CHECK(bitEqual(linear(x), expectedOut));
}

TEST_CASE("A no-grad weight cache follows the weight's changes", "[quant][cache]") {
  const fp4_config cfg = configFor(FP4_FORMAT_MXFP4, false);
  quant::FakeQuantizer q(cfg, quant::Backward::StraightThrough, quant::FakeQuantizer::Role::Weight,
                         false);
  torch::Tensor w = torch::randn({8, 64});
  torch::NoGradGuard noGrad;
  torch::Tensor a = q.apply(w);
  CHECK(q.apply(w).data_ptr() == a.data_ptr());  // reused
  w.mul_(2);                                     // an optimizer step changes it in place
  CHECK(bitEqual(q.apply(w), exportThenDecode(w, cfg, -1)));
}

TEST_CASE("Glob patterns", "[quant][select]") {
  CHECK(quant::globMatch("model.layers.*", "model.layers.0.mlp.down_proj"));
  CHECK(quant::globMatch("*lm_head*", "lm_head"));
  CHECK(quant::globMatch("*.gate", "model.layers.1.block_sparse_moe.gate"));
  CHECK_FALSE(quant::globMatch("*.gate", "model.layers.1.mlp.gate_proj"));
  CHECK(quant::globMatch("model.layers.?.self_attn.*", "model.layers.3.self_attn.o_proj"));
  CHECK_FALSE(quant::globMatch("model.layers.?.self_attn.*", "model.layers.13.self_attn.o_proj"));
  CHECK(quant::globMatch("*", ""));
  CHECK_FALSE(quant::globMatch("a*b", "acbd"));
  CHECK(run::splitList(" a , ,b*,") == std::vector<std::string>{"a", "b*"});
}

TEST_CASE("Default selection: the blocks' linears, not lm_head, embeddings or routers",
          "[quant][select]") {
  model::ModelConfig c;
  c.architecture = model::Architecture::Mixtral;
  c.vocabSize = 64, c.hiddenSize = 64, c.intermediateSize = 128, c.numHiddenLayers = 2;
  c.numAttentionHeads = 4, c.numKeyValueHeads = 2, c.headDim = 16;
  c.numLocalExperts = 4, c.numExpertsPerTok = 2;
  model::CausalLM m(c);
  run::RunConfig config = run::RunConfig::fromYamlText(
      "", {"recipe.name=qat", "quant.format=nvfp4", "quant.activations=false"});
  auto layers = quant::attachQuantizers(m, quant::QuantOptions::fromConfig(config));
  std::set<std::string> names;
  for (auto& l : layers) {
    names.insert(l.name);
    CHECK(l.linear->weightQuantizer);
    CHECK_FALSE(l.linear->inputQuantizer);  // W4A16
  }
  CHECK(names.count("model.layers.0.self_attn.q_proj"));
  CHECK(names.count("model.layers.1.self_attn.o_proj"));
  bool anyExpert = false, anyRouterOrHead = false;
  for (auto& [name, linear] : m->quantLinears()) {
    if (name.find("experts") != std::string::npos) anyExpert |= names.count(name) > 0;
    if (name == "lm_head" || name.find("gate") == name.size() - 4)
      anyRouterOrHead |= names.count(name) > 0 || bool(linear->weightQuantizer);
  }
  CHECK(anyExpert);
  CHECK_FALSE(anyRouterOrHead);

  model::CausalLM m2(c);
  config.applyOverride("quant.include=nothing.*");
  CHECK_THROWS_WITH(quant::attachQuantizers(m2, quant::QuantOptions::fromConfig(config)),
                    Catch::Contains("no linear layer matches"));
}

TEST_CASE("Quantizer state round-trips through JSON", "[quant][state]") {
  model::QuantLinear a(32, 16, false), b(32, 16, false);
  const fp4_config cfg = configFor(FP4_FORMAT_NVFP4, false);
  auto make = [&](model::QuantLinear& l, const std::string& name) {
    auto w = std::make_shared<quant::FakeQuantizer>(cfg, quant::Backward::StraightThrough,
                                                    quant::FakeQuantizer::Role::Weight, true);
    auto in = std::make_shared<quant::FakeQuantizer>(cfg, quant::Backward::StraightThrough,
                                                     quant::FakeQuantizer::Role::Input, true);
    return quant::QuantizedLayer{name, l, w, in};
  };
  std::vector<quant::QuantizedLayer> saved = {make(a, "x.a"), make(b, "x.b")};
  saved[0].weight->setAmax(1.5f), saved[0].input->setAmax(7.25f);
  saved[1].weight->setAmax(0.003f), saved[1].input->setAmax(123456.0f);
  quant::QuantOptions options;
  const std::string json = quant::quantStateJson(saved, options);
  std::vector<quant::QuantizedLayer> loaded = {make(a, "x.a"), make(b, "x.b")};
  quant::loadQuantState(loaded, json, "test");
  for (size_t i = 0; i < 2; ++i) {
    CHECK(loaded[i].weight->amax() == saved[i].weight->amax());
    CHECK(loaded[i].input->amax() == saved[i].input->amax());
  }
  std::vector<quant::QuantizedLayer> other = {make(a, "y.a")};
  CHECK_THROWS_WITH(quant::loadQuantState(other, json, "test"), Catch::Contains("no layer y.a"));
  CHECK_THROWS(quant::loadQuantState(other, "{not json", "test"));
}

TEST_CASE("Token KL matches a direct computation and ignores unscored positions", "[quant][kl]") {
  torch::manual_seed(11);
  torch::Tensor t = torch::randn({2, 5, 9}) * 2, s = torch::randn({2, 5, 9}) * 2;
  torch::Tensor targets = torch::full({2, 5}, 1, torch::kLong);
  targets.index_put_({0, 1}, -100);
  targets.index_put_({1, 4}, -100);
  for (double temperature : {1.0, 2.0}) {
    double sum = 0;
    int count = 0;
    for (int b = 0; b < 2; ++b)
      for (int i = 0; i < 5; ++i) {
        if (targets[b][i].item<int64_t>() == -100) continue;
        torch::Tensor p = torch::softmax(t[b][i].to(torch::kDouble) / temperature, 0);
        torch::Tensor q = torch::softmax(s[b][i].to(torch::kDouble) / temperature, 0);
        sum += (p * (p.log() - q.log())).sum().item<double>();
        ++count;
      }
    CHECK(train::tokenKl(t, s, targets, temperature).item<double>() ==
          Approx(sum / count).epsilon(1e-5));
  }
  CHECK(train::tokenKl(t, t, targets).item<double>() == Approx(0).margin(1e-6));
  // Changing an unscored position changes nothing.
  torch::Tensor s2 = s.clone();
  s2.index_put_({0, 1}, torch::randn({9}) * 10);
  CHECK(train::tokenKl(t, s2, targets).item<double>() ==
        Approx(train::tokenKl(t, s, targets).item<double>()));
}

TEST_CASE("Input quantizers reading one tensor share one computation, and stay exact",
          "[quant][shared]") {
  torch::manual_seed(5);
  const fp4_config cfg = configFor(FP4_FORMAT_NVFP4, false);
  auto make = [&](float amax) {
    auto q = std::make_shared<quant::FakeQuantizer>(cfg, quant::Backward::ClippedStraightThrough,
                                                    quant::FakeQuantizer::Role::Input, true);
    q->setAmax(amax);
    return q;
  };
  auto q1 = make(2.0f), q2 = make(2.0f), q3 = make(1.0f);
  torch::Tensor x0 = torch::randn({6, 32});
  torch::Tensor g1 = torch::randn({6, 32}), g2 = torch::randn({6, 32});

  // Two readers: the same result, and the gradient is the sum through one clipped STE.
  torch::Tensor x = x0.clone().requires_grad_(true);
  torch::Tensor y1 = q1->apply(x), y2 = q2->apply(x);
  CHECK(y1.data_ptr() == y2.data_ptr());
  CHECK(bitEqual(y1.detach(), exportThenDecode(x0, cfg, 2.0f)));
  ((y1 * g1).sum() + (y2 * g2).sum()).backward();
  torch::Tensor expected = (g1 + g2).masked_fill(x0.abs() > 2.0f, 0);
  CHECK(torch::allclose(x.grad(), expected));

  // A different amax, or a changed tensor, is computed afresh.
  torch::NoGradGuard noGrad;
  torch::Tensor z = x0.clone();
  torch::Tensor a = q1->apply(z);
  CHECK(bitEqual(q3->apply(z), exportThenDecode(x0, cfg, 1.0f)));
  z.mul_(3);
  CHECK(bitEqual(q1->apply(z), exportThenDecode(x0 * 3, cfg, 2.0f)));
  CHECK(bitEqual(a, exportThenDecode(x0, cfg, 2.0f)));  // earlier results are not overwritten

  // Measuring readers each get the statistics of what they read.
  q1->setMeasuring(true);
  q2->setMeasuring(true);
  torch::Tensor w = torch::randn({4, 32});
  q1->apply(w);
  q2->apply(w);
  CHECK(q1->stats().count == 4 * 32);
  CHECK(q2->stats().count == 4 * 32);
  CHECK(q1->stats().sum_err2 == q2->stats().sum_err2);
  quant::forgetSharedInput();
}

namespace {

model::CausalLM tinyLlama() {
  model::ModelConfig c;
  c.vocabSize = 64, c.hiddenSize = 64, c.intermediateSize = 128, c.numHiddenLayers = 2;
  c.numAttentionHeads = 4, c.numKeyValueHeads = 2, c.headDim = 16;
  torch::manual_seed(21);
  model::CausalLM m(c);
  torch::NoGradGuard noGrad;
  // Distinct amaxes inside each fused group.
  for (auto& [name, linear] : m->quantLinears()) {
    if (name.find("k_proj") != std::string::npos) linear->weight.mul_(3);
    if (name.find("up_proj") != std::string::npos) linear->weight.mul_(2);
  }
  return m;
}

quant::QuantizedLayer layerNamed(const std::vector<quant::QuantizedLayer>& layers,
                                 const std::string& name) {
  for (const auto& l : layers)
    if (l.name == name) return l;
  FAIL("no layer " + name);
  throw;
}

float absMax(const torch::Tensor& w) {
  return w.detach().abs().max().item<float>();
}

}  // namespace

TEST_CASE("NVFP4 fused groups share one tensor scale, as the export writes it",
          "[quant][shared_scale]") {
  const std::vector<std::vector<std::string>> groups = {
      {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"},
      {"mlp.gate_proj", "mlp.up_proj"},
      {"self_attn.o_proj"},
      {"mlp.down_proj"}};
  const torch::Tensor tokens = torch::randint(0, 64, {2, 16});
  for (const bool shared : {true, false}) {
    for (const bool frozen : {true, false}) {
      CAPTURE(shared, frozen);
      model::CausalLM m = tinyLlama();
      quant::QuantOptions options;
      options.format = FP4_FORMAT_NVFP4;
      options.frozenAmax = frozen;
      options.sharedGroupScale = shared;
      options.include = {"model.layers.*"};
      std::vector<quant::QuantizedLayer> layers = quant::attachQuantizers(m, options);
      quant::calibrate(layers, frozen ? 1 : 0, [&](int64_t) { m->forward(tokens); });
      torch::NoGradGuard noGrad;
      for (int layer = 0; layer < 2; ++layer) {
        const std::string prefix = "model.layers." + std::to_string(layer) + ".";
        for (const auto& group : groups) {
          float groupAmax = 0;
          for (const auto& g : group)
            groupAmax = std::max(groupAmax, absMax(layerNamed(layers, prefix + g).linear->weight));
          for (const auto& g : group) {
            quant::QuantizedLayer l = layerNamed(layers, prefix + g);
            CAPTURE(l.name);
            const float own = absMax(l.linear->weight);
            if (frozen) CHECK(l.weight->amax() == own);  // quant_state.json keeps its own amax
            const bool sharing = shared && group.size() > 1;
            CHECK(bool(l.weight->sharedScale()) == sharing);
            const float amax = sharing ? groupAmax : (frozen ? own : -1.0f);
            CHECK(l.weight->tensorAmax() == amax);
            // The forward's weight is the decode of the codes the export writes with that
            // tensor scale; with sharing off, exactly the per-layer fake quantization as before.
            const torch::Tensor w = l.linear->effectiveWeight();
            CHECK(bitEqual(w, exportThenDecode(l.linear->weight, l.weight->config(), amax)));
            if (!sharing)
              CHECK(bitEqual(w, quant::fakeQuantize(l.linear->weight, l.weight->config(),
                                                    frozen ? own : -1.0f)));
            const torch::Tensor x = torch::randn({3, l.linear->inFeatures()});
            const torch::Tensor xq =
                frozen ? exportThenDecode(x, l.input->config(), l.input->amax()) : x;
            if (frozen) CHECK(bitEqual(l.linear(x), torch::linear(xq, w, l.linear->bias)));
          }
        }
      }
      if (!frozen && shared) {
        // Dynamic amax follows the members' current weights: scaling v_proj moves k's scale.
        quant::QuantizedLayer k = layerNamed(layers, "model.layers.0.self_attn.k_proj");
        quant::QuantizedLayer v = layerNamed(layers, "model.layers.0.self_attn.v_proj");
        v.linear->weight.mul_(100);
        const float amax = absMax(v.linear->weight);
        CHECK(k.weight->tensorAmax() == amax);
        CHECK(bitEqual(k.linear->effectiveWeight(),
                       exportThenDecode(k.linear->weight, k.weight->config(), amax)));
      }
      // The option travels with quant_state.json; files without it load per-layer.
      const std::string json = quant::quantStateJson(layers, options);
      CHECK((json.find("\"shared_group_scale\": true") != std::string::npos) == shared);
      model::CausalLM reloaded = tinyLlama();
      quant::SavedQuantizers saved = quant::attachSavedQuantizers(reloaded, json, "test");
      CHECK(saved.options.sharedGroupScale == shared);
      CHECK(bool(layerNamed(saved.layers, "model.layers.1.mlp.up_proj").weight->sharedScale()) ==
            shared);
      if (frozen) {
        quant::QuantizedLayer a = layerNamed(layers, "model.layers.1.self_attn.q_proj");
        quant::QuantizedLayer b = layerNamed(saved.layers, "model.layers.1.self_attn.q_proj");
        CHECK(bitEqual(a.linear->effectiveWeight(), b.linear->effectiveWeight()));
      }
      nlohmann::json old = nlohmann::json::parse(json);
      old["options"].erase("shared_group_scale");
      model::CausalLM legacy = tinyLlama();
      quant::SavedQuantizers before = quant::attachSavedQuantizers(legacy, old.dump(), "test");
      CHECK_FALSE(before.options.sharedGroupScale);
      for (const auto& l : before.layers) CHECK_FALSE(l.weight->sharedScale());
    }
  }
  // MXFP4 ignores the option.
  run::RunConfig config = run::RunConfig::fromYamlText(
      "", {"recipe.name=qat", "quant.format=mxfp4", "quant.shared_group_scale=true"});
  CHECK_FALSE(quant::QuantOptions::fromConfig(config).sharedGroupScale);
  config.applyOverride("quant.format=nvfp4");
  CHECK(quant::QuantOptions::fromConfig(config).sharedGroupScale);
  config.applyOverride("quant.shared_group_scale=false");
  CHECK_FALSE(quant::QuantOptions::fromConfig(config).sharedGroupScale);
}
