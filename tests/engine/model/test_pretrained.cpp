// Hugging Face folders: save/load round trips bit for bit, hand-written sharded checkpoints,
// dtype conversion, the errors for mismatched checkpoints, and the folder replace protocol.
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "fp4lab/error.h"
#include "fp4lab/io/safetensors.h"
#include "model/causal_lm.h"
#include "model/config.h"
#include "fp4lab/common/files.h"
#include "model/pretrained.h"

using namespace fp4lab::model;
namespace files = fp4lab::files;
using Json = nlohmann::json;

namespace {

ModelConfig fixture(const std::string& name) {
  return loadModelConfig(std::string(FP4LAB_TEST_DATA_DIR) + "/" + name + ".json");
}

Json fixtureJson(const std::string& name) {
  std::ifstream stream(std::string(FP4LAB_TEST_DATA_DIR) + "/" + name + ".json");
  return Json::parse(stream);
}

// std::filesystem is off limits next to libtorch (see model/files.h).
struct TempDir {
  TempDir() {
    const char* root = std::getenv("TMPDIR");
    path = files::makeTemporaryDirectory(std::string(root && *root ? root : "/tmp") +
                                         "/fp4lab-pretrained-test-");
  }
  ~TempDir() { files::removeTree(path); }
  std::string operator/(const std::string& name) const { return files::join(path, name); }
  std::string path;
};

CausalLM randomModel(const std::string& name, torch::Dtype dtype, uint64_t seed) {
  CausalLM model(fixture(name), torch::TensorOptions(dtype));
  torch::NoGradGuard noGrad;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  for (auto& item : model->named_parameters()) {
    item.value().copy_(
        at::randn(item.value().sizes(), generator, torch::TensorOptions(torch::kFloat)) * 0.5);
  }
  return model;
}

torch::Tensor ids(const ModelConfig& config) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(17);
  return at::randint(config.vocabSize, {2, 7}, generator, torch::TensorOptions(torch::kLong));
}

bool sameParameters(CausalLM& a, CausalLM& b) {
  const auto left = a->named_parameters(), right = b->named_parameters();
  if (left.size() != right.size()) return false;
  for (const auto& item : left) {
    const torch::Tensor* other = right.find(item.key());
    if (!other || !torch::equal(item.value(), *other)) return false;
  }
  return true;
}

fp4lab::io::DType fileType(torch::Dtype dtype) {
  switch (dtype) {
    case torch::kFloat:
      return fp4lab::io::DType::F32;
    case torch::kBFloat16:
      return fp4lab::io::DType::BF16;
    case torch::kHalf:
      return fp4lab::io::DType::F16;
    case torch::kInt:
      return fp4lab::io::DType::I32;
    default:
      FAIL("unexpected dtype");
      return fp4lab::io::DType::F32;
  }
}

void addTensor(fp4lab::io::SafetensorsWriter& writer, const std::string& name,
               const torch::Tensor& tensor) {
  const torch::Tensor host = tensor.detach().cpu().contiguous();
  writer.add(name, fileType(host.scalar_type()), host.sizes().vec(), host.data_ptr(),
             static_cast<uint64_t>(host.nbytes()));
}

// A checkpoint folder written by hand, not by savePretrained.
void writeFolder(const std::string& dir, const Json& config,
                 const std::map<std::string, torch::Tensor>& tensors) {
  files::createDirectories(dir);
  std::ofstream(dir + "/config.json") << config.dump();
  fp4lab::io::SafetensorsWriter writer;
  for (const auto& [name, tensor] : tensors) addTensor(writer, name, tensor);
  writer.write(dir + "/model.safetensors");
}

std::map<std::string, torch::Tensor> tensorsOf(CausalLM& model) {
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& item : model->named_parameters()) tensors[item.key()] = item.value();
  return tensors;
}

