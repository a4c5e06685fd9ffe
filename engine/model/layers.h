// The building blocks of the decoder: embedding, RMSNorm, rotary embedding, grouped-query
// attention (with gpt-oss's sinks), SwiGLU MLP, Mixtral's sparse MoE block, gpt-oss's experts and
// the decoder layer, with Hugging Face's
// parameter names (register_module/register_parameter names are the checkpoint's).
#pragma once

#include <torch/torch.h>

#include <optional>
#include <utility>
#include <vector>

#include "model/config.h"
#include "model/quant_linear.h"

namespace fp4lab::model {

class KVCache;

// The compute type of the numerically sensitive reductions (RMSNorm, router softmax): fp32 for
// 16-bit inputs, as Hugging Face does, and the input's own type when it is wider (fp64 tests).
torch::ScalarType accumulationType(torch::ScalarType type);

class EmbeddingImpl : public torch::nn::Module {
 public:
  EmbeddingImpl(int64_t count, int64_t dim, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& ids);
  torch::Tensor weight;  // [count, dim]
};
TORCH_MODULE(Embedding);

// HF LlamaRMSNorm: x * rsqrt(mean(x^2) + eps) in accumulationType, cast back to x's dtype, then
// times weight (the cast before the multiply matters for BF16 parity). gpt-oss (`weightFirst`)
// multiplies by the weight in accumulationType and casts the product, as GptOssRMSNorm does.
class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps, const torch::TensorOptions& options,
              bool weightFirst = false);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;  // [dim], initialized to ones
  double eps;
  bool weightFirst;
};
TORCH_MODULE(RMSNorm);

// Rotary position embedding (HF's rotate_half convention: the head's two halves are the pairs),
// with the static inv_freq adjustments of rope_scaling "linear", "llama3" and "yarn" (whose
// attention factor scales cos and sin). Not a module: the
// cos/sin table is a cache, not state, and must not show up in named_buffers() or checkpoints.
class RotaryEmbedding {
 public:
  explicit RotaryEmbedding(const ModelConfig& config);
  // inv_freq [headDim / 2] computed as HF does: in fp32 (fp64 when `type` is kDouble).
  torch::Tensor inverseFrequencies(torch::ScalarType type) const;
  // cos and sin [length, headDim] for positions start .. start + length - 1, in `type` on
  // `device`, from a table that grows on demand (recomputed if dtype or device change).
  std::pair<torch::Tensor, torch::Tensor> cosSin(int64_t start, int64_t length,
                                                 torch::ScalarType type, torch::Device device);

 private:
  RopeScaling m_scaling;
  double m_theta;
  int64_t m_headDim;
  torch::Tensor m_cos, m_sin;
};

// What every layer's attention needs for one forward call, computed once by the model.
struct AttentionContext {
  torch::Tensor cos, sin;             // [T, headDim]
  std::optional<torch::Tensor> mask;  // bool [T, S], true = may attend; empty when `causal` does it
  bool causal = true;                 // SDPA's is_causal (only valid without a cache prefix)
  KVCache* cache = nullptr;           // null: no caching
};

class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(const ModelConfig& config, int64_t layerIndex, const torch::TensorOptions& options,
                bool initialize);
  torch::Tensor forward(const torch::Tensor& x, const AttentionContext& context);

  QuantLinear qProj{nullptr}, kProj{nullptr}, vProj{nullptr}, oProj{nullptr};
  RMSNorm qNorm{nullptr}, kNorm{nullptr};  // Qwen3 only (null otherwise)
  // gpt-oss: one learned logit per head that joins every softmax and takes its share of the
  // probability without contributing a value ("attention sinks"); undefined otherwise.
  torch::Tensor sinks;

 private:
  int64_t m_layerIndex, m_numHeads, m_numKeyValueHeads, m_headDim;
};
TORCH_MODULE(Attention);

