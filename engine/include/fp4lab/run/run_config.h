// RunConfig: everything one run needs, read from YAML plus `key=value` overrides, with unknown
// keys and wrong types rejected by name. Plain C++ so the GUI can show and edit configs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fp4lab::run {

struct RunConfig {
  // run.*
  std::string name = "run";
  std::string outputDir = "runs";
  uint64_t seed = 1234;
  // model.*: a Hugging Face folder, or builtin:tiny
  std::string modelPath = "builtin:tiny";
  std::string computeDtype = "bf16";  // bf16 (autocast, fp32 master weights) or fp32
  // data.*: JSONL files or builtin:<name>
  std::string trainData = "builtin:sft";
  std::string validationData;  // empty: split from trainData
  double validationFraction = 0.05;
  int64_t validationMax = 256;  // at most this many validation examples
  int seqLen = 256;
  bool pack = true;
  // recipe.*
  std::string recipe = "sft";
  // optim.*
  double lr = 1e-3;
  double minLrRatio = 0.1;
  double warmupRatio = 0.03;
  double weightDecay = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double gradClip = 1.0;
  // train.*
  int batchSize = 8;
  int gradAccum = 1;
  int64_t maxSteps = 100;
  int64_t evalEvery = 50;  // 0: only at the end
  int64_t evalBatches = 8;
  int64_t checkpointEvery = 0;  // 0: only at the end
  int keepCheckpoints = 2;
  int threads = 0;  // 0: all cores

  // Reads YAML (a file, or text) then applies `key=value` overrides in order.
  static RunConfig fromYamlFile(const std::string& path,
                                const std::vector<std::string>& overrides = {});
  static RunConfig fromYamlText(const std::string& text,
                                const std::vector<std::string>& overrides = {},
                                const std::string& origin = "<config>");
  // Applies one `section.key=value` override; throws fp4lab::Error for unknown keys or bad values.
  void applyOverride(const std::string& assignment);
  // The resolved configuration, every key, as YAML that fromYamlText reads back identically.
  std::string toYaml() const;
  // Every key with its current value, as strings ("optim.lr" -> "0.001"), for tables and diffs.
  std::vector<std::pair<std::string, std::string>> flatten() const;
  // Cross-field checks (positive sizes, ranges); throws fp4lab::Error naming the key.
  void validate() const;
};

}  // namespace fp4lab::run
