// Every path that loads a model loads what was saved: a folder with quant_state.json comes back
// fake-quantized with its options and amaxes (also from the older file without "options"), as
// the public Model scores it; --bf16 (bf16Weights) gives the weights without quantizers; a run
// starting from a quantized model adopts its quantizers or refuses; bad files say what is wrong.
// LibTorch first: its c10 logging defines a CHECK macro that Catch's must replace.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <nlohmann/json.hpp>

#include "../temp_dir.h"
#include "fp4lab/error.h"
#include "fp4lab/io/safetensors.h"
#include "fp4lab/kernels/fp4.h"
#include "fp4lab/run/model.h"
#include "quant/quantize_model.h"
#include "run/model_source.h"
#include "train/recipe.h"

using namespace fp4lab;

namespace {

// A random tiny model, fake-quantized in NVFP4 W4A4 with amaxes calibrated on one batch, saved
// (fp32 weights + quant_state.json) the way a PTQ run saves its model.
struct SavedQuantized {
  testing::TempDir dir;
  run::ModelBundle bundle;
  quant::QuantOptions options;
  std::vector<quant::QuantizedLayer> layers;
  torch::Tensor input;
  std::string folder;

  SavedQuantized() {
    bundle = run::loadModelBundle("scratch:tiny", torch::kFloat32, 11);
    run::RunConfig config = run::RunConfig::fromYamlText(
        "", {"recipe.name=ptq", "quant.format=nvfp4", "quant.exclude=*lm_head*,*embed*,*.o_proj"});
    options = quant::QuantOptions::fromConfig(config);
    layers = quant::attachQuantizers(bundle.model, options);
    torch::manual_seed(3);
    input = torch::randint(0, 200, {2, 24}, torch::kLong);
    quant::calibrate(layers, 1, [&](int64_t) { bundle.model->forward(input); });
    folder = dir.file("model");
    run::saveModelBundle(bundle, folder, torch::kFloat32);
    std::ofstream(std::filesystem::path(folder) / quant::kQuantStateFile)
        << quant::quantStateJson(layers, options);
  }
  torch::Tensor logits(run::ModelBundle& b) const {
    torch::NoGradGuard noGrad;
    b.model->eval();
    return b.model->forward(input);
  }
};

}  // namespace

TEST_CASE("A saved fake-quantized model loads fake-quantized, with its options and amaxes",
          "[run][load]") {
  SavedQuantized saved;
  run::ModelBundle loaded = run::loadModelBundle(saved.folder, torch::kFloat32);
  REQUIRE(loaded.quantizers.size() == saved.layers.size());
  for (size_t i = 0; i < saved.layers.size(); ++i) {
    CHECK(loaded.quantizers[i].name == saved.layers[i].name);
    CHECK(loaded.quantizers[i].weight->amax() == saved.layers[i].weight->amax());
    CHECK(loaded.quantizers[i].input->amax() == saved.layers[i].input->amax());
  }
  CHECK(quant::sameQuantization(loaded.quantOptions, saved.options));
  CHECK(loaded.quantization().rfind("NVFP4 W4A4", 0) == 0);
  // The forward is the saved quantized model's, bit for bit.
  run::ModelBundle& original = saved.bundle;
  CHECK(torch::equal(saved.logits(loaded), saved.logits(original)));

  // The BF16 weights on request: no quantizers, the unquantized forward.
  run::ModelBundle plain = run::loadModelBundle(saved.folder, torch::kFloat32, 0, true);
  CHECK(plain.quantizers.empty());
  CHECK(plain.quantization() == "bf16");
  run::ModelBundle fresh = run::loadModelBundle("scratch:tiny", torch::kFloat32, 11);
  CHECK(torch::equal(saved.logits(plain), saved.logits(fresh)));
  CHECK_FALSE(torch::equal(saved.logits(plain), saved.logits(loaded)));
}

