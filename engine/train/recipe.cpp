// The recipes: SFT, PTQ, QAT and QAD. Everything they share with each other lives in
// QuantizingRecipe (attach, calibrate, save the quantizer state); the loop is trainer.cpp.
#include "train/recipe.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "fp4lab/error.h"
#include "fp4lab/common/files.h"
#include "model/fused_ops.h"
#include "train/autocast.h"

namespace fp4lab::train {

Batch makeBatch(const std::vector<const data::Sequence*>& sequences, int64_t seqLen,
                torch::Device device) {
  const int64_t b = int64_t(sequences.size()), t = seqLen;
  torch::Tensor inputs = torch::empty({b, t}, torch::kLong),
                targets = torch::empty({b, t}, torch::kLong);
  auto in = inputs.accessor<int64_t, 2>();
  auto tg = targets.accessor<int64_t, 2>();
  int64_t lossTokens = 0;
  for (int64_t i = 0; i < b; ++i) {
    const data::Sequence& s = *sequences[size_t(i)];
    for (int64_t j = 0; j < t; ++j) {
      in[i][j] = s.ids[size_t(j)];
      bool target = s.lossMask[size_t(j + 1)] != 0;
      tg[i][j] = target ? s.ids[size_t(j + 1)] : -100;
      lossTokens += target;
    }
  }
  return Batch{inputs.to(device), targets.to(device), lossTokens};
}

torch::Tensor tokenCrossEntropy(const torch::Tensor& logits, const torch::Tensor& targets) {
  // Cross-entropy in fp32 whatever the autocast dtype: bf16 log-softmax loses the small losses.
  return torch::nn::functional::cross_entropy(
      logits.reshape({-1, logits.size(-1)}).to(torch::kFloat), targets.reshape({-1}),
      torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100));
}

torch::Tensor tokenKl(const torch::Tensor& teacherLogits, const torch::Tensor& studentLogits,
                      const torch::Tensor& targets, double temperature) {
  return model::distillationKl(teacherLogits, studentLogits, targets, temperature);
}

namespace {

class SftRecipe : public Recipe {
 public:
  std::string name() const override { return "sft"; }
  void prepare(model::CausalLM&, const RecipeContext& context) override {
    if (!context.savedQuantizers.empty())
      throw Error("model.path holds a fake-quantized model (" + context.savedOptions.describe() +
                      "); recipe sft trains BF16 weights",
                  "model.path",
                  "set model.bf16_weights=true to fine-tune its BF16 weights, or "
                  "recipe.name=qat to go on training it fake-quantized");
  }
  torch::Tensor loss(model::CausalLM& model, const Batch& batch) override {
    return tokenCrossEntropy(model->forward(batch.inputs), batch.targets);
  }
};

// Fake quantization on the student: attach, then calibrate (or restore a checkpoint's amaxes).
class QuantizingRecipe : public Recipe {
 public:
  explicit QuantizingRecipe(const run::RunConfig& config)
      : m_config(config), m_options(quant::QuantOptions::fromConfig(config)) {}

  void prepare(model::CausalLM& model, const RecipeContext& context) override {
    if (!context.savedQuantizers.empty()) {
      // A model saved fake-quantized (a checkpoint, a PTQ or QAT model): keep its quantizers and
      // amaxes when they are what this run would attach (ModelOpt's PTQ-then-QAT), else refuse
      // rather than quantize twice.
      std::vector<std::string> saved;
      for (const auto& l : context.savedQuantizers) saved.push_back(l.name);
      const bool sameLayers = quant::selectLayers(model, m_options) == saved;
      if (!quant::sameQuantization(m_options, context.savedOptions) || !sameLayers)
        throw Error("model.path holds a fake-quantized model (" + context.savedOptions.describe() +
                        ", " + std::to_string(saved.size()) + " layers) but this run asks for " +
                        m_options.describe() + (sameLayers ? "" : " on other layers"),
                    "model.path",
                    "set quant.* to match its quant_state.json, or model.bf16_weights=true to "
                    "quantize its BF16 weights afresh");
      m_layers = context.savedQuantizers;
      return;
    }
    m_layers = quant::attachQuantizers(model, m_options);
    if (context.checkOnly) return;
    const int64_t batches = m_options.frozenAmax ? m_config.calibBatches : 0;
    quant::calibrate(m_layers, batches, [&](int64_t i) {
      Batch batch = context.calibrationBatch(i);
      AutocastGuard autocast(context.autocast, model->device().type());
      model->forward(batch.inputs);
    });
    if (context.maxOverRanks && batches > 0) {
      // Every rank must quantize with the same amaxes: the max over the ranks' slices. NaN (not
      // calibrated) travels as -inf, which loses to any calibrated value.
      std::vector<float> amax;
      for (const auto& l : m_layers) {
        amax.push_back(l.weight->amax());
        amax.push_back(l.input ? l.input->amax() : NAN);
      }
      for (float& a : amax) a = std::isnan(a) ? -INFINITY : a;
      context.maxOverRanks(amax);
      for (float& a : amax) a = a == -INFINITY ? NAN : a;
      for (size_t i = 0; i < m_layers.size(); ++i) {
        m_layers[i].weight->setAmax(amax[2 * i]);
        if (m_layers[i].input) m_layers[i].input->setAmax(amax[2 * i + 1]);
      }
    }
  }

