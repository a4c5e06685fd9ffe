// RunConfig: everything one run needs, read from YAML plus `key=value` overrides, with unknown
// keys and wrong types rejected by name. Plain C++ so the GUI can show and edit configs.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace fp4lab::run {

struct RunConfig {
  // run.*
  std::string name = "run";
  std::string outputDir = "runs";
  uint64_t seed = 1234;  // training order, initialisation, sampling: what a repeat run varies
  // model.*: a Hugging Face folder, or builtin:tiny
  std::string modelPath = "builtin:tiny";
  // Load model.path, the teacher and the reference as their BF16 weights even where a saved
  // quant_state.json says they were fake-quantized (default: as saved).
  bool bf16Weights = false;
  std::string computeDtype = "bf16";  // bf16 (autocast, fp32 master weights) or fp32
  // data.*: JSONL files or builtin:<name>
  std::string trainData = "builtin:sft";
  std::string validationData;  // empty: split from trainData
  double validationFraction = 0.05;
  int64_t validationMax = 256;  // at most this many validation examples
  int seqLen = 256;
  bool pack = true;
  // Which examples a built-in source generates, which are held out for validation, and the task
  // items graded: fixed while run.seed varies, so runs at several seeds share one validation set.
  uint64_t dataSeed = 1234;
  // recipe.*: sft, ptq (calibrate, evaluate, save), qat, qad
  std::string recipe = "sft";
  std::string teacher;       // qad: the frozen BF16 teacher (empty: model.path)
  double temperature = 1.0;  // qad: KL(p_teacher || p_student) at this temperature
  double ceWeight = 0.0;     // qad: loss = KL + ceWeight * cross-entropy
  // quant.*: what is fake-quantized (ptq, qat, qad)
  std::string quantFormat = "none";    // none, mxfp4, nvfp4
  std::string scaleRule = "ceil";      // mxfp4: ceil or floor
  bool blocks2d = false;               // nvfp4: 16x16 weight blocks
  bool quantActivations = true;        // W4A4; false: W4A16
  std::string quantBackward = "auto";  // ste, clipped_ste, auto (clipped for nvfp4, ste for mxfp4)
  std::string amaxMode = "frozen";     // frozen (calibrated) or dynamic (per call)
  bool sharedGroupScale = true;        // nvfp4: q/k/v, gate/up share one tensor scale (as exported)
  int64_t calibBatches = 4;
  std::string quantInclude = "auto";  // see quantIncludePatterns
  std::string quantExclude = "*lm_head*,*embed*,*router*,*.gate";
  // eval.*
  std::string reference;  // KL to this BF16 model at every eval (empty: the qad teacher, or none)
  std::string tasks;      // comma-separated built-in tasks graded by generation
  int64_t taskItems = 50;
  int64_t taskEvery = 0;  // task evaluation every N steps; 0: at the final evaluation only
  int maxNewTokens = 96;
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
  int threads = 0;             // 0: all cores
  std::string device = "cpu";  // cpu, cuda (rank r: cuda:LOCAL_RANK) or cuda:N
  // dist.*: data-parallel runs (fp4lab train --nproc, torchrun's variables)
  double distTimeoutSeconds = 300;  // rendezvous and every collective
  int distProcesses = 1;            // ranks `fp4lab train` starts on this machine (--nproc)

  // Where each key was last set ("run.yaml:12", "command line"), for messages; not part of the
  // configuration (toYaml and flatten leave it out).
  std::map<std::string, std::string> origins;

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
  // Checks across keys (each key's own type and bounds are checked as it is read); throws
  // fp4lab::Error naming the key and where it was set.
  void validate() const;
  // The value of `key` as flatten() writes it ("" for an unknown key).
  std::string valueOf(const std::string& key) const;
  // Where `key` was set, or "run config (default value)".
  std::string originOf(const std::string& key) const;
  // recipe.teacher, or model.path when it is empty (a QAD student distils from where it started).
  std::string teacherPath() const { return teacher.empty() ? modelPath : teacher; }
};

// The keys whose values differ between two configurations (ConfigKey::definesRun keys only
// unless `all`), in table order; paths naming the same file or folder do not differ.
std::vector<std::string> differingKeys(const RunConfig& a, const RunConfig& b, bool all = false);

// train.device parsed: cpu, cuda (index -1: the first GPU, or LOCAL_RANK's) or cuda:N.
struct DeviceSpec {
  bool cuda = false;
  int index = -1;
};
std::optional<DeviceSpec> parseDevice(const std::string& text);

// A comma-separated value (quant.include, eval.tasks, ...) as its items, blanks trimmed, empty
// items dropped.
std::vector<std::string> splitList(const std::string& list);

// quant.include's patterns for a model of `architecture` (config.json's class name): "auto" means
// what the published recipes quantize, every linear of the decoder layers
// ("model.layers.*"), except for gpt-oss, where only the experts are
// ("model.layers.*.mlp.experts.*": attention and routers stay BF16, as in the checkpoint OpenAI
// ships).
std::vector<std::string> quantIncludePatterns(const std::string& include,
                                              const std::string& architecture);

}  // namespace fp4lab::run