TEST_CASE("An older quant_state.json without options is read from its description", "[run][load]") {
  SavedQuantized saved;
  const std::string path = (std::filesystem::path(saved.folder) / quant::kQuantStateFile).string();
  nlohmann::json j = nlohmann::json::parse(std::ifstream(path));
  j.erase("options");
  std::ofstream(path) << j.dump(2);
  run::ModelBundle loaded = run::loadModelBundle(saved.folder, torch::kFloat32);
  CHECK(quant::sameQuantization(loaded.quantOptions, saved.options));
  CHECK(torch::equal(saved.logits(loaded), saved.logits(saved.bundle)));
}

TEST_CASE("A malformed quant_state.json is an error that names it", "[run][load]") {
  SavedQuantized saved;
  const std::string path = (std::filesystem::path(saved.folder) / quant::kQuantStateFile).string();
  std::ofstream(path) << "{\"layers\": {\"model.layers.9.mlp.up_proj\": {\"weight_amax\": 1}},"
                         " \"format\": \"NVFP4 W4A16\"}";
  CHECK_THROWS_WITH(
      run::loadModelBundle(saved.folder, torch::kFloat32),
      Catch::Contains("which the model lacks") && Catch::Contains("quant_state.json"));
  std::ofstream(path) << "not json";
  CHECK_THROWS_WITH(run::loadModelBundle(saved.folder, torch::kFloat32),
                    Catch::Contains("malformed quantizer state"));
  // ... and the BF16 weights still load.
  CHECK(run::loadModelBundle(saved.folder, torch::kFloat32, 0, true).quantizers.empty());
}

TEST_CASE("The public Model scores the saved quantized model as the in-memory one", "[run][load]") {
  SavedQuantized saved;
  run::Model model = run::Model::load(saved.folder);
  CHECK(model.info().quantized);
  CHECK(model.info().quantization.find("(" + std::to_string(saved.layers.size()) + " layers)") !=
        std::string::npos);
  data::Example row;
  row.source = "test:1";
  for (int64_t j = 0; j < saved.input.size(1); ++j)
    row.inputIds.push_back(int32_t(saved.input[0][j].item<int64_t>()));
  const run::EvalResult scored = model.evaluate({row});
  // The same row through the in-memory quantized model: next-token cross-entropy of positions
  // 1..n-1 (the first token is no target).
  torch::NoGradGuard noGrad;
  const torch::Tensor in = saved.input.slice(0, 0, 1);
  const torch::Tensor logits = saved.bundle.model->forward(in.slice(1, 0, in.size(1) - 1));
  const double expected = torch::nn::functional::cross_entropy(
                              logits.reshape({-1, logits.size(-1)}), in.slice(1, 1).reshape({-1}))
                              .item<double>();
  CHECK(scored.tokens == in.size(1) - 1);
  CHECK(scored.meanLoss == Approx(expected).epsilon(1e-6));
  CHECK(run::Model::load(saved.folder, {true}).evaluate({row}).meanLoss != Approx(scored.meanLoss));
}

TEST_CASE("A run from a quantized model adopts its quantizers or refuses", "[run][load]") {
  SavedQuantized saved;
  auto prepare = [&](const std::vector<std::string>& overrides) {
    run::RunConfig config = run::RunConfig::fromYamlText("", overrides);
    run::ModelBundle b = run::loadModelBundle(saved.folder, torch::kFloat32);
    std::unique_ptr<train::Recipe> recipe = train::makeRecipe(config);
    train::RecipeContext context;
    context.savedQuantizers = b.quantizers;
    context.savedOptions = b.quantOptions;
    context.calibrationBatch = [&](int64_t) {
      FAIL("a recipe adopting saved quantizers must not calibrate");
      return train::Batch{};
    };
    recipe->prepare(b.model, context);
    return recipe->quantizedLayers().size();
  };
  // QAT with the same quantization continues from the saved amaxes (ModelOpt's PTQ then QAT).
  CHECK(prepare({"recipe.name=qat", "quant.format=nvfp4",
                 "quant.exclude=*lm_head*,*embed*,*.o_proj"}) == saved.layers.size());
  CHECK_THROWS_WITH(prepare({"recipe.name=qat", "quant.format=mxfp4",
                             "quant.exclude=*lm_head*,*embed*,*.o_proj"}),
                    Catch::Contains("holds a fake-quantized model (NVFP4") &&
                        Catch::Contains("model.bf16_weights=true"));
  CHECK_THROWS_WITH(prepare({"recipe.name=qat", "quant.format=nvfp4"}),
                    Catch::Contains("on other layers"));
  CHECK_THROWS_WITH(prepare({"recipe.name=sft"}), Catch::Contains("recipe sft trains BF16"));
}