// A safetensors file written byte by byte with a header whose length leaves the data section
// at an odd offset, so every tensor in the mapping is misaligned for its dtype (the format
// allows it; SafetensorsWriter never does it).
void writeMisaligned(const std::string& path, const std::map<std::string, torch::Tensor>& tensors) {
  Json header = Json::object();
  std::string data;
  for (const auto& [name, tensor] : tensors) {
    const torch::Tensor host = tensor.detach().to(torch::kFloat).contiguous();
    const size_t begin = data.size();
    data.append(static_cast<const char*>(host.data_ptr()), host.nbytes());
    header[name] = {
        {"dtype", "F32"}, {"shape", host.sizes().vec()}, {"data_offsets", {begin, data.size()}}};
  }
  std::string text = header.dump();
  while ((8 + text.size()) % 8 != 1) text += ' ';
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  std::ofstream(path, std::ios::binary) << file << text << data;
}

std::string loadError(const std::string& dir) {
  try {
    loadPretrained(dir, torch::kFloat);
  } catch (const fp4lab::Error& error) {
    return error.what();
  }
  FAIL("loading " << dir << " should have failed");
  return {};
}

}  // namespace

TEST_CASE("save then load reproduces the logits bit for bit", "[model][pretrained]") {
  TempDir temp;
  SECTION("fp32 model saved as F32") {
    for (const char* name : {"llama_gqa", "qwen2_bias_tied", "qwen3_qknorm", "mixtral_moe"}) {
      INFO(name);
      CausalLM model = randomModel(name, torch::kFloat, 1);
      const std::string dir = temp / name;
      savePretrained(model, dir, torch::kFloat);
      const fp4lab::io::SafetensorsFile file(dir + "/model.safetensors");
      CHECK(file.tensors().size() == model->named_parameters().size());
      CHECK(file.at("model.norm.weight").dtype == fp4lab::io::DType::F32);
      CHECK((file.find("lm_head.weight") == nullptr) == model->config().tieWordEmbeddings);

      CausalLM loaded = loadPretrained(dir, torch::kFloat);
      CHECK(loaded->dtype() == torch::kFloat);
      CHECK(sameParameters(model, loaded));
      const torch::Tensor input = ids(model->config());
      CHECK(torch::equal(loaded->forward(input), model->forward(input)));
    }
  }
  SECTION("BF16") {
    CausalLM model = randomModel("llama3_rope", torch::kFloat, 2);
    const torch::Tensor input = ids(model->config());
    // An fp32 model saved as BF16 and loaded as BF16 is the fp32 model rounded to BF16.
    savePretrained(model, temp / "a");  // BF16 is the default
    CHECK(fp4lab::io::SafetensorsFile(temp / "a/model.safetensors").at("lm_head.weight").dtype ==
          fp4lab::io::DType::BF16);
    CausalLM loaded = loadPretrained(temp / "a", torch::kBFloat16);
    CausalLM rounded = copyCausalLM(model, torch::TensorOptions(torch::kBFloat16));
    CHECK(sameParameters(loaded, rounded));
    CHECK(torch::equal(loaded->forward(input), rounded->forward(input)));
    // And a BF16 model round-trips exactly.
    savePretrained(loaded, temp / "b", torch::kBFloat16);
    CausalLM again = loadPretrained(temp / "b", torch::kBFloat16);
    CHECK(torch::equal(again->forward(input), loaded->forward(input)));
    // The same BF16 file loaded as fp32 holds the same values.
    CausalLM wide = loadPretrained(temp / "b", torch::kFloat);
    CausalLM widened = copyCausalLM(loaded, torch::TensorOptions(torch::kFloat));
    CHECK(sameParameters(wide, widened));
  }
  SECTION("config fields survive") {
    CausalLM model = randomModel("qwen3_qknorm", torch::kFloat, 3);
    model->mutableConfig().extra["transformers_version"] = "4.51.3";
    SaveOptions options;
    options.dtype = torch::kFloat;
    options.extraConfig = {{"quantization_config", {{"quant_method", "none"}}}};
    savePretrained(model, temp / "c", options);
    std::ifstream stream(temp / "c/config.json");
    const Json written = Json::parse(stream);
    CHECK(written.at("torch_dtype") == "float32");
    CHECK(written.at("transformers_version") == "4.51.3");
    CHECK(written.at("quantization_config").at("quant_method") == "none");
    CHECK(written.at("eos_token_id") == Json::array({5, 7}));
    std::ifstream generation(temp / "c/generation_config.json");
    CHECK(Json::parse(generation).at("eos_token_id") == Json::array({5, 7}));
    const ModelConfig config = loadPretrained(temp / "c", torch::kFloat)->config();
    CHECK(config.headDim == 12);
    CHECK(config.stopTokenIds() == std::vector<int64_t>{5, 7});
  }
}