  torch::Tensor loss(model::CausalLM& model, const Batch& batch) override {
    return tokenCrossEntropy(model->forward(batch.inputs), batch.targets);
  }
  std::vector<quant::QuantizedLayer>& quantizedLayers() override { return m_layers; }
  std::string format() const override { return m_options.describe(); }
  std::vector<std::pair<std::string, std::string>> stateFiles() const override {
    return {{kQuantStateFile, quant::quantStateJson(m_layers, m_options)}};
  }

 protected:
  const run::RunConfig& m_config;
  quant::QuantOptions m_options;
  std::vector<quant::QuantizedLayer> m_layers;
};

class PtqRecipe : public QuantizingRecipe {
 public:
  using QuantizingRecipe::QuantizingRecipe;
  std::string name() const override { return "ptq"; }
  bool trains() const override { return false; }
};

class QatRecipe : public QuantizingRecipe {
 public:
  using QuantizingRecipe::QuantizingRecipe;
  std::string name() const override { return "qat"; }
};

class QadRecipe : public QuantizingRecipe {
 public:
  using QuantizingRecipe::QuantizingRecipe;
  std::string name() const override { return "qad"; }

  void prepare(model::CausalLM& model, const RecipeContext& context) override {
    m_teacher = context.loadFrozenModel(m_config.teacherPath());
    if (m_teacher->config().vocabSize != model->config().vocabSize)
      throw Error("the teacher's vocabulary (" + std::to_string(m_teacher->config().vocabSize) +
                      ") differs from the student's (" + std::to_string(model->config().vocabSize) +
                      ")",
                  "recipe.teacher", "distil from a model of the same family");
    QuantizingRecipe::prepare(model, context);
  }

  std::string defaultReference() const override { return m_config.teacherPath(); }

  torch::Tensor loss(model::CausalLM& model, const Batch& batch) override {
    torch::Tensor teacherLogits;
    {
      torch::NoGradGuard noGrad;
      teacherLogits = m_teacher->forward(batch.inputs);
    }
    torch::Tensor studentLogits = model->forward(batch.inputs);
    const double t = m_config.temperature;
    // T^2 keeps the gradient's scale independent of the temperature (Hinton et al.).
    torch::Tensor loss = tokenKl(teacherLogits, studentLogits, batch.targets, t) * (t * t);
    if (m_config.ceWeight > 0)
      loss = loss + m_config.ceWeight * tokenCrossEntropy(studentLogits, batch.targets);
    return loss;
  }

 private:
  model::CausalLM m_teacher{nullptr};
};

}  // namespace

std::unique_ptr<Recipe> makeRecipe(const run::RunConfig& config) {
  if (config.recipe == "sft") return std::make_unique<SftRecipe>();
  if (config.recipe == "ptq") return std::make_unique<PtqRecipe>(config);
  if (config.recipe == "qat") return std::make_unique<QatRecipe>(config);
  if (config.recipe == "qad") return std::make_unique<QadRecipe>(config);
  throw Error("unknown recipe '" + config.recipe + "'", "recipe.name", "use sft, ptq, qat or qad");
}

}  // namespace fp4lab::train
