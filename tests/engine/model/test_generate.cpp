// generate(): KV-cached decoding against recomputing the whole sequence each step, stop
// tokens, seeded sampling, and the top-k / top-p filters of pickToken.
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "fp4lab/error.h"
#include "model/causal_lm.h"
#include "model/config.h"
#include "model/generate.h"

using namespace fp4lab::model;

namespace {

CausalLM randomModel(const std::string& name, uint64_t seed) {
  const ModelConfig config =
      loadModelConfig(std::string(FP4LAB_TEST_DATA_DIR) + "/" + name + ".json");
  CausalLM model(config, torch::TensorOptions(torch::kDouble));
  torch::NoGradGuard noGrad;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  for (auto& item : model->named_parameters()) {
    torch::Tensor& p = item.value();
    const torch::Tensor noise =
        at::randn(p.sizes(), generator, torch::TensorOptions(torch::kDouble));
    // Order-one activations, so greedy decoding does not collapse onto one token.
    if (item.key() == "model.embed_tokens.weight") {
      p.copy_(noise);
    } else if (p.dim() == 2) {
      p.copy_(noise / std::sqrt(static_cast<double>(p.size(1))));
    } else if (item.key().find("norm") != std::string::npos) {
      p.copy_(1 + 0.3 * noise);
    } else {
      p.copy_(0.5 * noise);  // biases
    }
  }
  return model;
}

// Decoding without a cache: the full sequence goes through forward() at every step.
std::vector<int64_t> recomputed(CausalLM& model, const std::vector<int64_t>& prompt, int steps,
                                double temperature, uint64_t seed,
                                const SamplingOptions& sampling = {}) {
  torch::NoGradGuard noGrad;
  std::vector<int64_t> sequence = prompt;
  torch::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  for (int i = 0; i < steps; ++i) {
    const torch::Tensor logits = model->forward(torch::tensor(sequence, torch::kLong).unsqueeze(0));
    sequence.push_back(pickToken(logits[0][-1], temperature, sampling, generator));
  }
  return std::vector<int64_t>(sequence.begin() + prompt.size(), sequence.end());
}

const std::vector<int64_t> kPrompt = {3, 14, 15, 9, 26, 5};

}  // namespace

TEST_CASE("cached greedy decoding equals recomputing the sequence", "[model][generate]") {
  for (const char* name : {"llama_gqa", "qwen3_qknorm", "mixtral_moe", "mistral_window"}) {
    INFO(name);
    CausalLM model = randomModel(name, 1);
    const std::vector<int64_t> cached = generate(model, kPrompt, 14, 0.0, 0, {});
    CHECK(cached.size() == 14);
    CHECK(cached == recomputed(model, kPrompt, 14, 0.0, 0));
    // Not a constant sequence, or the comparison would prove little.
    CHECK(std::set<int64_t>(cached.begin(), cached.end()).size() > 1);
  }
}

TEST_CASE("generation stops after a stop token", "[model][generate]") {
  CausalLM model = randomModel("llama_gqa", 2);
  const std::vector<int64_t> free = generate(model, kPrompt, 12, 0.0, 0, {});
  const int64_t stop = free[4];
  const auto first = std::find(free.begin(), free.end(), stop);
  const std::vector<int64_t> expected(free.begin(), first + 1);
  CHECK(generate(model, kPrompt, 12, 0.0, 0, {999, stop}) == expected);
  CHECK(generate(model, kPrompt, 0, 0.0, 0, {}).empty());
  CHECK(generate(model, kPrompt, 1, 0.0, 0, {}) == std::vector<int64_t>{free[0]});
}

TEST_CASE("batched greedy decoding equals decoding each prompt alone", "[model][generate]") {
  // fp64 models: a batched product rounds like a batch of one, so the tokens must agree exactly.
  for (const char* name : {"llama_gqa", "qwen3_qknorm", "mixtral_moe", "mistral_window"}) {
    INFO(name);
    CausalLM model = randomModel(name, 4);
    const std::vector<std::vector<int64_t>> prompts = {
        kPrompt, {7, 7, 1, 2, 30, 11}, {0, 5, 9, 13, 2, 8}, {21, 3, 3, 3, 17, 4}};
    // A stop token that one row meets early: that row stops, the others go on.
    const std::vector<int64_t> alone0 = generate(model, prompts[0], 16, 0.0, 0, {});
    const std::vector<int64_t> stops = {alone0[2]};
    const auto batched = generateGreedyBatch(model, prompts, 16, stops);
    REQUIRE(batched.size() == prompts.size());
    size_t shorter = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      CHECK(batched[i] == generate(model, prompts[i], 16, 0.0, 0, stops));
      shorter += batched[i].size() < 16;
    }
    CHECK(shorter >= 1);
    CHECK(batched[0].size() <= 3);
  }
  CausalLM model = randomModel("llama_gqa", 5);
  CHECK_THROWS_AS(generateGreedyBatch(model, {kPrompt, {1, 2}}, 4, {}), fp4lab::Error);
  CHECK_THROWS_AS(generateGreedyBatch(model, {}, 4, {}), fp4lab::Error);
  CHECK(generateGreedyBatch(model, {kPrompt}, 0, {}) == std::vector<std::vector<int64_t>>{{}});
}

