// A recipe decides what is trained, what is quantized and what the loss is; the training loop
// (trainer.cpp) calls it and never branches on recipe names.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>

#include "fp4lab/run/run_config.h"
#include "model/causal_lm.h"

namespace fp4lab::train {

struct Batch {
  torch::Tensor inputs;   // [B, T] int64
  torch::Tensor targets;  // [B, T] int64, -100 where no loss
  int64_t lossTokens = 0;
};

class Recipe {
 public:
  virtual ~Recipe() = default;
  virtual std::string name() const = 0;
  // Called once before training on the loaded student model (turn quantizers on, load a teacher).
  virtual void prepare(model::CausalLM& model) { (void)model; }
  // The scalar loss of one micro-batch, averaged over its loss tokens.
  virtual torch::Tensor loss(model::CausalLM& model, const Batch& batch) = 0;
};

// Mean token cross-entropy over the positions whose target is not -100.
torch::Tensor tokenCrossEntropy(const torch::Tensor& logits, const torch::Tensor& targets);

std::unique_ptr<Recipe> makeRecipe(const run::RunConfig& config);

}  // namespace fp4lab::train