// SwiGLU: down(silu(gate(x)) * up(x)). Names are Llama's (gate/up/down_proj) or, for Mixtral's
// experts, w1/w3/w2.
class MlpImpl : public torch::nn::Module {
 public:
  MlpImpl(int64_t hidden, int64_t intermediate, bool bias, const torch::TensorOptions& options,
          bool initialize, bool mixtralNames = false);
  torch::Tensor forward(const torch::Tensor& x);
  QuantLinear gateProj{nullptr}, upProj{nullptr}, downProj{nullptr};
};
TORCH_MODULE(Mlp);

// Mixtral's block_sparse_moe. The router ("gate") scores all experts, the top k are chosen and
// weighted by a softmax over their k logits: HF computes softmax over all experts (in fp32),
// takes the top k and renormalizes them to sum to one, which is the same thing; this follows
// HF's order of operations. No load-balancing loss and no router jitter (training extras).
class SparseMoeImpl : public torch::nn::Module {
 public:
  SparseMoeImpl(const ModelConfig& config, const torch::TensorOptions& options, bool initialize);
  torch::Tensor forward(const torch::Tensor& x);  // [B, T, H] -> [B, T, H]

  QuantLinear gate{nullptr};  // router, [numExperts, hidden]
  torch::nn::ModuleList experts{nullptr};
  std::vector<Mlp> expertList;  // the same modules, typed

 private:
  int64_t m_topK;
};
TORCH_MODULE(SparseMoe);

// gpt-oss's experts: every expert's weights in one tensor each, in Hugging Face's layout
// (gate_up_proj [E, hidden, 2I] with gate and up interleaved column by column, down_proj
// [E, I, hidden], with biases), so that named_parameters() is the checkpoint's. Their quantizers
// sit on two QuantLinear handles that are not registered (the parameters are listed once, here)
// and see the weights as [E, out, in] views: one quantized layer per tensor, blocks along the
// input dimension, as the MXFP4 checkpoint stores them.
class GptOssExpertsImpl : public torch::nn::Module {
 public:
  GptOssExpertsImpl(const ModelConfig& config, const torch::TensorOptions& options);
  // tokens [N, hidden]; topExperts, topWeights [N, k] -> [N, hidden]
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& topExperts,
                        const torch::Tensor& topWeights);
  // The handles, their weights re-pointed at the current parameters.
  QuantLinear& gateUpLinear();
  QuantLinear& downLinear();

  torch::Tensor gateUpProj, gateUpProjBias, downProj, downProjBias;

 private:
  QuantLinear m_gateUp{nullptr}, m_down{nullptr};
  double m_limit, m_alpha;
};
TORCH_MODULE(GptOssExperts);

// gpt-oss's MLP: the top-k router (a linear with a bias; softmax over the k chosen logits) and
// the experts.
class GptOssMlpImpl : public torch::nn::Module {
 public:
  GptOssMlpImpl(const ModelConfig& config, const torch::TensorOptions& options, bool initialize);
  torch::Tensor forward(const torch::Tensor& x);  // [B, T, H] -> [B, T, H]

  QuantLinear router{nullptr};
  GptOssExperts experts{nullptr};

 private:
  int64_t m_topK;
};
TORCH_MODULE(GptOssMlp);

// The clamped SwiGLU of gpt-oss's experts: gate, up = the even and odd columns of gateUp;
// (clamp(up, -limit, limit) + 1) * g * sigmoid(alpha * g) with g = min(gate, limit).
torch::Tensor clampedSwiglu(const torch::Tensor& gateUp, double limit, double alpha);

class DecoderLayerImpl : public torch::nn::Module {
 public:
  DecoderLayerImpl(const ModelConfig& config, int64_t layerIndex,
                   const torch::TensorOptions& options, bool initialize);
  // Pre-norm residual block: h = x + attn(norm1(x)); out = h + mlp(norm2(h)).
  torch::Tensor forward(const torch::Tensor& x, const AttentionContext& context);

  RMSNorm inputLayernorm{nullptr}, postAttentionLayernorm{nullptr};
  Attention selfAttn{nullptr};
  Mlp mlp{nullptr};              // dense models
  SparseMoe moe{nullptr};        // Mixtral ("block_sparse_moe")
  GptOssMlp gptOssMlp{nullptr};  // gpt-oss ("mlp")
};
TORCH_MODULE(DecoderLayer);

}  // namespace fp4lab::model