TEST_CASE("sharded checkpoints load through the index", "[model][pretrained]") {
  TempDir temp;
  CausalLM model = randomModel("llama_gqa", torch::kFloat, 4);
  {
    // Values representable in BF16, so the BF16 shard converts exactly.
    torch::NoGradGuard noGrad;
    for (auto& item : model->named_parameters())
      item.value().copy_(item.value().to(torch::kBFloat16));
  }
  const torch::Tensor input = ids(model->config());
  const torch::Tensor expected = model->forward(input);

  SECTION("two shards written by hand, one F32 and one BF16") {
    const std::string dir = temp / "sharded";
    files::createDirectories(dir);
    std::ofstream(dir + "/config.json") << fixtureJson("llama_gqa").dump();
    fp4lab::io::SafetensorsWriter first, second;
    Json weightMap = Json::object();
    size_t i = 0;
    for (const auto& item : model->named_parameters()) {
      if (i++ % 2 == 0) {
        addTensor(first, item.key(), item.value());
        weightMap[item.key()] = "model-00001-of-00002.safetensors";
      } else {
        addTensor(second, item.key(), item.value().to(torch::kBFloat16));
        weightMap[item.key()] = "model-00002-of-00002.safetensors";
      }
    }
    first.write(dir + "/model-00001-of-00002.safetensors");
    second.write(dir + "/model-00002-of-00002.safetensors");
    std::ofstream(dir + "/model.safetensors.index.json")
        << Json{{"metadata", {{"total_size", 0}}}, {"weight_map", weightMap}}.dump();

    CausalLM loaded = loadPretrained(dir, torch::kFloat);
    CHECK(sameParameters(loaded, model));
    CHECK(torch::equal(loaded->forward(input), expected));

    SECTION("an index naming a missing shard") {
      std::remove((dir + "/model-00002-of-00002.safetensors").c_str());
      CHECK_THAT(loadError(dir), Catch::Contains("model-00002-of-00002.safetensors"));
    }
    SECTION("an index mapping a tensor to the wrong shard") {
      weightMap["model.norm.weight"] =
          weightMap["model.norm.weight"] == "model-00001-of-00002.safetensors"
              ? "model-00002-of-00002.safetensors"
              : "model-00001-of-00002.safetensors";
      std::ofstream(dir + "/model.safetensors.index.json", std::ios::trunc)
          << Json{{"weight_map", weightMap}}.dump();
      CHECK_THAT(loadError(dir), Catch::Contains("model.norm.weight"));
    }
    SECTION("an index escaping the folder") {
      weightMap["model.norm.weight"] = "../elsewhere.safetensors";
      std::ofstream(dir + "/model.safetensors.index.json", std::ios::trunc)
          << Json{{"weight_map", weightMap}}.dump();
      CHECK_THAT(loadError(dir), Catch::Contains("../elsewhere.safetensors"));
    }
  }
  SECTION("savePretrained shards large checkpoints") {
    SaveOptions options;
    options.dtype = torch::kFloat;
    options.maxShardBytes = 8000;  // the 61x32 fp32 embedding alone is 7808 bytes
    savePretrained(model, temp / "big", options);
    CHECK_FALSE(files::exists(temp / "big/model.safetensors"));
    std::ifstream stream(temp / "big/model.safetensors.index.json");
    const Json index = Json::parse(stream);
    std::set<std::string> files;
    for (const auto& [name, file] : index.at("weight_map").items())
      files.insert(file.get<std::string>());
    CHECK(files.size() > 3);
    CHECK(files.count("model-00001-of-" +
                      std::string(5 - std::to_string(files.size()).size(), '0') +
                      std::to_string(files.size()) + ".safetensors"));
    uint64_t total = 0;
    for (const auto& item : model->named_parameters()) total += item.value().nbytes();
    CHECK(index.at("metadata").at("total_size") == total);
    CausalLM loaded = loadPretrained(temp / "big", torch::kFloat);
    CHECK(torch::equal(loaded->forward(input), expected));
  }
}

