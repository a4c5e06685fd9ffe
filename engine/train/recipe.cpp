// The recipes: SFT (cross-entropy on the data). PTQ, QAT and QAD join here.
#include "train/recipe.h"

#include "fp4lab/error.h"

namespace fp4lab::train {

torch::Tensor tokenCrossEntropy(const torch::Tensor& logits, const torch::Tensor& targets) {
  // Cross-entropy in fp32 whatever the autocast dtype: bf16 log-softmax loses the small losses.
  return torch::nn::functional::cross_entropy(
      logits.reshape({-1, logits.size(-1)}).to(torch::kFloat), targets.reshape({-1}),
      torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100));
}

namespace {

class SftRecipe : public Recipe {
 public:
  std::string name() const override { return "sft"; }
  torch::Tensor loss(model::CausalLM& model, const Batch& batch) override {
    return tokenCrossEntropy(model->forward(batch.inputs), batch.targets);
  }
};

}  // namespace

std::unique_ptr<Recipe> makeRecipe(const run::RunConfig& config) {
  if (config.recipe == "sft") return std::make_unique<SftRecipe>();
  throw Error("unknown recipe '" + config.recipe + "'", "recipe.name", "use sft");
}

}  // namespace fp4lab::train
