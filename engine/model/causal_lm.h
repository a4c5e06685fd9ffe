// CausalLM: the decoder-only language model (HF *ForCausalLM) and its key/value cache for
// generation. named_parameters() keys equal the Hugging Face checkpoint's tensor names.
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "model/config.h"
#include "model/gemm_choice.h"
#include "model/layers.h"
#include "model/quant_linear.h"

namespace fp4lab::model {

// Keys and values of every layer for the positions seen so far, in preallocated buffers
// [B, kvHeads, capacity, headDim] that double when full, so appending a token copies one
// token's worth, not the whole history. All rows of the batch share one length (no padding).
// Meant for inference: fill it under torch::NoGradGuard.
class KVCache {
 public:
  // `capacityHint` positions are allocated on first use (more if the first append needs it).
  explicit KVCache(int64_t capacityHint = 0) : m_capacityHint(capacityHint) {}

  int64_t length() const { return m_layers.empty() ? 0 : m_layers.front().length; }
  void clear() { m_layers.clear(); }
  // Appends k, v [B, kvHeads, t, headDim] to `layer` and returns views of everything cached for
  // it, [B, kvHeads, length + t, headDim].
  std::pair<torch::Tensor, torch::Tensor> append(size_t layer, const torch::Tensor& keys,
                                                 const torch::Tensor& values);

 private:
  struct Layer {
    torch::Tensor keys, values;
    int64_t length = 0;
  };
  std::vector<Layer> m_layers;
  int64_t m_capacityHint;
};

// HF's *Model: embed_tokens, layers, norm (registered as "model" inside CausalLM).
class DecoderModelImpl : public torch::nn::Module {
 public:
  DecoderModelImpl(const ModelConfig& config, const torch::TensorOptions& options, bool initialize);
  // ids [B, T] -> final-normed hidden states [B, T, hidden]. With a cache, positions continue
  // from cache->length() and the new keys/values are appended to it.
  torch::Tensor forward(const torch::Tensor& inputIds, KVCache* cache = nullptr);

  Embedding embedTokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  std::vector<DecoderLayer> layerList;  // the same modules, typed
  RMSNorm norm{nullptr};

 private:
  ModelConfig m_config;
  RotaryEmbedding m_rotary;
};
TORCH_MODULE(DecoderModel);

class CausalLMImpl : public torch::nn::Module {
 public:
  // Parameters are allocated with `options` (dtype, device). With `initialize` they get HF's
  // init (normal(0, initializer_range) for linears and embeddings, zero biases, unit norms);
  // without it they stay uninitialized for loadPretrained to fill.
  explicit CausalLMImpl(const ModelConfig& config, const torch::TensorOptions& options = {},
                        bool initialize = true);

  // ids [B, T] int64 -> logits [B, T, vocab] in the model's dtype.
  torch::Tensor forward(const torch::Tensor& inputIds);
  // The same for generation: positions continue from cache.length(), and the cache grows by T.
  torch::Tensor forwardCached(const torch::Tensor& inputIds, KVCache& cache);
  // Final-normed hidden states [B, T, hidden] (for losses that chunk the lm_head product).
  torch::Tensor hiddenStates(const torch::Tensor& inputIds, KVCache* cache = nullptr);
  // hidden [..., hidden] -> logits [..., vocab].
  torch::Tensor logits(const torch::Tensor& hidden);

  const ModelConfig& config() const { return m_config; }
  ModelConfig& mutableConfig() { return m_config; }  // ids, dtype name, extra fields
  // Every linear layer with its HF name ("model.layers.0.self_attn.q_proj", ...,
  // "model.layers.0.block_sparse_moe.gate", "lm_head"), in registration order. With tied
  // embeddings "lm_head" is included (its weight is model.embed_tokens.weight).
  std::vector<std::pair<std::string, QuantLinear>> quantLinears();
  // The products of those layers for `rows` tokens (an expert's for its share of them, rows x
  // experts per token / experts), for choosing the BF16 GEMM (gemm_choice.h).
  std::vector<GemmShape> gemmShapes(int64_t rows);
  torch::ScalarType dtype() const;
  torch::Device device() const;

  DecoderModel model{nullptr};
  // Registered as "lm_head" unless embeddings are tied; then it shares embed_tokens' weight
  // and is deliberately not registered, so that weight is listed (and optimized) once.
  QuantLinear lmHead{nullptr};

 private:
  void checkInput(const torch::Tensor& inputIds) const;
  void initializeWeights();

  ModelConfig m_config;
};
TORCH_MODULE(CausalLM);

// A new model with the same config and copies of every parameter, in `options`' dtype and
// device (e.g. the frozen BF16 teacher for distillation). Quantizers are not copied.
CausalLM copyCausalLM(CausalLM& source, const torch::TensorOptions& options);

// For a frozen model (teacher, reference) that runs under BF16 autocast: every weight of a
// matrix product (every parameter of two or more dimensions except the embeddings) is stored in
// BF16, the rest stays as it is (fp32). Autocast rounds those weights to BF16 anyway, so the model
// computes exactly what the fp32 model computes (a student with the same weights: the same
// residual stream, norms and products) in about half the memory. Without autocast the products
// would mix dtypes: only for BF16 compute.
void holdMatrixWeightsInBf16(CausalLM& model);

}  // namespace fp4lab::model
