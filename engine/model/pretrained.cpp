// Loading and saving Hugging Face model folders through fp4lab::io's safetensors reader and
// writer; saving stages the whole folder next to the target and swaps it in at the end.
#include "model/pretrained.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <set>

#include "fp4lab/error.h"
#include "fp4lab/io/safetensors.h"
#include "fp4lab/common/files.h"

#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)  // <linux/fs.h>; not every libc header exposes it
#endif

namespace fp4lab::model {

namespace {

using Json = nlohmann::json;

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

std::string shapeText(torch::IntArrayRef shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

std::string nameList(const std::vector<std::string>& names) {
  constexpr size_t kShown = 12;
  std::string text;
  for (size_t i = 0; i < names.size() && i < kShown; ++i) text += (i ? ", " : "") + names[i];
  if (names.size() > kShown) text += ", ... (" + std::to_string(names.size() - kShown) + " more)";
  return text;
}

std::string systemError(const std::string& what, int error) {
  return what + ": " + std::strerror(error);
}

std::optional<torch::Dtype> torchDtypeOf(io::DType dtype) {
  switch (dtype) {
    case io::DType::F32:
      return torch::kFloat;
    case io::DType::BF16:
      return torch::kBFloat16;
    case io::DType::F16:
      return torch::kHalf;
    case io::DType::F64:
      return torch::kDouble;
    default:
      return std::nullopt;
  }
}

struct SaveType {
  io::DType fileType;
  const char* configName;  // config.json's torch_dtype
};

SaveType saveTypeOf(torch::Dtype dtype) {
  switch (dtype) {
    case torch::kFloat:
      return {io::DType::F32, "float32"};
    case torch::kBFloat16:
      return {io::DType::BF16, "bfloat16"};
    case torch::kHalf:
      return {io::DType::F16, "float16"};
    case torch::kDouble:
      return {io::DType::F64, "float64"};
    default:
      throw Error(std::string("cannot save weights as ") + c10::toString(dtype),
                  "SaveOptions.dtype", "use bfloat16, float32, float16 or float64");
  }
}

// Tensors that transformers itself drops on load: old checkpoints saved the rotary inv_freq
// buffers, and tied models sometimes carry an lm_head copy of the embedding.
bool isHarmlessExtra(const std::string& name, const ModelConfig& config) {
  const std::string suffix = "rotary_emb.inv_freq";
  if (name.size() >= suffix.size() &&
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
    return true;
  }
  return config.tieWordEmbeddings && name == "lm_head.weight";
}

// A shard name from an index must stay inside the model folder.
void checkShardName(const std::string& file, const std::string& where) {
  if (file.empty() || file == "." || file == ".." || file.find('/') != std::string::npos ||
      file.find('\\') != std::string::npos) {
    throw Error("weight_map names an invalid shard file '" + file + "'", where,
                "shard files must be plain file names inside the model folder");
  }
}

Json readJson(const std::string& path) {
  try {
    return Json::parse(files::readFile(path));
  } catch (const Json::exception& error) {
    throw Error(std::string("invalid JSON: ") + error.what(), path);
  }
}

// Copies one checkpoint tensor into a model parameter, converting its dtype (and device).
void loadTensor(const io::SafetensorsFile& file, const io::TensorInfo& info,
                torch::Tensor& target) {
  const std::string where = file.path() + ", tensor '" + info.name + "'";
  const auto sourceType = torchDtypeOf(info.dtype);
  if (!sourceType) {
    throw Error(std::string("tensor has dtype ") + io::dtypeName(info.dtype) +
                    "; expected F32, BF16, F16 or F64",
                where, "quantized checkpoints are read by the importers, not loadPretrained");
  }
  if (!torch::IntArrayRef(info.shape).equals(target.sizes())) {
    throw Error("tensor has shape " + shapeText(info.shape) + " but the config implies " +
                    shapeText(target.sizes()),
                where, "config.json does not match the weights");
  }
  const uint8_t* bytes = file.data(info);
  const size_t elementSize = io::dtypeSize(info.dtype);
  torch::Tensor source;
  if (reinterpret_cast<uintptr_t>(bytes) % elementSize == 0) {
    // Straight from the mapping: the one copy is copy_ into the parameter (read-only access).
    source = torch::from_blob(const_cast<uint8_t*>(bytes), info.shape, *sourceType);
  } else {
    // safetensors does not promise aligned data; an unaligned tensor is copied out first.
    source = torch::empty(info.shape, *sourceType);
    std::memcpy(source.data_ptr(), bytes, info.bytes());
  }
  target.copy_(source);
}

}  // namespace

// ----- Loading -----------------------------------------------------------------------------

CausalLM loadPretrained(const std::string& dir, torch::Dtype dtype, torch::Device device) {
  if (!files::isDirectory(dir)) {
    throw Error("not a model folder", dir, "expected a Hugging Face folder with config.json");
  }
  const ModelConfig config = loadModelConfig(files::join(dir, "config.json"));
  CausalLM model(config, torch::TensorOptions(dtype).device(device), /*initialize=*/false);

  // Which files to read, and (with an index) which tensor each must hold.
  std::vector<std::string> shardFiles;
  std::map<std::string, std::string> weightMap;
  const std::string indexPath = files::join(dir, kIndexFile);
  if (files::exists(indexPath)) {
    const Json index = readJson(indexPath);
    if (!index.is_object() || !index.contains("weight_map") ||
        !index.at("weight_map").is_object()) {
      throw Error("missing object field 'weight_map'", indexPath);
    }
    std::set<std::string> seen;
    for (const auto& [name, file] : index.at("weight_map").items()) {
      if (!file.is_string()) {
        throw Error("weight_map entry '" + name + "' is not a file name", indexPath);
      }
      const std::string fileName = file.get<std::string>();
      checkShardName(fileName, indexPath);
      weightMap[name] = fileName;
      if (seen.insert(fileName).second) shardFiles.push_back(fileName);
    }
    for (const std::string& file : shardFiles) {
      if (!files::isRegularFile(files::join(dir, file))) {
        throw Error("shard '" + file + "' named in the index is missing", indexPath,
                    "the download or copy of this model is incomplete");
      }
    }
  } else if (files::exists(files::join(dir, kSingleFile))) {
    shardFiles.push_back(kSingleFile);
  } else {
    throw Error(std::string("no ") + kSingleFile + " or " + kIndexFile, dir,
                "only safetensors checkpoints are supported");
  }

  auto parameters = model->named_parameters();
  std::set<std::string> loaded;
  std::vector<std::string> unexpected;
  torch::NoGradGuard noGrad;
  for (const std::string& fileName : shardFiles) {
    const io::SafetensorsFile file(files::join(dir, fileName));
    for (const io::TensorInfo& info : file.tensors()) {
      torch::Tensor* target = parameters.find(info.name);
      if (!target) {
        if (!isHarmlessExtra(info.name, config)) unexpected.push_back(info.name);
        continue;
      }
      if (!weightMap.empty()) {
        const auto mapped = weightMap.find(info.name);
        if (mapped == weightMap.end() || mapped->second != fileName) {
          // Two copies, or a copy the index does not know: which one is meant is unknowable.
          throw Error("tensor '" + info.name + "' is in shard '" + fileName +
                          "' but the index maps it " +
                          (mapped == weightMap.end() ? "nowhere" : "to '" + mapped->second + "'"),
                      indexPath);
        }
      }
      if (!loaded.insert(info.name).second) {
        throw Error("tensor '" + info.name + "' appears in more than one file", dir);
      }
      loadTensor(file, info, *target);
    }
    for (const auto& [name, mappedFile] : weightMap) {
      if (mappedFile == fileName && !file.find(name)) {
        throw Error("the index maps tensor '" + name + "' to '" + fileName + "', which lacks it",
                    indexPath);
      }
    }
  }

  std::vector<std::string> missing;
  for (const auto& item : parameters) {
    if (!loaded.count(item.key())) missing.push_back(item.key());
  }
  if (!missing.empty() || !unexpected.empty()) {
    std::string problem;
    if (!missing.empty()) {
      problem += std::to_string(missing.size()) +
                 " tensor(s) missing from the checkpoint: " + nameList(missing);
    }
    if (!unexpected.empty()) {
      problem += std::string(problem.empty() ? "" : "; ") + std::to_string(unexpected.size()) +
                 " unexpected tensor(s) in the checkpoint: " + nameList(unexpected);
    }
    throw Error(problem, dir, "config.json and the weights describe different models");
  }
  return model;
}

// ----- Saving ------------------------------------------------------------------------------

void writePretrainedFiles(CausalLM& model, const std::string& dir, const SaveOptions& options) {
  if (!files::isDirectory(dir)) throw Error("not a folder", dir);
  const SaveType saveType = saveTypeOf(options.dtype);

  ModelConfig config = model->config();
  config.torchDtype = saveType.configName;
  Json configJson = toJson(config);
  if (!options.extraConfig.is_null()) {
    if (!options.extraConfig.is_object()) {
      throw Error("extra config must be a JSON object", "SaveOptions.extraConfig");
    }
    for (const auto& [key, value] : options.extraConfig.items()) configJson[key] = value;
  }
  // Read the extra files first: a missing one fails the save before anything is written.
  std::vector<std::pair<std::string, std::string>> extraFiles;
  extraFiles = options.extraContents;
  for (const std::string& extra : options.extraFiles) {
    extraFiles.emplace_back(files::baseName(extra), files::readFile(extra));
  }

  // Plan the shards by size first: their file names carry the total count.
  const auto parameters = model->named_parameters();
  const uint64_t elementSize = io::dtypeSize(saveType.fileType);
  std::vector<std::vector<size_t>> shards(1);
  uint64_t shardBytes = 0, totalBytes = 0;
  for (size_t i = 0; i < parameters.size(); ++i) {
    const uint64_t bytes = static_cast<uint64_t>(parameters[i].value().numel()) * elementSize;
    if (!shards.back().empty() && shardBytes + bytes > options.maxShardBytes) {
      shards.emplace_back();
      shardBytes = 0;
    }
    shards.back().push_back(i);
    shardBytes += bytes;
    totalBytes += bytes;
  }

  Json weightMap = Json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
    const std::string fileName = shards.size() == 1 ? kSingleFile : name;
    // One shard's tensors at a time, each converted and handed to the writer (which copies)
    // before the next, so host memory stays near one shard.
    io::SafetensorsWriter writer;
    for (size_t i : shards[s]) {
      const auto& item = parameters[i];
      const torch::Tensor host = item.value().detach().to(torch::kCPU, options.dtype).contiguous();
      writer.add(item.key(), saveType.fileType, host.sizes().vec(), host.data_ptr(),
                 static_cast<uint64_t>(host.numel()) * elementSize);
      weightMap[item.key()] = fileName;
    }
    writer.write(files::join(dir, fileName));
  }
  if (shards.size() > 1) {
    const Json index = {{"metadata", {{"total_size", totalBytes}}}, {"weight_map", weightMap}};
    files::writeFileAtomically(files::join(dir, kIndexFile), index.dump(2) + "\n");
  }
  files::writeFileAtomically(files::join(dir, "config.json"), configJson.dump(2) + "\n");
  files::writeFileAtomically(files::join(dir, "generation_config.json"),
                             generationConfigJson(config).dump(2) + "\n");
  for (const auto& [name, content] : extraFiles) {
    files::writeFileAtomically(files::join(dir, name), content);
  }
}

void savePretrained(CausalLM& model, const std::string& dir, const SaveOptions& options) {
  const std::string target = files::withoutTrailingSlash(dir);
  if (target.empty()) throw Error("empty folder name", "savePretrained");
  files::createDirectories(files::parentOf(target));
  const std::string staging = target + ".tmp-" + std::to_string(::getpid());
  files::removeTree(staging);  // a leftover of an earlier crash of a process with our pid
  if (::mkdir(staging.c_str(), 0755) != 0) {
    throw Error(systemError("cannot create staging folder", errno), staging,
                "check that the destination's parent folder is writable");
  }
  try {
    writePretrainedFiles(model, staging, options);
    files::publishFolder(staging, target);
  } catch (...) {
    files::removeTree(staging);
    throw;
  }
}

void savePretrained(CausalLM& model, const std::string& dir, torch::Dtype dtype) {
  SaveOptions options;
  options.dtype = dtype;
  savePretrained(model, dir, options);
}

}  // namespace fp4lab::model
