// The exporter: plans the output tensors of every format from the input's safetensors headers
// (and its quant_state.json), writes them shard by shard, tensor by tensor, from the memory-mapped
// input into a temporary sibling folder, reads everything back and checks it, then publishes the
// folder. See ../shared/design/fp4-numerics.md for the arithmetic and the layouts.
#include "fp4lab/export/export.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "fp4lab/common/files.h"
#include "fp4lab/common/glob.h"
#include "fp4lab/common/system.h"
#include "fp4lab/error.h"
#include "fp4lab/export/fused_groups.h"
#include "fp4lab/export/gpt_oss_layout.h"
#include "fp4lab/io/safetensors.h"
#include "fp4lab/kernels/fp4.h"
#include "fp4lab/run/run_config.h"

#ifndef FP4LAB_VERSION
#define FP4LAB_VERSION "unknown"
#endif

namespace fp4lab::exporter {
namespace {

using io::DType;
using json = nlohmann::ordered_json;

constexpr float kDivisor = 2688.0f;  // 6 * 448

struct FormatInfo {
  Format format;
  const char* name;
  const char* description;
};
const FormatInfo kFormats[] = {
    {Format::ModelOptNvfp4, "modelopt-nvfp4",
     "ModelOpt's NVFP4 Hugging Face layout: vLLM, SGLang, TensorRT-LLM"},
    {Format::CompressedTensorsNvfp4, "compressed-tensors-nvfp4",
     "llm-compressor's nvfp4-pack-quantized: vLLM, transformers (compressed-tensors)"},
    {Format::CompressedTensorsMxfp4, "compressed-tensors-mxfp4",
     "llm-compressor's mxfp4-pack-quantized: vLLM, transformers (compressed-tensors)"},
    {Format::GptOssMxfp4, "gpt-oss-mxfp4",
     "Hugging Face's gpt-oss MXFP4 layout (gpt-oss models only): vLLM, transformers"},
    {Format::Bf16, "bf16", "a plain BF16 Hugging Face folder: anything that loads transformers"},
};

bool isQuantized(Format f) {
  return f != Format::Bf16;
}

bool cancelled(const std::atomic<bool>* cancel) {
  return cancel && cancel->load();
}
void checkCancel(const std::atomic<bool>* cancel, const std::string& where) {
  if (cancelled(cancel))
    throw Error("export cancelled", where, "nothing was written to the output folder");
}

void check(fp4_status status, const std::string& where) {
  if (status != FP4_OK)
    throw Error(std::string(fp4_status_string(status)) + ": " + fp4_last_error(), where);
}

std::string shapeText(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// ---- The input ------------------------------------------------------------------------------

struct SourceTensor {
  size_t file = 0;
  const io::TensorInfo* info = nullptr;
};

struct Input {
  std::string dir;
  std::vector<std::unique_ptr<io::SafetensorsFile>> files;
  std::vector<std::string> order;  // tensor names in file, then data order
  std::map<std::string, SourceTensor> tensors;
  json config;

  const uint8_t* data(const SourceTensor& t) const { return files[t.file]->data(*t.info); }
  std::vector<float> toFloat32(const SourceTensor& t) const {
    return files[t.file]->toFloat32(*t.info);
  }
};

json readJsonFile(const std::string& path) {
  json j = json::parse(files::readFile(path), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw Error("malformed JSON (not an object)", path, "is the file complete?");
  return j;
}

Input openInput(const std::string& dir) {
  Input in;
  in.dir = dir;
  if (!files::exists(dir))
    throw Error("model folder does not exist", dir,
                "pass a Hugging Face folder, or a run's model/ or checkpoint folder");
  if (!files::isDirectory(dir))
    throw Error("not a folder", dir, "pass the model's folder, not a file in it");
  const std::string config = files::join(dir, "config.json");
  if (!files::isRegularFile(config))
    throw Error("not a model folder: no config.json", dir,
                "a Hugging Face model folder holds config.json and model.safetensors");
  in.config = readJsonFile(config);
  const std::vector<std::string> shardNames = io::modelWeightFiles(dir);
  for (const std::string& name : shardNames) {
    in.files.push_back(std::make_unique<io::SafetensorsFile>(files::join(dir, name)));
    const size_t f = in.files.size() - 1;
    for (const io::TensorInfo& t : in.files[f]->tensors()) {
      if (in.tensors.count(t.name))
        throw Error("tensor " + t.name + " is in two shards", files::join(dir, name));
      in.tensors[t.name] = {f, &t};
      in.order.push_back(t.name);
    }
  }
  return in;
}

// ---- What gets quantized ------------------------------------------------------------------------

struct QuantState {
  bool present = false;
  fp4_format format = FP4_FORMAT_NVFP4;
  fp4_scale_rule scaleRule = FP4_SCALE_RULE_CEIL;
  bool blocks2d = false;
  bool activations = false;
  bool frozen = true;
  std::string description;
  std::map<std::string, std::pair<float, float>> layers;  // weight amax, input amax (NaN: none)
  std::vector<std::string> layerOrder;
};

QuantState readQuantState(const std::string& dir) {
  QuantState s;
  const std::string path = files::join(dir, "quant_state.json");
  if (!files::exists(path)) return s;
  json j = readJsonFile(path);
  s.present = true;
  if (!j.contains("layers") || !j["layers"].is_object() || j["layers"].empty())
    throw Error("malformed quantizer state (no \"layers\" object)", path);
  s.description = j.value("format", std::string());
  auto has = [&](const char* part) { return s.description.find(part) != std::string::npos; };
  if (j.contains("options") && j["options"].is_object()) {
    const json& o = j["options"];
    auto text = [&](const char* key) {
      if (!o.contains(key) || !o[key].is_string())
        throw Error("malformed quantizer state (options." + std::string(key) + ")", path);
      return o[key].get<std::string>();
    };
    auto flag = [&](const char* key) {
      if (!o.contains(key) || !o[key].is_boolean())
        throw Error("malformed quantizer state (options." + std::string(key) + ")", path);
      return o[key].get<bool>();
    };
    const std::string format = text("format");
    if (format != "mxfp4" && format != "nvfp4")
      throw Error("unknown format '" + format + "' in the quantizer state", path);
    s.format = format == "mxfp4" ? FP4_FORMAT_MXFP4 : FP4_FORMAT_NVFP4;
    s.scaleRule = text("scale_rule") == "floor" ? FP4_SCALE_RULE_FLOOR : FP4_SCALE_RULE_CEIL;
    s.blocks2d = flag("blocks_2d");
    s.activations = flag("activations");
    s.frozen = text("amax") == "frozen";
  } else {
    if (!has("MXFP4") && !has("NVFP4"))
      throw Error("the quantizer state's format '" + s.description + "' is neither MXFP4 nor NVFP4",
                  path);
    s.format = has("MXFP4") ? FP4_FORMAT_MXFP4 : FP4_FORMAT_NVFP4;
    s.activations = !has("W4A16");
    s.scaleRule = has("floor scales") ? FP4_SCALE_RULE_FLOOR : FP4_SCALE_RULE_CEIL;
    s.blocks2d = has("16x16");
    s.frozen = !has("dynamic amax");
  }
  auto number = [](const json& e, const char* key) {
    return e.contains(key) && e[key].is_number() ? e[key].get<float>() : NAN;
  };
  for (const auto& item : j["layers"].items()) {
    s.layers[item.key()] = {number(item.value(), "weight_amax"),
                            number(item.value(), "input_amax")};
    s.layerOrder.push_back(item.key());
  }
  return s;
}

bool matchesAny(const std::vector<std::string>& patterns, const std::string& name) {
  for (const auto& p : patterns)
    if (globMatch(p, name)) return true;
  return false;
}

std::string moduleOf(const std::string& tensor) {
  return tensor.substr(0, tensor.size() - std::string(".weight").size());
}

// The module a linear layer's weight tensor belongs to ("<module>.weight", 2-D; or a gpt-oss
// experts tensor, its own module), or empty for any other tensor.
std::string layerModuleOf(const std::string& name, const io::TensorInfo& t) {
  if (isExpertsTensor(name, t.shape.size())) return name;
  if (endsWith(name, ".weight") && t.shape.size() == 2) return moduleOf(name);
  return {};
}

struct Layer {
  std::string module;          // e.g. model.layers.0.self_attn.q_proj
  std::string weight;          // its weight tensor
  int64_t rows = 0, cols = 0;  // as quantized: [out, in] (experts: [E * out, in])
  int64_t experts = 0;         // gpt-oss: E, and the tensor is stored [E, in, out]
  std::string scalesName;      // the output tensor of its block scales
  float ownAmax = NAN;         // weight amax (calibrated, or measured)
  float tensorAmax = NAN;      // the amax of the tensor scale: the fused group's largest (NVFP4)
  float inputAmax = NAN;       // calibrated input amax (NaN: none)
};

// ---- The plan of the output -----------------------------------------------------------------

enum class Part { Copy, ToBf16, Codes, Scales, GlobalScale, InputScale };

struct OutTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t bytes = 0;
  Part part = Part::Copy;
  std::string source;  // input tensor name
  int layer = -1;      // index into the layers for the quantized parts
};

int64_t numelOf(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

struct Plan {
  Format format;
  fp4_config config{};
  std::vector<Layer> layers;
  std::vector<OutTensor> tensors;
  std::vector<std::string> excludeList;  // modelopt: exclude_modules; compressed-tensors: ignore
  std::vector<std::string> ignoreNames;  // concrete module names kept in high precision
  bool activations = false;
  std::string quantAlgo;
};

// The encoded parts of one quantized layer, computed once when its first part is written.
struct Encoded {
  int layer = -1;
  std::vector<uint8_t> codes, scales;
  float globalScale = 1;  // NVFP4 s2
};

// A layer's weight as fp32 [rows, cols], blocks along the rows: experts tensors transposed from
// [E, in, out] to [E, out, in].
std::vector<float> layerWeight(const Input& in, const Layer& l) {
  std::vector<float> w = in.toFloat32(in.tensors.at(l.weight));
  if (l.experts == 0) return w;
  std::vector<float> rows(w.size());
  expertsToRows(w.data(), l.experts, l.cols, l.rows / l.experts, rows.data());
  return rows;
}

Encoded encodeLayer(const Plan& plan, const Input& in, int index) {
  const Layer& l = plan.layers[size_t(index)];
  Encoded e;
  e.layer = index;
  const std::vector<float> w = layerWeight(in, l);
  e.codes.resize(size_t(fp4_packed_bytes(l.rows, l.cols)));
  e.scales.resize(size_t(fp4_scale_count(plan.config.format, l.rows, l.cols)));
  const float amax = plan.config.format == FP4_FORMAT_NVFP4 ? l.tensorAmax : -1.0f;
  check(fp4_quantize(&plan.config, w.data(), l.rows, l.cols, amax, e.codes.data(), e.scales.data(),
                     &e.globalScale),
        l.weight);
  return e;
}

// The reciprocal global scale of compressed-tensors: 2688 / amax as one fp32 division (1 for an
// all-zero tensor, where s2 = 1).
float reciprocalGlobal(float amax) {
  if (!(amax > 0.0f)) return 1.0f;
  return kDivisor / amax;
}

}  // namespace

// ---- Small public helpers -------------------------------------------------------------------

const char* formatName(Format format) {
  for (const auto& f : kFormats)
    if (f.format == format) return f.name;
  return "?";
}

std::optional<Format> parseFormat(const std::string& name) {
  for (const auto& f : kFormats)
    if (name == f.name) return f.format;
  return std::nullopt;
}

std::vector<std::string> formatNames() {
  std::vector<std::string> out;
  for (const auto& f : kFormats) out.push_back(f.name);
  return out;
}

const char* formatDescription(Format format) {
  for (const auto& f : kFormats)
    if (f.format == format) return f.description;
  return "";
}

uint64_t parseByteSize(const std::string& text) {
  const std::string where = "--max-shard-size";
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  const std::string number = text.substr(0, i);
  std::string unit = text.substr(i);
  unit.erase(std::remove(unit.begin(), unit.end(), ' '), unit.end());
  for (char& c : unit) c = char(std::toupper(static_cast<unsigned char>(c)));
  const std::map<std::string, double> units = {{"", 1},
                                               {"B", 1},
                                               {"KB", 1e3},
                                               {"MB", 1e6},
                                               {"GB", 1e9},
                                               {"TB", 1e12},
                                               {"KIB", 1024.0},
                                               {"MIB", 1048576.0},
                                               {"GIB", 1073741824.0},
                                               {"TIB", 1099511627776.0}};
  char* end = nullptr;
  const double value = number.empty() ? -1 : std::strtod(number.c_str(), &end);
  if (number.empty() || !end || *end != '\0' || !units.count(unit) || !(value > 0))
    throw Error("'" + text + "' is not a size", where,
                "a positive number with an optional unit: 5GB, 500MB, 2GiB, 100KB, 1234");
  const double bytes = value * units.at(unit);
  if (bytes < 1 || bytes > 1.8e19) throw Error("'" + text + "' is out of range", where);
  return uint64_t(bytes);
}

// ---- The export -------------------------------------------------------------------------------

namespace {

std::string architectureOf(const json& config) {
  if (config.contains("architectures") && config["architectures"].is_array() &&
      !config["architectures"].empty() && config["architectures"][0].is_string())
    return config["architectures"][0].get<std::string>();
  return config.value("model_type", std::string("(unknown architecture)"));
}

Plan makePlan(const Options& options, const Input& in, const QuantState& state,
              const std::atomic<bool>* cancel,
              const std::function<void(const Progress&)>& progress) {
  Plan plan;
  plan.format = options.format;
  const std::string where = in.dir;
  const std::string arch = architectureOf(in.config);
  const bool gptOss = arch == "GptOssForCausalLM" || in.config.value("model_type", "") == "gpt_oss";
  if (options.format == Format::GptOssMxfp4 && !gptOss)
    throw Error("gpt-oss-mxfp4 is the layout of gpt-oss models only, and this model is " + arch,
                where, "use --format compressed-tensors-mxfp4 for MXFP4 on this model");
  if (gptOss && isQuantized(options.format) && options.format != Format::GptOssMxfp4)
    throw Error(std::string("the ") + formatName(options.format) +
                    " layout has no place for gpt-oss's experts (3-D tensors of every expert's "
                    "weights)",
                where,
                "use --format gpt-oss-mxfp4 (what vLLM and transformers load for gpt-oss) "
                "or bf16");
  if (options.format == Format::GptOssMxfp4 && state.present && state.activations)
    throw Error("the model was trained with quantized activations (" + state.description +
                    "), and the gpt-oss MXFP4 layout is weight-only: the export would not be "
                    "the model that was evaluated",
                files::join(in.dir, "quant_state.json"),
                "train the run with quant.activations=false (W4A16), or export it as bf16");
  if (!options.scaleRule.empty() && options.scaleRule != "ceil" && options.scaleRule != "floor")
    throw Error("--scale-rule must be ceil or floor, not '" + options.scaleRule + "'",
                "--scale-rule");

  const fp4_format kernelFormat =
      options.format == Format::CompressedTensorsMxfp4 || options.format == Format::GptOssMxfp4
          ? FP4_FORMAT_MXFP4
          : FP4_FORMAT_NVFP4;
  plan.config = fp4_default_config(kernelFormat);
  if (state.present && isQuantized(options.format)) {
    const bool stateMx = state.format == FP4_FORMAT_MXFP4;
    if (stateMx != (kernelFormat == FP4_FORMAT_MXFP4))
      throw Error(std::string("the model was fake-quantized in ") + (stateMx ? "MXFP4" : "NVFP4") +
                      " (" + state.description + "); a " + formatName(options.format) +
                      " export would not decode to the weights it was trained and evaluated with",
                  files::join(in.dir, "quant_state.json"),
                  stateMx ? (gptOss ? "use --format gpt-oss-mxfp4 (or bf16)"
                                    : "use --format compressed-tensors-mxfp4 (or bf16)")
                          : "use --format modelopt-nvfp4 or compressed-tensors-nvfp4 (or bf16)");
    plan.config.scale_rule = state.scaleRule;
    plan.config.nvfp4_2d_blocks = kernelFormat == FP4_FORMAT_NVFP4 && state.blocks2d;
    plan.activations = state.activations;
    if (kernelFormat == FP4_FORMAT_MXFP4 && !options.scaleRule.empty() &&
        (options.scaleRule == "floor") != (state.scaleRule == FP4_SCALE_RULE_FLOOR))
      throw Error("--scale-rule " + options.scaleRule + " differs from the run's (" +
                      state.description + ")",
                  "--scale-rule", "leave --scale-rule out to use the run's rule");
  } else if (kernelFormat == FP4_FORMAT_MXFP4) {
    plan.config.scale_rule =
        options.scaleRule == "floor" ? FP4_SCALE_RULE_FLOOR : FP4_SCALE_RULE_CEIL;
  }
  if (kernelFormat == FP4_FORMAT_NVFP4 && options.scaleRule == "floor")
    throw Error(
        "--scale-rule applies to MXFP4 only (NVFP4 block scales are E4M3, rounded to "
        "nearest)",
        "--scale-rule", "leave it out for an NVFP4 export");
  const int64_t block = fp4_block_size(kernelFormat);

  // The linear layers: 2-D "<module>.weight" tensors (norms are 1-D; embeddings are excluded by
  // name), those the run quantized or, for a BF16 folder, those quant.include/exclude select.
  const run::RunConfig defaults;
  const std::vector<std::string> include = run::quantIncludePatterns(defaults.quantInclude, arch);
  const std::vector<std::string> exclude = run::splitList(defaults.quantExclude);
  std::set<std::string> quantized;
  std::vector<std::string> linearModules;  // every linear weight but the embeddings, in order
  for (const std::string& name : in.order) {
    const std::string module = layerModuleOf(name, *in.tensors.at(name).info);
    if (module.empty()) continue;
    if (module.find("embed") != std::string::npos || module.find("wte") != std::string::npos)
      continue;
    linearModules.push_back(module);
  }
  if (isQuantized(options.format)) {
    if (state.present) {
      for (const std::string& module : state.layerOrder) {
        const bool found = in.tensors.count(module + ".weight") ||
                           (in.tensors.count(module) &&
                            isExpertsTensor(module, in.tensors.at(module).info->shape.size()));
        if (!found)
          throw Error("the quantizer state names layer " + module + ", whose weight " + module +
                          ".weight is not in the model's safetensors",
                      files::join(in.dir, "quant_state.json"),
                      "is this quant_state.json from another model?");
        if (!matchesAny(options.exclude, module)) quantized.insert(module);
      }
    } else {
      for (const std::string& module : linearModules)
        if (matchesAny(include, module) && !matchesAny(exclude, module) &&
            !matchesAny(options.exclude, module))
          quantized.insert(module);
    }
    if (quantized.empty())
      throw Error("no linear layer to quantize (every one is excluded)", where,
                  "check --exclude; the model's linear layers are named like " +
                      (linearModules.empty() ? std::string("(none)") : linearModules.front()));
  }

  // A module named like a tensor of the input is an experts tensor (layerModuleOf).
  const auto isExperts = [&](const std::string& module) { return in.tensors.count(module) > 0; };
  if (options.format == Format::GptOssMxfp4)
    for (const std::string& module : quantized)
      if (!isExperts(module))
        throw Error("the run quantized " + module +
                        ", and the gpt-oss MXFP4 layout holds only the "
                        "experts in MXFP4: the export would not be the model that was evaluated",
                    files::join(in.dir, "quant_state.json"),
                    "train gpt-oss with quant.include=auto (its experts), or export it as bf16");

  // Layers, in input order, with their amaxes.
  std::map<std::string, int> layerIndex;
  for (const std::string& name : in.order) {
    const io::TensorInfo& t = *in.tensors.at(name).info;
    const std::string module = layerModuleOf(name, t);
    if (module.empty() || !quantized.count(module)) continue;
    if (!io::isFloatingPoint(t.dtype))
      throw Error("quantized layer weight " + name + " is " + io::dtypeName(t.dtype) + " " +
                      shapeText(t.shape) + ", not a floating-point tensor",
                  where, "exclude it with --exclude");
    Layer l;
    l.module = module;
    l.weight = name;
    if (t.shape.size() == 3) {
      l.experts = t.shape[0];
      l.rows = t.shape[0] * t.shape[2];
      l.cols = t.shape[1];
    } else {
      l.rows = t.shape[0];
      l.cols = t.shape[1];
    }
    if (l.cols % block != 0)
      throw Error("layer " + l.module + " has " + std::to_string(l.cols) +
                      " inputs, not a multiple of the " + std::to_string(block) + "-element block",
                  where, "keep it in high precision with --exclude " + l.module);
    if (state.present) {
      const auto& [w, a] = state.layers.at(l.module);
      l.ownAmax = state.frozen ? w : NAN;
      l.inputAmax = a;
    }
    layerIndex[l.module] = int(plan.layers.size());
    plan.layers.push_back(l);
  }
  // Weight amaxes a run did not freeze (dynamic) or a BF16 folder has none of: measured.
  for (size_t i = 0; i < plan.layers.size(); ++i) {
    Layer& l = plan.layers[i];
    checkCancel(cancel, where);
    if (progress) progress({"measure", l.weight, int64_t(i), int64_t(plan.layers.size())});
    if (!std::isfinite(l.ownAmax)) {
      const std::vector<float> w = in.toFloat32(in.tensors.at(l.weight));  // any order will do
      l.ownAmax = fp4_tensor_amax(w.data(), int64_t(w.size()));
    }
    l.tensorAmax = l.ownAmax;
  }
  // One tensor scale per fused group (NVFP4): the group's largest amax, as ModelOpt's export.
  if (kernelFormat == FP4_FORMAT_NVFP4) {
    std::map<std::string, float> groupAmax;
    for (const Layer& l : plan.layers) {
      const std::string g = fusedGroupOf(l.module);
      if (!g.empty()) groupAmax[g] = std::max(groupAmax[g], l.ownAmax);
    }
    for (Layer& l : plan.layers) {
      const std::string g = fusedGroupOf(l.module);
      if (!g.empty()) l.tensorAmax = groupAmax[g];
    }
  }
  if (plan.activations && kernelFormat == FP4_FORMAT_NVFP4) {
    for (const Layer& l : plan.layers)
      if (!(std::isfinite(l.inputAmax) && l.inputAmax > 0))
        throw Error("layer " + l.module +
                        " has no calibrated input amax in quant_state.json, "
                        "and an NVFP4 W4A4 export needs one for its input_scale",
                    files::join(in.dir, "quant_state.json"),
                    "train or calibrate the run with quant.amax=frozen and quant.calib_batches>=1");
  }

  // What stays in high precision, as the formats list it.
  // lm_head first (always there: SGLang refuses an empty exclude list), then the linear layers
  // kept in high precision, in model order.
  plan.ignoreNames.push_back("lm_head");
  for (const std::string& module : linearModules)
    if (!quantized.count(module) && module != "lm_head") plan.ignoreNames.push_back(module);
  plan.excludeList = plan.ignoreNames;
  if (options.format == Format::GptOssMxfp4) {
    // Hugging Face replaces a layer's whole experts module: both tensors or neither.
    std::set<std::string> keptExperts;
    for (const std::string& module : linearModules) {
      if (!isExperts(module)) continue;
      const std::string parent = module.substr(0, module.rfind('.'));
      const bool gateUp = quantized.count(parent + ".gate_up_proj") > 0;
      const bool down = quantized.count(parent + ".down_proj") > 0;
      if (gateUp != down)
        throw Error("gpt-oss-mxfp4 stores a layer's experts in MXFP4 together, and " + parent +
                        " would have only " + (gateUp ? "gate_up_proj" : "down_proj") +
                        " quantized",
                    "--exclude", "exclude both " + parent + ".* tensors, or neither");
      if (!gateUp) keptExperts.insert(parent);
    }
    // OpenAI's own list: every attention block, every router, the embeddings and the head.
    plan.excludeList = {"model.layers.*.self_attn", "model.layers.*.mlp.router",
                        "model.embed_tokens", "lm_head"};
    for (const std::string& parent : keptExperts) plan.excludeList.push_back(parent);
  }
  if (options.format == Format::ModelOptNvfp4)
    for (const std::string& g : options.exclude)
      if (std::find(plan.excludeList.begin(), plan.excludeList.end(), g) == plan.excludeList.end())
        plan.excludeList.push_back(g);

  if (options.format == Format::ModelOptNvfp4)
    plan.quantAlgo = plan.activations ? "NVFP4" : "W4A16_NVFP4";
  else if (options.format == Format::CompressedTensorsNvfp4)
    plan.quantAlgo = plan.activations ? "NVFP4" : "NVFP4A16";
  else if (options.format == Format::CompressedTensorsMxfp4)
    plan.quantAlgo = plan.activations ? "MXFP4" : "MXFP4A16";
  else if (options.format == Format::GptOssMxfp4)
    plan.quantAlgo = "MXFP4A16";
  else
    plan.quantAlgo = "BF16";

  // The output tensors, in input order, each layer's parts together.
  const bool modelopt = options.format == Format::ModelOptNvfp4;
  for (const std::string& name : in.order) {
    const io::TensorInfo& t = *in.tensors.at(name).info;
    const std::string module = layerModuleOf(name, t);
    auto it = module.empty() ? layerIndex.end() : layerIndex.find(module);
    if (it == layerIndex.end()) {
      OutTensor o{name, t.dtype, t.shape, t.bytes(), Part::Copy, name, -1};
      if (options.format == Format::Bf16 && io::isFloatingPoint(t.dtype) &&
          t.dtype != DType::BF16) {
        o.dtype = DType::BF16;
        o.bytes = uint64_t(numelOf(t.shape)) * 2;
        o.part = Part::ToBf16;
      }
      plan.tensors.push_back(o);
      continue;
    }
    Layer& l = plan.layers[size_t(it->second)];
    const std::string& m = l.module;
    const int li = it->second;
    const int64_t scaleCols = l.cols / block;
    if (options.format == Format::GptOssMxfp4) {
      // Hugging Face's gpt-oss layout: <m>_blocks [E, out, in / 32, 16] (two E2M1 codes a byte,
      // the even element in the low nibble) and <m>_scales [E, out, in / 32] (E8M0).
      const int64_t out = l.rows / l.experts;
      l.scalesName = m + "_scales";
      plan.tensors.push_back({m + "_blocks",
                              DType::U8,
                              {l.experts, out, scaleCols, block / 2},
                              uint64_t(l.rows * l.cols / 2),
                              Part::Codes,
                              name,
                              li});
      plan.tensors.push_back({l.scalesName,
                              DType::U8,
                              {l.experts, out, scaleCols},
                              uint64_t(l.rows * scaleCols),
                              Part::Scales,
                              name,
                              li});
      continue;
    }
    l.scalesName = m + ".weight_scale";
    const DType scaleType = kernelFormat == FP4_FORMAT_NVFP4 ? DType::F8_E4M3 : DType::U8;
    plan.tensors.push_back({m + (modelopt ? ".weight" : ".weight_packed"),
                            DType::U8,
                            {l.rows, l.cols / 2},
                            uint64_t(l.rows * l.cols / 2),
                            Part::Codes,
                            name,
                            li});
    plan.tensors.push_back({m + ".weight_scale",
                            scaleType,
                            {l.rows, scaleCols},
                            uint64_t(l.rows * scaleCols),
                            Part::Scales,
                            name,
                            li});
    if (kernelFormat == FP4_FORMAT_NVFP4) {
      const std::vector<int64_t> scalar =
          modelopt ? std::vector<int64_t>{} : std::vector<int64_t>{1};
      plan.tensors.push_back({m + (modelopt ? ".weight_scale_2" : ".weight_global_scale"),
                              DType::F32, scalar, 4, Part::GlobalScale, name, li});
      if (plan.activations)
        plan.tensors.push_back({m + (modelopt ? ".input_scale" : ".input_global_scale"), DType::F32,
                                scalar, 4, Part::InputScale, name, li});
    }
  }
  return plan;
}

json quantizationConfig(const Plan& plan, const Options& options) {
  const std::vector<std::string>& excluded = plan.excludeList;
  if (options.format == Format::GptOssMxfp4)
    return json{{"quant_method", "mxfp4"},
                {"modules_to_not_convert", excluded},
                {"producer", {{"name", "fp4lab"}, {"version", FP4LAB_VERSION}}}};
  if (options.format == Format::ModelOptNvfp4) {
    return json{{"quant_method", "modelopt"},
                {"quant_algo", plan.quantAlgo},
                {"group_size", 16},
                {"kv_cache_quant_algo", nullptr},
                {"exclude_modules", excluded},
                {"ignore", excluded},
                {"producer", {{"name", "fp4lab"}, {"version", FP4LAB_VERSION}}}};
  }
  const bool nv = options.format == Format::CompressedTensorsNvfp4;
  json weights = {{"num_bits", 4},
                  {"type", "float"},
                  {"symmetric", true},
                  {"group_size", nv ? 16 : 32},
                  {"strategy", nv ? "tensor_group" : "group"},
                  {"dynamic", false},
                  {"actorder", nullptr},
                  {"observer", "minmax"},
                  {"observer_kwargs", json::object()},
                  {"scale_dtype", nv ? "torch.float8_e4m3fn" : "torch.uint8"},
                  {"zp_dtype", nv ? "torch.float8_e4m3fn" : "torch.uint8"}};
  json inputs = nullptr;
  if (plan.activations) {
    inputs = {{"num_bits", 4},
              {"type", "float"},
              {"symmetric", true},
              {"group_size", nv ? 16 : 32},
              {"strategy", nv ? "tensor_group" : "group"},
              {"dynamic", nv ? json("local") : json(true)},
              {"actorder", nullptr},
              {"observer", nv ? json("static_minmax") : json(nullptr)},
              {"observer_kwargs", json::object()},
              {"scale_dtype", nv ? "torch.float8_e4m3fn" : "torch.uint8"},
              {"zp_dtype", nv ? "torch.float8_e4m3fn" : "torch.uint8"}};
  }
  const char* format = nv ? "nvfp4-pack-quantized" : "mxfp4-pack-quantized";
  return json{{"quant_method", "compressed-tensors"},
              {"format", format},
              {"quantization_status", "compressed"},
              {"config_groups",
               {{"group_0",
                 {{"targets", {"Linear"}},
                  {"weights", weights},
                  {"input_activations", inputs},
                  {"output_activations", nullptr},
                  {"format", format}}}}},
              {"ignore", plan.ignoreNames},
              {"kv_cache_scheme", nullptr},
              {"global_compression_ratio", nullptr},
              {"sparsity_config", json::object()},
              {"transform_config", json::object()},
              {"version", "0.20.1"},
              {"producer", {{"name", "fp4lab"}, {"version", FP4LAB_VERSION}}}};
}

// One shard: its name and the plan's tensors it holds, in order.
struct Shard {
  std::string file;
  std::vector<size_t> tensors;
  uint64_t bytes = 0;
};

std::vector<Shard> assignShards(const Plan& plan, uint64_t maxBytes) {
  std::vector<Shard> shards(1);
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const uint64_t b = plan.tensors[i].bytes;
    if (!shards.back().tensors.empty() && shards.back().bytes + b > maxBytes) shards.emplace_back();
    shards.back().tensors.push_back(i);
    shards.back().bytes += b;
  }
  char name[64];
  for (size_t s = 0; s < shards.size(); ++s) {
    if (shards.size() == 1) {
      shards[s].file = "model.safetensors";
    } else {
      std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
      shards[s].file = name;
    }
  }
  return shards;
}

class Writer {
 public:
  Writer(const Plan& plan, const Input& in, const std::atomic<bool>* cancel,
         const std::function<void(const Progress&)>& progress)
      : m_plan(plan), m_in(in), m_cancel(cancel), m_progress(progress) {}

  void writeShard(const Shard& shard, const std::string& path) {
    json header;
    header["__metadata__"] = {{"format", "pt"}};
    uint64_t offset = 0;
    for (size_t i : shard.tensors) {
      const OutTensor& t = m_plan.tensors[i];
      header[t.name] = {{"dtype", io::dtypeName(t.dtype)},
                        {"shape", t.shape},
                        {"data_offsets", {offset, offset + t.bytes}}};
      offset += t.bytes;
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    files::AtomicFile file(path);
    uint8_t length[8];
    for (int b = 0; b < 8; ++b) length[b] = uint8_t(uint64_t(text.size()) >> (8 * b));
    file.write(length, 8);
    file.write(text.data(), text.size());
    for (size_t i : shard.tensors) {
      const OutTensor& t = m_plan.tensors[i];
      checkCancel(m_cancel, path);
      if (m_progress) m_progress({"write", t.name, m_done, int64_t(m_plan.tensors.size())});
      writeTensor(file, t);
      ++m_done;
    }
    file.commit();
  }

 private:
  void writeTensor(files::AtomicFile& file, const OutTensor& t) {
    const SourceTensor& src = m_in.tensors.at(t.source);
    if (t.part == Part::Copy) {
      file.write(m_in.data(src), t.bytes);
      return;
    }
    if (t.part == Part::ToBf16) {
      const std::vector<float> v = m_in.toFloat32(src);
      std::vector<uint16_t> out(v.size());
      for (size_t i = 0; i < v.size(); ++i) out[i] = io::floatToBf16(v[i]);
      file.write(out.data(), out.size() * 2);
      return;
    }
    if (m_encoded.layer != t.layer) m_encoded = encodeLayer(m_plan, m_in, t.layer);
    const Layer& l = m_plan.layers[size_t(t.layer)];
    const bool modelopt = m_plan.format == Format::ModelOptNvfp4;
    switch (t.part) {
      case Part::Codes:
        file.write(m_encoded.codes.data(), m_encoded.codes.size());
        break;
      case Part::Scales:
        file.write(m_encoded.scales.data(), m_encoded.scales.size());
        break;
      case Part::GlobalScale: {
        const float v = modelopt ? m_encoded.globalScale : reciprocalGlobal(l.tensorAmax);
        file.write(&v, 4);
        break;
      }
      case Part::InputScale: {
        const float v =
            modelopt ? fp4_nvfp4_global_scale(l.inputAmax) : reciprocalGlobal(l.inputAmax);
        file.write(&v, 4);
        break;
      }
      default:
        break;
    }
  }

  const Plan& m_plan;
  const Input& m_in;
  const std::atomic<bool>* m_cancel;
  const std::function<void(const Progress&)>& m_progress;
  Encoded m_encoded;
  int64_t m_done = 0;
};

// Reads the staged folder back: every planned tensor is there with its dtype and shape, copies
// hold the input's bytes, and each quantized weight decodes bit for bit to the kernels' fake
// quantization of the input weight with the same tensor scale.
void verify(const Plan& plan, const Input& in, const std::vector<Shard>& shards,
            const std::string& staging, const std::atomic<bool>* cancel,
            const std::function<void(const Progress&)>& progress, Summary& summary) {
  std::vector<std::unique_ptr<io::SafetensorsFile>> out;
  std::map<std::string, std::pair<size_t, const io::TensorInfo*>> found;
  size_t count = 0;
  for (const Shard& s : shards) {
    out.push_back(std::make_unique<io::SafetensorsFile>(files::join(staging, s.file)));
    if (out.back()->metadata().count("format") == 0 || out.back()->metadata().at("format") != "pt")
      throw Error("the written shard lacks \"__metadata__\": {\"format\": \"pt\"}", s.file);
    for (const io::TensorInfo& t : out.back()->tensors()) found[t.name] = {out.size() - 1, &t};
    count += out.back()->tensors().size();
  }
  if (count != plan.tensors.size() || found.size() != plan.tensors.size())
    throw Error("read back " + std::to_string(count) + " tensors, planned " +
                    std::to_string(plan.tensors.size()),
                staging);
  auto bytesOf = [&](const std::string& name) {
    const auto& [f, t] = found.at(name);
    return out[f]->data(*t);
  };
  const bool modelopt = plan.format == Format::ModelOptNvfp4;
  int64_t done = 0;
  for (const OutTensor& t : plan.tensors) {
    checkCancel(cancel, staging);
    if (progress) progress({"verify", t.name, done++, int64_t(plan.tensors.size())});
    auto it = found.find(t.name);
    if (it == found.end()) throw Error("tensor " + t.name + " is missing after writing", staging);
    const io::TensorInfo& info = *it->second.second;
    if (info.dtype != t.dtype || info.shape != t.shape)
      throw Error("tensor " + t.name + " reads back as " + io::dtypeName(info.dtype) + " " +
                      shapeText(info.shape) + ", written as " + io::dtypeName(t.dtype) + " " +
                      shapeText(t.shape),
                  staging);
    const SourceTensor& src = in.tensors.at(t.source);
    if (t.part == Part::Copy) {
      if (std::memcmp(bytesOf(t.name), in.data(src), t.bytes) != 0)
        throw Error("tensor " + t.name + " differs from the input after writing", staging);
      ++summary.verifiedTensors;
    } else if (t.part == Part::ToBf16) {
      const std::vector<float> v = in.toFloat32(src);
      const uint8_t* b = bytesOf(t.name);
      for (size_t i = 0; i < v.size(); ++i) {
        uint16_t got;
        std::memcpy(&got, b + 2 * i, 2);
        if (got != io::floatToBf16(v[i]))
          throw Error("tensor " + t.name + " is not the BF16 rounding of the input", staging);
      }
      ++summary.verifiedTensors;
    }
    if (t.part != Part::Codes) continue;
    // A quantized layer: decode it from the file and compare with the fake quantization.
    const Layer& l = plan.layers[size_t(t.layer)];
    const std::string& m = l.module;
    const std::vector<float> w = layerWeight(in, l);
    const uint8_t* codes = bytesOf(t.name);
    const uint8_t* scales = bytesOf(l.scalesName);
    float s2 = 1;
    const bool nv = plan.config.format == FP4_FORMAT_NVFP4;
    const float amax = nv ? l.tensorAmax : -1.0f;
    if (nv) {
      float stored;
      std::memcpy(&stored, bytesOf(m + (modelopt ? ".weight_scale_2" : ".weight_global_scale")), 4);
      const float expected = modelopt ? fp4_nvfp4_global_scale(amax) : reciprocalGlobal(amax);
      if (bitsOf(stored) != bitsOf(expected))
        throw Error("the tensor scale of " + m + " reads back as " + std::to_string(stored) +
                        ", expected " + std::to_string(expected),
                    staging);
      s2 = fp4_nvfp4_global_scale(amax);  // compressed-tensors stores its reciprocal
      if (plan.activations) {
        float input;
        std::memcpy(&input, bytesOf(m + (modelopt ? ".input_scale" : ".input_global_scale")), 4);
        const float want =
            modelopt ? fp4_nvfp4_global_scale(l.inputAmax) : reciprocalGlobal(l.inputAmax);
        if (bitsOf(input) != bitsOf(want))
          throw Error("the input scale of " + m + " reads back wrong", staging);
      }
    }
    std::vector<float> decoded(w.size()), fake(w.size());
    // Unaligned reads are the kernels' business only for floats; codes and scales are bytes.
    check(fp4_dequantize(&plan.config, codes, scales, s2, l.rows, l.cols, decoded.data()), m);
    check(fp4_fake_quantize(&plan.config, w.data(), l.rows, l.cols, amax, fake.data(), nullptr,
                            nullptr, nullptr),
          m);
    double maxErr = 0, err2 = 0, x2 = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      const bool same =
          bitsOf(decoded[i]) == bitsOf(fake[i]) || (std::isnan(decoded[i]) && std::isnan(fake[i]));
      if (!same)
        throw Error("decoded " + m + " differs from its fake quantization at element " +
                        std::to_string(i) + " (" + std::to_string(decoded[i]) + " vs " +
                        std::to_string(fake[i]) + ")",
                    staging, "this is a bug in fp4lab: please report it");
      if (std::isfinite(w[i]) && std::isfinite(decoded[i])) {
        const double e = std::fabs(double(decoded[i]) - double(w[i]));
        maxErr = std::max(maxErr, e);
        err2 += e * e;
        x2 += double(w[i]) * double(w[i]);
      }
    }
    summary.verifiedTensors += nv ? (plan.activations ? 4 : 3) : 2;
    LayerReport r;
    r.name = m;
    r.tensorAmax = l.tensorAmax;
    r.ownAmax = l.ownAmax;
    r.inputAmax = std::isfinite(l.inputAmax) ? l.inputAmax : -1.0f;
    r.maxAbsError = maxErr;
    r.relL2 = x2 > 0 ? std::sqrt(err2 / x2) : 0;
    summary.layers.push_back(r);
    if (maxErr >= summary.maxAbsError) {
      summary.maxAbsError = maxErr;
      summary.worstLayer = m;
    }
  }
}

void writeText(const std::string& path, const json& j) {
  files::writeFileAtomically(path, j.dump(2) + "\n");
}

}  // namespace

Summary exportModel(const Options& options, const std::function<void(const Progress&)>& progress,
                    const std::atomic<bool>* cancel) {
  if (options.outputDir.empty())
    throw Error("no output folder", "--output-dir", "pass --output-dir OUT");
  if (options.maxShardBytes == 0)
    throw Error("the shard size limit must be positive", "--max-shard-size");
  const std::string out = files::withoutTrailingSlash(options.outputDir);
  // Refusals first, before anything is read or written.
  if (files::exists(out)) {
    if (!files::isDirectory(out))
      throw Error("the output exists and is not a folder", out, "choose another --output-dir");
    if (files::samePath(out, options.modelDir))
      throw Error("the output folder is the model folder", out, "choose another --output-dir");
    if (!files::listDirectory(out).empty() && !options.force)
      throw Error("the output folder is not empty", out,
                  "pass --force to replace it, or choose another --output-dir");
  }

  Input in = openInput(files::withoutTrailingSlash(options.modelDir));
  const QuantState state = readQuantState(in.dir);
  Plan plan = makePlan(options, in, state, cancel, progress);
  const std::vector<Shard> shards = assignShards(plan, options.maxShardBytes);

  Summary summary;
  summary.outputDir = out;
  summary.format = formatName(options.format);
  summary.quantAlgo = plan.quantAlgo;
  summary.source = state.present ? "quant_state.json (" + state.description + ")" : "BF16 weights";
  summary.tensors = int64_t(plan.tensors.size());
  summary.quantizedLayers = int64_t(plan.layers.size());
  summary.shards = int64_t(shards.size());
  summary.sharedTensorScales = plan.config.format == FP4_FORMAT_NVFP4 && isQuantized(plan.format);
  if (isQuantized(options.format)) summary.excludeList = plan.excludeList;
  for (const auto& [name, t] : in.tensors) summary.inputBytes += t.info->bytes();
  for (const OutTensor& t : plan.tensors) summary.outputBytes += t.bytes;
  summary.compression =
      summary.outputBytes ? double(summary.inputBytes) / double(summary.outputBytes) : 1.0;

  const std::string parent = files::parentOf(out);
  files::createDirectories(parent);
  const std::string staging =
      files::makeTemporaryDirectory(files::join(parent, "." + files::baseName(out) + ".tmp-"));
  try {
    Writer writer(plan, in, cancel, progress);
    for (const Shard& s : shards) writer.writeShard(s, files::join(staging, s.file));
    if (shards.size() > 1) {
      json index;
      index["metadata"] = {{"total_size", summary.outputBytes}};
      json map = json::object();
      for (const Shard& s : shards)
        for (size_t i : s.tensors) map[plan.tensors[i].name] = s.file;
      index["weight_map"] = map;
      writeText(files::join(staging, "model.safetensors.index.json"), index);
    }
    json config = in.config;
    config.erase("quantization_config");
    if (isQuantized(options.format)) {
      config["quantization_config"] = quantizationConfig(plan, options);
    } else {
      if (config.contains("torch_dtype")) config["torch_dtype"] = "bfloat16";
      if (config.contains("dtype")) config["dtype"] = "bfloat16";
    }
    writeText(files::join(staging, "config.json"), config);
    if (options.format == Format::ModelOptNvfp4) {
      json hf = {{"producer", {{"name", "fp4lab"}, {"version", FP4LAB_VERSION}}},
                 {"quantization",
                  {{"quant_algo", plan.quantAlgo},
                   {"kv_cache_quant_algo", nullptr},
                   {"group_size", 16},
                   {"exclude_modules", plan.excludeList}}}};
      writeText(files::join(staging, "hf_quant_config.json"), hf);
    }
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json",
                          "special_tokens_map.json", "chat_template.jinja", "chat_template.json",
                          "fp4lab_tokenizer.json", "tokenizer.model", "vocab.json", "merges.txt"}) {
      const std::string p = files::join(in.dir, f);
      if (files::isRegularFile(p))
        files::writeFileAtomically(files::join(staging, f), files::readFile(p));
    }
    if (options.verify) verify(plan, in, shards, staging, cancel, progress, summary);
    checkCancel(cancel, out);
    if (files::exists(out) && !files::listDirectory(out).empty() && !options.force)
      throw Error("the output folder is not empty (something was written there meanwhile)", out,
                  "pass --force to replace it, or choose another --output-dir");
    // mkdtemp made the folder private (0700); a model folder is readable by all, like its files.
    ::chmod(staging.c_str(), 0755);
    files::publishFolder(staging, out);
  } catch (...) {
    files::removeTree(staging);
    throw;
  }
  return summary;
}

}  // namespace fp4lab::exporter
