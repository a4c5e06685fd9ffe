// Token generation with a CausalLM: greedy or seeded sampling (temperature, top-k, top-p),
// using the KV cache so each new token costs one single-position forward.
#pragma once

#include <cstdint>
#include <vector>

#include "model/causal_lm.h"

namespace fp4lab::model {

struct SamplingOptions {
  int64_t topK = 0;   // keep the k most likely tokens; 0 = all
  double topP = 1.0;  // keep the smallest set whose probability reaches topP; 1 = all
};

// Generates up to `maxNewTokens` tokens after `prompt` (batch of one) and returns them without
// the prompt. Stops after the first token in `stopTokens`, which is included as the last
// element (as transformers does), so callers can tell a stop from running out of budget.
// temperature == 0: greedy (argmax; ties go to the lowest id). temperature > 0: samples from
// softmax(logits / temperature) restricted by topK/topP, drawing from a CPU torch::Generator
// seeded with `seed`, so a seed reproduces the same tokens on any device. Runs under
// torch::NoGradGuard. Throws fp4lab::Error on an empty prompt, out-of-vocabulary ids or
// negative/NaN temperature.
std::vector<int64_t> generate(CausalLM& model, const std::vector<int64_t>& prompt, int maxNewTokens,
                              double temperature, uint64_t seed,
                              const std::vector<int64_t>& stopTokens,
                              const SamplingOptions& sampling = {});

// Greedy generation for several prompts of one length, as one batch: one forward per new token
// for all of them instead of one per prompt and token. Each row stops as generate() does (its
// stop token included); the batch runs until every row has stopped or `maxNewTokens`. A batched
// matrix product may round differently from a batch of one, so near-ties can pick differently
// than generate(); the result is deterministic for a given batch. Throws fp4lab::Error on no
// prompts, an empty prompt or prompts of different lengths.
std::vector<std::vector<int64_t>> generateGreedyBatch(
    CausalLM& model, const std::vector<std::vector<int64_t>>& prompts, int maxNewTokens,
    const std::vector<int64_t>& stopTokens);

// Picks the next token from one position's logits [vocab] (any dtype/device), as generate does;
// exposed for tests and for batched callers. `generator` is used only when temperature > 0.
int64_t pickToken(const torch::Tensor& logits, double temperature, const SamplingOptions& sampling,
                  torch::Generator& generator);

}  // namespace fp4lab::model