TEST_CASE("misaligned tensor data loads correctly", "[model][pretrained]") {
  TempDir temp;
  CausalLM model = randomModel("mixtral_moe", torch::kFloat, 9);
  const std::string dir = temp / "odd";
  files::createDirectories(dir);
  std::ofstream(dir + "/config.json") << fixtureJson("mixtral_moe").dump();
  writeMisaligned(dir + "/model.safetensors", tensorsOf(model));
  CausalLM loaded = loadPretrained(dir, torch::kFloat);
  CHECK(sameParameters(loaded, model));
}

TEST_CASE("F16 checkpoints convert to the requested dtype", "[model][pretrained]") {
  TempDir temp;
  CausalLM model = randomModel("qwen2_bias_tied", torch::kFloat, 5);
  {
    torch::NoGradGuard noGrad;
    for (auto& item : model->named_parameters()) item.value().copy_(item.value().to(torch::kHalf));
  }
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& item : model->named_parameters())
    tensors[item.key()] = item.value().to(torch::kHalf);
  // A tied checkpoint may carry lm_head anyway, and old ones carry rotary buffers: both ignored.
  tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"];
  tensors["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch::ones({3}, torch::kFloat);
  writeFolder(temp / "f16", fixtureJson("qwen2_bias_tied"), tensors);
  CausalLM loaded = loadPretrained(temp / "f16", torch::kFloat);
  CHECK(sameParameters(loaded, model));
  CausalLM loadedDouble = loadPretrained(temp / "f16", torch::kDouble);
  CHECK(loadedDouble->dtype() == torch::kDouble);
  CHECK(torch::equal(loadedDouble->named_parameters()["model.norm.weight"].to(torch::kFloat),
                     model->named_parameters()["model.norm.weight"]));
}

TEST_CASE("mismatched checkpoints throw fp4lab::Error naming the tensors",
          "[model][pretrained][errors]") {
  TempDir temp;
  CausalLM model = randomModel("llama_gqa", torch::kFloat, 6);
  const Json config = fixtureJson("llama_gqa");
  auto tensors = tensorsOf(model);

  SECTION("missing tensor") {
    tensors.erase("model.layers.1.mlp.down_proj.weight");
    writeFolder(temp / "m", config, tensors);
    const std::string message = loadError(temp / "m");
    CHECK_THAT(message, Catch::Contains("model.layers.1.mlp.down_proj.weight"));
    CHECK_THAT(message, Catch::Contains("missing"));
  }
  SECTION("unexpected tensor") {
    tensors["model.layers.0.self_attn.extra_proj.weight"] = torch::zeros({2, 2});
    writeFolder(temp / "u", config, tensors);
    const std::string message = loadError(temp / "u");
    CHECK_THAT(message, Catch::Contains("model.layers.0.self_attn.extra_proj.weight"));
    CHECK_THAT(message, Catch::Contains("unexpected"));
  }
  SECTION("lm_head missing from an untied model") {
    tensors.erase("lm_head.weight");
    writeFolder(temp / "h", config, tensors);
    CHECK_THAT(loadError(temp / "h"), Catch::Contains("lm_head.weight"));
  }
  SECTION("wrong shape") {
    tensors["model.norm.weight"] = torch::ones({5});
    writeFolder(temp / "s", config, tensors);
    const std::string message = loadError(temp / "s");
    CHECK_THAT(message, Catch::Contains("model.norm.weight"));
    CHECK_THAT(message, Catch::Contains("[5]"));
    CHECK_THAT(message, Catch::Contains("[32]"));
  }
  SECTION("integer tensor") {
    tensors["model.norm.weight"] = torch::ones({32}, torch::kInt);
    writeFolder(temp / "i", config, tensors);
    const std::string message = loadError(temp / "i");
    CHECK_THAT(message, Catch::Contains("model.norm.weight"));
    CHECK_THAT(message, Catch::Contains("I32"));
  }
  SECTION("unknown architecture") {
    Json bad = config;
    bad["architectures"] = {"GPT2LMHeadModel"};
    writeFolder(temp / "a", bad, tensors);
    const std::string message = loadError(temp / "a");
    CHECK_THAT(message, Catch::Contains("GPT2LMHeadModel"));
    CHECK_THAT(message, Catch::Contains("config.json"));
  }
  SECTION("missing config field") {
    Json bad = config;
    bad.erase("num_attention_heads");
    writeFolder(temp / "f", bad, tensors);
    CHECK_THAT(loadError(temp / "f"), Catch::Contains("num_attention_heads"));
  }
  SECTION("config describing another model") {
    Json bad = config;
    bad["intermediate_size"] = 64;
    writeFolder(temp / "c", bad, tensors);
    const std::string message = loadError(temp / "c");
    CHECK_THAT(message, Catch::Contains("_proj.weight"));
    CHECK_THAT(message, Catch::Contains("shape"));
  }
  SECTION("no weights, no folder") {
    files::createDirectories(temp / "n");
    std::ofstream(temp / "n/config.json") << config.dump();
    CHECK_THAT(loadError(temp / "n"), Catch::Contains("model.safetensors"));
    CHECK_THROWS_AS(loadPretrained(temp / "does-not-exist"), fp4lab::Error);
  }
}