TEST_CASE("A saved model carries its tokenizer even when the folder it came from is gone",
          "[run][load]") {
  testing::TempDir dir;
  SavedQuantized saved;
  const std::filesystem::path source = dir.path / "source";
  std::filesystem::copy(saved.folder, source);
  const std::string tokenizerJson = "{\"fake\": \"tokenizer.json content\"}\n";
  std::ofstream(source / "tokenizer.json") << tokenizerJson;
  run::ModelBundle b = run::loadModelBundle(source.string(), torch::kFloat32);
  // A resumed run's checkpoint is pruned while the run goes on.
  std::filesystem::remove_all(source);
  const std::string out = (dir.path / "out").string();
  run::saveModelBundle(b, out, torch::kFloat32);
  std::ifstream in(std::filesystem::path(out) / "tokenizer.json");
  std::stringstream text;
  text << in.rdbuf();
  CHECK(text.str() == tokenizerJson);
}

namespace {

// The saved model written in an `fp4lab export` NVFP4 layout by the kernels, as
// engine/export/export.cpp writes it: ModelOpt (weight U8 codes, weight_scale E4M3,
// weight_scale_2 = amax / 2688, input_scale) or compressed-tensors (weight_packed, the reciprocal
// weight_global_scale = 2688 / amax, input_global_scale), the fused groups' shared amax.
std::string writeNvfp4Export(const run::ModelBundle& original, const std::string& savedFolder,
                             const std::string& folder, bool compressed) {
  std::map<std::string, const quant::QuantizedLayer*> byName;
  for (const auto& l : original.quantizers) byName[l.name] = &l;
  io::SafetensorsWriter writer;
  torch::NoGradGuard noGrad;
  for (const auto& item : original.model->named_parameters()) {
    const std::string& name = item.key();
    torch::Tensor v = item.value().detach().to(torch::kFloat32).contiguous();
    std::vector<int64_t> shape(v.sizes().begin(), v.sizes().end());
    const bool isWeight = name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
    auto it = isWeight ? byName.find(name.substr(0, name.size() - 7)) : byName.end();
    if (it == byName.end()) {
      writer.addFloat32(name, shape, std::vector<float>(v.data_ptr<float>(),
                                                        v.data_ptr<float>() + v.numel()));
      continue;
    }
    const quant::QuantizedLayer& l = *it->second;
    const int64_t rows = v.size(0), cols = v.size(1);
    const float amax = l.weight->tensorAmax();
    std::vector<uint8_t> codes(size_t(rows * cols / 2)), scales(size_t(rows * cols / 16));
    float s2 = 0;
    const fp4_config config = l.weight->config();
    REQUIRE(fp4_quantize(&config, v.data_ptr<float>(), rows, cols, amax, codes.data(),
                         scales.data(), &s2) == FP4_OK);
    const std::vector<int64_t> scalar = compressed ? std::vector<int64_t>{1} : std::vector<int64_t>{};
    const float global = compressed ? 2688.0f / amax : s2;
    const float input =
        compressed ? 2688.0f / l.input->amax() : fp4_nvfp4_global_scale(l.input->amax());
    writer.add(l.name + (compressed ? ".weight_packed" : ".weight"), io::DType::U8,
               {rows, cols / 2}, codes);
    writer.add(l.name + ".weight_scale", io::DType::F8_E4M3, {rows, cols / 16}, scales);
    writer.add(l.name + (compressed ? ".weight_global_scale" : ".weight_scale_2"),
               io::DType::F32, scalar, &global, 4);
    writer.add(l.name + (compressed ? ".input_global_scale" : ".input_scale"), io::DType::F32,
               scalar, &input, 4);
  }
  std::filesystem::create_directories(folder);
  writer.write((std::filesystem::path(folder) / "model.safetensors").string());
  nlohmann::json config =
      nlohmann::json::parse(std::ifstream(std::filesystem::path(savedFolder) / "config.json"));
  if (compressed)
    config["quantization_config"] = {
        {"quant_method", "compressed-tensors"},
        {"format", "nvfp4-pack-quantized"},
        {"config_groups",
         {{"group_0", {{"targets", {"Linear"}}, {"input_activations", {{"num_bits", 4}}}}}}}};
  else
    config["quantization_config"] = {{"quant_method", "modelopt"}, {"quant_algo", "NVFP4"}};
  std::ofstream(std::filesystem::path(folder) / "config.json") << config.dump(2);
  return folder;
}

}  // namespace

