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

std::vector<std::vector<int64_t>> generateGreedyBatch(
    CausalLM& model, const std::vector<std::vector<int64_t>>& prompts, int maxNewTokens,
    const std::vector<int64_t>& stopTokens) {
  const std::string where = "generateGreedyBatch";
  if (prompts.empty()) throw Error("no prompts", where);
  const size_t length = prompts.front().size();
  if (length == 0) throw Error("empty prompt", where, "generation needs at least one token");
  for (const auto& p : prompts)
    if (p.size() != length)
      throw Error("prompts of different lengths (" + std::to_string(p.size()) + " and " +
                      std::to_string(length) + ")",
                  where, "group prompts by length");
  const int64_t batch = static_cast<int64_t>(prompts.size());
  std::vector<std::vector<int64_t>> generated(prompts.size());
  if (maxNewTokens <= 0) return generated;

  torch::NoGradGuard noGrad;
  const torch::Device device = model->device();
  KVCache cache(static_cast<int64_t>(length) + maxNewTokens);
  std::vector<int64_t> flat;
  flat.reserve(prompts.size() * length);
  for (const auto& p : prompts) flat.insert(flat.end(), p.begin(), p.end());
  const torch::Tensor promptIds =
      torch::tensor(flat, torch::kLong).view({batch, static_cast<int64_t>(length)}).to(device);
  // Greedy as pickToken: argmax of the logits widened to fp64 (exact), ties to the lowest id.
  torch::Tensor last = model->forwardCached(promptIds, cache).select(1, -1);
  std::vector<bool> done(prompts.size(), false);
  size_t running = prompts.size();
  for (int step = 0; step < maxNewTokens && running > 0; ++step) {
    const torch::Tensor picked = last.to(torch::kCPU, torch::kDouble).argmax(-1).contiguous();
    const int64_t* tokens = picked.data_ptr<int64_t>();
    for (size_t b = 0; b < prompts.size(); ++b) {
      if (done[b]) continue;
      generated[b].push_back(tokens[b]);
      const bool stop =
          std::find(stopTokens.begin(), stopTokens.end(), tokens[b]) != stopTokens.end();
      if (stop || static_cast<int>(generated[b].size()) >= maxNewTokens) {
        done[b] = true;
        --running;
      }
    }
    if (running == 0) break;
    // Rows that have stopped keep decoding their last token; their outputs are ignored.
    last = model->forwardCached(picked.view({batch, 1}).to(device), cache).select(1, -1);
  }
  return generated;
}

}  // namespace fp4lab::model