TEST_CASE("savePretrained replaces a folder only with a complete one",
          "[model][pretrained][save]") {
  TempDir temp;
  CausalLM first = randomModel("llama_gqa", torch::kFloat, 7);
  CausalLM second = randomModel("llama_gqa", torch::kFloat, 8);
  const std::string dir = temp / "ckpt";
  auto leftovers = [&] {
    int count = 0;
    for (const std::string& entry : files::listDirectory(temp.path)) count += entry != "ckpt";
    return count;
  };

  savePretrained(first, dir, torch::kFloat);
  std::ofstream(dir + "/stale.txt") << "from an earlier save";
  savePretrained(second, dir + "/", torch::kFloat);  // trailing slash names the same folder
  CausalLM loaded = loadPretrained(dir, torch::kFloat);
  CHECK(sameParameters(loaded, second));
  CHECK_FALSE(files::exists(dir + "/stale.txt"));  // the folder was replaced, not merged
  CHECK(leftovers() == 0);

  SECTION("a failing save leaves the previous folder intact") {
    SaveOptions badType;
    badType.dtype = torch::kInt;
    CHECK_THROWS_AS(savePretrained(first, dir, badType), fp4lab::Error);
    SaveOptions badExtra;
    badExtra.dtype = torch::kFloat;
    badExtra.extraFiles = {temp / "no-such-tokenizer.json"};
    CHECK_THROWS_AS(savePretrained(first, dir, badExtra), fp4lab::Error);
    CausalLM reloaded = loadPretrained(dir, torch::kFloat);
    CHECK(sameParameters(reloaded, second));
    CHECK(leftovers() == 0);
  }
  SECTION("a file in the way is not replaced") {
    const std::string file = temp / "file";
    std::ofstream(file) << "precious";
    CHECK_THROWS_AS(savePretrained(first, file, torch::kFloat), fp4lab::Error);
    std::ifstream stream(file);
    std::string content;
    stream >> content;
    CHECK(content == "precious");
    int others = 0;
    for (const std::string& entry : files::listDirectory(temp.path)) {
      others += entry != "ckpt" && entry != "file";
    }
    CHECK(others == 0);
  }
  SECTION("extra files are copied in; new parent folders are created") {
    std::ofstream(temp / "tokenizer.json") << R"({"model": {}})";
    SaveOptions options;
    options.extraFiles = {temp / "tokenizer.json"};
    savePretrained(first, temp / "nested/deeper/out", options);
    CHECK(files::exists(temp / "nested/deeper/out/tokenizer.json"));
    CHECK(files::exists(temp / "nested/deeper/out/generation_config.json"));
    CHECK(loadPretrained(temp / "nested/deeper/out", torch::kBFloat16)->dtype() ==
          torch::kBFloat16);
  }
  SECTION("publishFolder into a fresh target") {
    const std::string staging = temp / "staging";
    files::createDirectories(staging);
    std::ofstream(staging + "/a.txt") << "x";
    files::publishFolder(staging, temp / "published");
    CHECK(files::exists(temp / "published/a.txt"));
    CHECK_FALSE(files::exists(staging));
  }
}