TEST_CASE("sampling is reproducible per seed", "[model][generate]") {
  CausalLM model = randomModel("qwen2_bias_tied", 3);
  const std::vector<int64_t> a = generate(model, kPrompt, 20, 1.5, 7, {});
  CHECK(a == generate(model, kPrompt, 20, 1.5, 7, {}));
  CHECK(a != generate(model, kPrompt, 20, 1.5, 8, {}));
  CHECK(a != generate(model, kPrompt, 20, 0.0, 7, {}));
  // The cached sampler draws what the uncached one draws from the same generator.
  CHECK(a == recomputed(model, kPrompt, 20, 1.5, 7));

  SamplingOptions filtered;
  filtered.topK = 5;
  filtered.topP = 0.9;
  const std::vector<int64_t> b = generate(model, kPrompt, 20, 1.5, 7, {}, filtered);
  CHECK(b == recomputed(model, kPrompt, 20, 1.5, 7, filtered));

  SamplingOptions topOne;
  topOne.topK = 1;
  CHECK(generate(model, kPrompt, 20, 1.5, 11, {}, topOne) ==
        generate(model, kPrompt, 20, 0.0, 0, {}));
}

TEST_CASE("pickToken's filters", "[model][generate]") {
  // Probabilities 0.5, 0.3, 0.15, 0.05 at ids 2, 0, 3, 1.
  const torch::Tensor logits = torch::log(torch::tensor({0.3, 0.05, 0.5, 0.15}, torch::kDouble));
  torch::Generator generator = at::make_generator<at::CPUGeneratorImpl>(1);
  auto histogram = [&](const SamplingOptions& options, double temperature = 1.0) {
    std::map<int64_t, int> counts;
    for (int i = 0; i < 4000; ++i) ++counts[pickToken(logits, temperature, options, generator)];
    return counts;
  };
  CHECK(pickToken(logits, 0.0, {}, generator) == 2);

  auto all = histogram({});
  CHECK(all.size() == 4);
  CHECK(all[2] / 4000.0 == Approx(0.5).margin(0.03));
  CHECK(all[0] / 4000.0 == Approx(0.3).margin(0.03));

  SamplingOptions topK;
  topK.topK = 2;
  auto kept = histogram(topK);
  CHECK(kept.size() == 2);
  CHECK(kept[2] / 4000.0 == Approx(0.5 / 0.8).margin(0.03));

  SamplingOptions topP;
  topP.topP = 0.7;  // 0.5 is short of 0.7, 0.5 + 0.3 reaches it: ids 2 and 0
  kept = histogram(topP);
  CHECK(kept.size() == 2);
  CHECK(kept.count(2) == 1);
  CHECK(kept.count(0) == 1);
  topP.topP = 0.5;  // the top token alone reaches it
  CHECK(histogram(topP).size() == 1);

  // A low temperature sharpens towards the argmax.
  CHECK(histogram({}, 0.05)[2] > 3950);
}

TEST_CASE("bad generation arguments throw fp4lab::Error", "[model][generate][errors]") {
  CausalLM model = randomModel("llama_gqa", 4);
  CHECK_THROWS_AS(generate(model, {}, 5, 0.0, 0, {}), fp4lab::Error);
  CHECK_THROWS_AS(generate(model, kPrompt, 5, -1.0, 0, {}), fp4lab::Error);
  CHECK_THROWS_AS(generate(model, kPrompt, 5, std::nan(""), 0, {}), fp4lab::Error);
  CHECK_THROWS_AS(generate(model, {1000}, 5, 0.0, 0, {}), fp4lab::Error);
  SamplingOptions badP;
  badP.topP = 0.0;
  CHECK_THROWS_AS(generate(model, kPrompt, 5, 1.0, 0, {}, badP), fp4lab::Error);
}
