// A recipe decides what is trained, what is quantized and what the loss is; the training loop
// (trainer.cpp) calls it and never branches on recipe names. The recipes:
//   sft  cross-entropy on the data, BF16;
//   ptq  fake-quantize and calibrate, then evaluate and save (trains nothing);
//   qat  cross-entropy with fake quantization on (straight-through gradients);
//   qad  forward KL(p_teacher || p_student) at temperature T from a frozen BF16 teacher to the
//        fake-quantized student, optionally mixed with cross-entropy.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fp4lab/data/packing.h"
#include "fp4lab/run/run_config.h"
#include "model/causal_lm.h"
#include "quant/quantize_model.h"

namespace fp4lab::train {

struct Batch {
  torch::Tensor inputs;   // [B, T] int64
  torch::Tensor targets;  // [B, T] int64, -100 where no loss
  int64_t lossTokens = 0;
};

// Inputs and next-token targets (where the loss mask allows) of `sequences` (seqLen + 1 ids each).
Batch makeBatch(const std::vector<const data::Sequence*>& sequences, int64_t seqLen,
                torch::Device device);

// What prepare() may use.
struct RecipeContext {
  // The i-th calibration batch (training data, fixed order).
  std::function<Batch(int64_t i)> calibrationBatch;
  // Loads a model by path, frozen (no gradients) in BF16, for teachers. Loaded once per path.
  std::function<model::CausalLM(const std::string& path)> loadFrozenModel;
  bool autocast = true;  // the run's compute dtype is bf16
  // The fake quantizers the loaded model came with (its quant_state.json: a checkpoint being
  // resumed, or a quantized model.path); empty for a BF16 model. A quantizing recipe adopts them
  // with their amaxes instead of calibrating, when they are the quantization it would attach.
  std::vector<quant::QuantizedLayer> savedQuantizers;
  quant::QuantOptions savedOptions;
  // A dry run: check everything (layers, quantization, the teacher) but do not calibrate.
  bool checkOnly = false;
  // Data-parallel runs: replaces each value by its maximum over the ranks (every rank calibrates
  // on its slice of each calibration batch; the reduced amaxes are the whole batches'). Empty
  // for one process.
  std::function<void(std::vector<float>&)> maxOverRanks;
};

class Recipe {
 public:
  virtual ~Recipe() = default;
  virtual std::string name() const = 0;
  // False for recipes that only evaluate (ptq): the loop then evaluates and saves at step 0.
  virtual bool trains() const { return true; }
  // Called once before the loop on the loaded student model (turn quantizers on, calibrate,
  // load a teacher). Runs before the run log is created, so quantizedLayers() can shape it.
  virtual void prepare(model::CausalLM& model, const RecipeContext& context) {
    (void)model, (void)context;
  }
  // The scalar loss of one micro-batch, averaged over its loss tokens.
  virtual torch::Tensor loss(model::CausalLM& model, const Batch& batch) = 0;
  // The fake-quantized layers (empty when nothing is quantized).
  virtual std::vector<quant::QuantizedLayer>& quantizedLayers() { return m_noLayers; }
  // "bf16", or the quantization, e.g. "NVFP4 W4A4, 1-D blocks, clipped STE, calibrated amax".
  virtual std::string format() const { return "bf16"; }
  // The model evaluations measure KL to when eval.reference is empty ("" = none): QAD's teacher.
  virtual std::string defaultReference() const { return {}; }
  // The files of the recipe's state (quant_state.json: the quantizers and their amaxes) that a
  // checkpoint or model folder being made must hold: (name, content); none for SFT.
  virtual std::vector<std::pair<std::string, std::string>> stateFiles() const { return {}; }

 private:
  std::vector<quant::QuantizedLayer> m_noLayers;
};

// Mean token cross-entropy over the positions whose target is not -100.
torch::Tensor tokenCrossEntropy(const torch::Tensor& logits, const torch::Tensor& targets);
// Mean over the positions whose target is not -100 of KL(softmax(t/T) || softmax(s/T)), in fp32.
torch::Tensor tokenKl(const torch::Tensor& teacherLogits, const torch::Tensor& studentLogits,
                      const torch::Tensor& targets, double temperature = 1.0);

std::unique_ptr<Recipe> makeRecipe(const run::RunConfig& config);

// The file a quantizing recipe's stateFiles holds.
using quant::kQuantStateFile;

}  // namespace fp4lab::train
