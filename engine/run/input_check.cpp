// Checks that a run's model folders and data files are there, without loading them.
#include "fp4lab/run/input_check.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "fp4lab/error.h"

namespace fp4lab::run {

namespace fs = std::filesystem;

void checkModelFolder(const std::string& path) {
  const fs::path dir(path);
  std::error_code ec;
  if (!fs::exists(dir, ec))
    throw Error("model folder does not exist", path,
                "pass a Hugging Face folder (config.json + model.safetensors), or builtin:tiny");
  if (!fs::is_directory(dir, ec))
    throw Error("not a folder", path,
                "pass the model's folder (config.json + model.safetensors), not a file in it");
  std::vector<std::string> missing;
  if (!fs::exists(dir / "config.json", ec)) missing.push_back("config.json");
  if (!fs::exists(dir / "model.safetensors", ec) &&
      !fs::exists(dir / "model.safetensors.index.json", ec))
    missing.push_back("model.safetensors (or model.safetensors.index.json with its shards)");
  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing) list += (list.empty() ? "" : " and ") + m;
    throw Error("not a model folder: no " + list, path,
                "a Hugging Face model folder holds config.json and model.safetensors");
  }
  std::ifstream in(dir / "config.json");
  if (!in)
    throw Error("cannot read config.json", (dir / "config.json").string(),
                "check the file's permissions");
  const nlohmann::json config = nlohmann::json::parse(in, nullptr, false);
  if (config.is_discarded() || !config.is_object())
    throw Error("config.json is not a JSON object (damaged, or not a model's config)",
                (dir / "config.json").string(), "copy the model folder again");
}

namespace {

bool isBuiltIn(const std::string& source) {
  for (const char* prefix : {"builtin:", "scratch:", "random:"})
    if (source.rfind(prefix, 0) == 0) return true;
  return false;
}

void checkModel(const std::string& key, const std::string& path) {
  if (path.empty() || isBuiltIn(path)) return;
  try {
    checkModelFolder(path);
  } catch (const Error& e) {
    throw Error(e.problem() + ": " + e.where(), key, e.hint());
  }
}

void checkData(const std::string& key, const std::string& sourceIn) {
  std::string source = sourceIn;
  if (source.rfind("heldout:", 0) == 0) source = source.substr(8);
  if (source.empty() || isBuiltIn(source)) return;
  std::error_code ec;
  if (!fs::exists(source, ec))
    throw Error("data file does not exist: " + source, key,
                "pass a JSONL file (one example per line), or a built-in such as builtin:sft");
  if (fs::is_directory(source, ec))
    throw Error("a folder, not a data file: " + source, key,
                "pass the JSONL file itself (one example per line)");
  if (!std::ifstream(source))
    throw Error("cannot open the data file " + source, key, "check the file's permissions");
}

}  // namespace

void checkInputs(const RunConfig& config) {
  checkModel("model.path", config.modelPath);
  if (config.recipe == "qad") checkModel("recipe.teacher", config.teacher);
  checkModel("eval.reference", config.reference);
  checkData("data.train", config.trainData);
  checkData("data.validation", config.validationData);
}

bool hasInputsOnDisk(const RunConfig& config) {
  auto onDisk = [](std::string source) {
    if (source.rfind("heldout:", 0) == 0) source = source.substr(8);
    return !source.empty() && !isBuiltIn(source);
  };
  return onDisk(config.modelPath) || (config.recipe == "qad" && onDisk(config.teacher)) ||
         onDisk(config.reference) || onDisk(config.trainData) || onDisk(config.validationData);
}

}  // namespace fp4lab::run