TEST_CASE("An NVFP4 export folder loads decoded and fake-quantized, as the run evaluated it",
          "[run][load][export]") {
  SavedQuantized saved;
  run::ModelBundle original = run::loadModelBundle(saved.folder, torch::kFloat32);
  for (bool compressed : {false, true}) {
    INFO((compressed ? "compressed-tensors-nvfp4" : "modelopt-nvfp4"));
    const std::string folder = writeNvfp4Export(
        original, saved.folder, saved.dir.file(compressed ? "ct" : "modelopt"), compressed);
    run::ModelBundle loaded = run::loadModelBundle(folder, torch::kFloat32);
    CHECK(loaded.exportFormat == (compressed ? "compressed-tensors-nvfp4" : "modelopt-nvfp4"));
    REQUIRE(loaded.quantizers.size() == original.quantizers.size());
    CHECK(quant::sameQuantization(loaded.quantOptions, original.quantOptions));
    CHECK(loaded.quantization().find("decoded from a " + loaded.exportFormat + " export folder") !=
          std::string::npos);
    torch::NoGradGuard noGrad;
    int sameScales = 0;
    for (size_t i = 0; i < loaded.quantizers.size(); ++i) {
      const quant::QuantizedLayer& l = loaded.quantizers[i];
      const quant::QuantizedLayer& o = original.quantizers[i];
      REQUIRE(l.name == o.name);
      const float amax = l.weight->tensorAmax();
      const torch::Tensor w = l.linear->weight;
      // Re-quantizing the decoded weight with the file's scales reproduces it bit for bit.
      CHECK(torch::equal(quant::fakeQuantize(w, l.weight->config(), amax), w));
      const bool same =
          fp4_nvfp4_global_scale(amax) == fp4_nvfp4_global_scale(o.weight->tensorAmax()) &&
          fp4_nvfp4_global_scale(l.input->amax()) == fp4_nvfp4_global_scale(o.input->amax());
      sameScales += same;
      // ModelOpt stores the scales themselves: exact. compressed-tensors' reciprocal 2688 / amax
      // sometimes cannot tell two neighbouring scales apart.
      if (!compressed) CHECK(same);
      if (same)
        CHECK(torch::equal(
            w, quant::fakeQuantize(o.linear->weight, o.weight->config(), o.weight->tensorAmax())));
    }
    const torch::Tensor got = saved.logits(loaded), want = saved.logits(original);
    if (sameScales == int(loaded.quantizers.size()))
      CHECK(torch::equal(got, want));
    else
      CHECK(torch::allclose(got, want, 1e-4, 1e-4));
    // --bf16: the decoded weights without quantizers.
    run::ModelBundle plain = run::loadModelBundle(folder, torch::kFloat32, 0, true);
    CHECK(plain.quantizers.empty());
    CHECK(plain.exportFormat == loaded.exportFormat);
  }
}
