// Layer sensitivity (`fp4lab sensitivity`): the validation loss, and KL to the BF16 model, when
// only one layer is fake-quantized, for every layer the recipes would quantize; the BF16 and the
// all-layers PTQ loss; and a greedy mixed-precision plan (keep the k most sensitive layers in
// BF16) with each plan's model size and measured loss: the size/accuracy frontier. Every number is
// measured by the PTQ recipe's quantizers and the trainer's own evaluation (train::Trainer::
// evaluate), on a run configuration built as a PTQ run with data.train = data.validation = the
// data file, so a PTQ run with a plan's quant.exclude evaluates to the plan's loss. Plain C++:
// LibTorch stays in engine/run/sensitivity.cpp.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "fp4lab/analyze/sensitivity_file.h"
#include "fp4lab/run/run_config.h"

namespace fp4lab::run {

struct SensitivityOptions {
  std::string modelDir;  // a model folder (its BF16 weights), or builtin:tiny
  std::string data;      // JSONL rows (chat, prompt/completion, input_ids) or builtin:<name>
  // "nvfp4", "nvfp4-2d" (16x16 weight blocks), "mxfp4" (ceil scales), "mxfp4-floor".
  std::string format = "nvfp4";
  bool w4a4 = false;       // quantize the layers' inputs too (default: weight-only, W4A16)
  int64_t maxBatches = 0;  // evaluation batches (train.batch_size sequences); 0: every sequence
  int threads = 0;         // 0: the usable cores
  bool kl = true;          // also measure KL to the BF16 model (a second forward pass)
  bool allPlans = false;   // evaluate every k = 0..N (default: 0..16, then every few, and N)
  std::vector<int64_t> extraPlans;  // k values to evaluate in any case (--keep)
  // key=value settings of the run configuration (data.seq_len, train.batch_size,
  // quant.include, quant.exclude, quant.calib_batches, ...); the keys the options above set are
  // refused.
  std::vector<std::string> overrides;
};

using LayerSensitivity = analyze::SensitivityLayer;
using SensitivityPlan = analyze::SensitivityPlan;

struct SensitivityResult {
  std::string model, data, format;  // format: the quantization, e.g. "NVFP4 W4A16, 1-D blocks, ..."
  std::string formatName;           // as given, e.g. "nvfp4"
  bool w4a4 = false;
  int64_t sequences = 0, tokens = 0;  // evaluated per measurement
  double bf16Loss = 0, ptqLoss = 0, ptqKl = 0;
  int64_t bf16Bytes = 0, ptqBytes = 0;   // the whole model in BF16; with every layer quantized
  std::vector<LayerSensitivity> layers;  // in model order
  std::vector<SensitivityPlan> plans;    // by keep, ascending; keep 0 = PTQ, keep N = BF16
  RunConfig config;                      // the PTQ run configuration measured
  double seconds = 0;
  int threads = 0;
};

struct SensitivityProgress {
  int64_t done = 0, total = 0;  // evaluations
  std::string what;             // the one about to run, e.g. "model.layers.3.mlp.up_proj"
};

// Measures everything above. Throws fp4lab::Error for bad input (no model, no rows, unknown
// format, a refused key), and Error("sensitivity cancelled") when *cancel becomes true (checked
// between evaluations).
SensitivityResult measureSensitivity(
    const SensitivityOptions& options,
    const std::function<void(const SensitivityProgress&)>& progress = {},
    const std::atomic<bool>* cancel = nullptr);

// The format names measureSensitivity accepts.
std::vector<std::string> sensitivityFormats();

// The default plan: the smallest measured keep whose loss is at most bf16Loss + tolerance *
// |bf16Loss| (tolerance 0.01: within 1 % of the BF16 loss).
int64_t chooseKeep(const SensitivityResult& result, double tolerance = 0.01);
// The plan with that keep (throws fp4lab::Error if it was not measured).
const SensitivityPlan& planWithKeep(const SensitivityResult& result, int64_t keep);

// A fixed-width table: the BF16 and PTQ lines, the layers by rank, then the plans.
std::string sensitivityTable(const SensitivityResult& result, int64_t chosenKeep);
// What the file of `--output` holds (analyze::writeSensitivityFile writes it as HDF5 or JSON).
analyze::SensitivityFile sensitivityFile(const SensitivityResult& result, int64_t chosenKeep,
                                         double tolerance);

}  // namespace fp4lab::run
