// generate(): prefill the prompt into a KV cache, then one cached single-token forward per new
// token, picking each greedily or by seeded sampling on the host.
#include "model/generate.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "fp4lab/error.h"

namespace fp4lab::model {

int64_t pickToken(const torch::Tensor& logits, double temperature, const SamplingOptions& sampling,
                  torch::Generator& generator) {
  // fp64 on the host: a vocabulary-sized vector is cheap, and wide scores keep near-ties of a
  // BF16/fp32 model apart from rounding so greedy picks do not depend on the conversion.
  torch::Tensor scores = logits.detach().reshape({-1}).to(torch::kCPU, torch::kDouble);
  if (temperature == 0) return scores.argmax().item<int64_t>();

  scores = scores / temperature;
  const int64_t vocab = scores.size(0);
  const double negativeInfinity = -std::numeric_limits<double>::infinity();
  if (sampling.topK > 0 && sampling.topK < vocab) {
    const double kth = std::get<0>(scores.topk(sampling.topK)).min().item<double>();
    scores.masked_fill_(scores < kth, negativeInfinity);
  }
  if (sampling.topP < 1.0) {
    // Keep the most likely tokens until their mass reaches topP (the token that crosses the
    // threshold is kept, so at least one always is).
    const auto [sorted, order] = scores.sort(/*dim=*/0, /*descending=*/true);
    const torch::Tensor probabilities = torch::softmax(sorted, 0);
    const torch::Tensor massBefore = probabilities.cumsum(0) - probabilities;
    scores.index_fill_(0, order.masked_select(massBefore >= sampling.topP), negativeInfinity);
  }
  const torch::Tensor probabilities = torch::softmax(scores, 0);
  return torch::multinomial(probabilities, 1, /*replacement=*/false, generator).item<int64_t>();
}

std::vector<int64_t> generate(CausalLM& model, const std::vector<int64_t>& prompt, int maxNewTokens,
                              double temperature, uint64_t seed,
                              const std::vector<int64_t>& stopTokens,
                              const SamplingOptions& sampling) {
  const std::string where = "generate";
  if (prompt.empty()) throw Error("empty prompt", where, "generation needs at least one token");
  if (!(temperature >= 0) || std::isinf(temperature)) {
    throw Error("temperature must be finite and >= 0, got " + std::to_string(temperature), where);
  }
  if (sampling.topK < 0) throw Error("topK must be >= 0", where);
  if (!(sampling.topP > 0 && sampling.topP <= 1)) throw Error("topP must be in (0, 1]", where);
  std::vector<int64_t> generated;
  if (maxNewTokens <= 0) return generated;

  torch::NoGradGuard noGrad;
  const torch::Device device = model->device();
  KVCache cache(static_cast<int64_t>(prompt.size()) + maxNewTokens);
  torch::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);

  const torch::Tensor promptIds = torch::tensor(prompt, torch::kLong).unsqueeze(0).to(device);
  torch::Tensor last = model->forwardCached(promptIds, cache).select(0, 0).select(0, -1);
  while (true) {
    const int64_t token = pickToken(last, temperature, sampling, generator);
    generated.push_back(token);
    const bool stop = std::find(stopTokens.begin(), stopTokens.end(), token) != stopTokens.end();
    if (stop || static_cast<int>(generated.size()) >= maxNewTokens) break;
    const torch::Tensor next =
        torch::full({1, 1}, token, torch::TensorOptions(torch::kLong).device(device));
    last = model->forwardCached(next, cache).select(0, 0).select(0, -1);
  }
  return generated;
}

}  // namespace fp4lab::model
