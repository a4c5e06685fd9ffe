// Decoder building blocks. The arithmetic mirrors Hugging Face transformers' Llama/Qwen/Mixtral
// modeling code, including where it computes in fp32, so BF16 logits match HF's closely.
#include "model/layers.h"

#include <ATen/autocast_mode.h>

#include <cmath>

#include "fp4lab/error.h"
#include "model/causal_lm.h"
#include "model/fused_ops.h"

namespace fp4lab::model {

torch::ScalarType accumulationType(torch::ScalarType type) {
  return (type == torch::kBFloat16 || type == torch::kHalf) ? torch::kFloat : type;
}

// ----- Embedding ---------------------------------------------------------------------------

EmbeddingImpl::EmbeddingImpl(int64_t count, int64_t dim, const torch::TensorOptions& options) {
  weight = register_parameter("weight", torch::empty({count, dim}, options));
}

torch::Tensor EmbeddingImpl::forward(const torch::Tensor& ids) {
  return torch::embedding(weight, ids);
}

// ----- RMSNorm -----------------------------------------------------------------------------

RMSNormImpl::RMSNormImpl(int64_t dim, double eps_, const torch::TensorOptions& options)
    : eps(eps_) {
  weight = register_parameter("weight", torch::ones({dim}, options));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  return rmsNorm(x, weight, eps);
}

// ----- Rotary embedding --------------------------------------------------------------------

RotaryEmbedding::RotaryEmbedding(const ModelConfig& config)
    : m_scaling(config.ropeScaling), m_theta(config.ropeTheta), m_headDim(config.headDim) {}

torch::Tensor RotaryEmbedding::inverseFrequencies(torch::ScalarType type) const {
  const torch::ScalarType wide = type == torch::kDouble ? torch::kDouble : torch::kFloat;
  // HF: 1 / base ** (arange(0, dim, 2) / dim), in fp32.
  const torch::Tensor exponents =
      torch::arange(0, m_headDim, 2, torch::kLong).to(wide) / static_cast<double>(m_headDim);
  torch::Tensor invFreq = 1.0 / torch::pow(m_theta, exponents);
  switch (m_scaling.type) {
    case RopeScaling::Type::None:
      break;
    case RopeScaling::Type::Linear:
      invFreq = invFreq / m_scaling.factor;
      break;
    case RopeScaling::Type::Llama3: {
      // HF _compute_llama3_parameters: long wavelengths are divided by `factor`, short ones
      // kept, and the band between is interpolated smoothly.
      const double oldContext = static_cast<double>(m_scaling.originalMaxPositionEmbeddings);
      const double lowFreqWavelen = oldContext / m_scaling.lowFreqFactor;
      const double highFreqWavelen = oldContext / m_scaling.highFreqFactor;
      const torch::Tensor wavelen = 2 * M_PI / invFreq;
      torch::Tensor scaled =
          torch::where(wavelen > lowFreqWavelen, invFreq / m_scaling.factor, invFreq);
      const torch::Tensor smooth = (oldContext / wavelen - m_scaling.lowFreqFactor) /
                                   (m_scaling.highFreqFactor - m_scaling.lowFreqFactor);
      const torch::Tensor smoothed = (1 - smooth) * scaled / m_scaling.factor + smooth * scaled;
      const torch::Tensor medium = torch::logical_not(wavelen < highFreqWavelen) &
                                   torch::logical_not(wavelen > lowFreqWavelen);
      invFreq = torch::where(medium, smoothed, scaled);
      break;
    }
  }
  return invFreq;
}

std::pair<torch::Tensor, torch::Tensor> RotaryEmbedding::cosSin(int64_t start, int64_t length,
                                                                torch::ScalarType type,
                                                                torch::Device device) {
  const int64_t needed = start + length;
  const bool stale = !m_cos.defined() || m_cos.scalar_type() != type || m_cos.device() != device;
  if (stale || m_cos.size(0) < needed) {
    int64_t size = std::max<int64_t>(64, stale ? 0 : m_cos.size(0));
    while (size < needed) size *= 2;
    // HF computes the angles in fp32 (positions as floats times inv_freq) and casts cos/sin to
    // the activations' dtype; fp64 models keep fp64 throughout.
    const torch::Tensor invFreq = inverseFrequencies(type);
    const torch::Tensor positions = torch::arange(size, invFreq.options());
    const torch::Tensor freqs = torch::outer(positions, invFreq);
    const torch::Tensor angles = torch::cat({freqs, freqs}, -1);
    m_cos = angles.cos().to(device, type).contiguous();
    m_sin = angles.sin().to(device, type).contiguous();
  }
  return {m_cos.narrow(0, start, length), m_sin.narrow(0, start, length)};
}

// ----- Attention ---------------------------------------------------------------------------

AttentionImpl::AttentionImpl(const ModelConfig& config, int64_t layerIndex,
                             const torch::TensorOptions& options, bool initialize)
    : m_layerIndex(layerIndex),
      m_numHeads(config.numAttentionHeads),
      m_numKeyValueHeads(config.numKeyValueHeads),
      m_headDim(config.headDim) {
  const int64_t hidden = config.hiddenSize;
  const bool qkvBias = config.qkvBias();
  qProj = register_module(
      "q_proj", QuantLinear(hidden, m_numHeads * m_headDim, qkvBias, options, initialize));
  kProj = register_module(
      "k_proj", QuantLinear(hidden, m_numKeyValueHeads * m_headDim, qkvBias, options, initialize));
  vProj = register_module(
      "v_proj", QuantLinear(hidden, m_numKeyValueHeads * m_headDim, qkvBias, options, initialize));
  oProj = register_module("o_proj", QuantLinear(m_numHeads * m_headDim, hidden, config.oProjBias(),
                                                options, initialize));
  if (config.qkNorm()) {
    qNorm = register_module("q_norm", RMSNorm(m_headDim, config.rmsNormEps, options));
    kNorm = register_module("k_norm", RMSNorm(m_headDim, config.rmsNormEps, options));
  }
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const AttentionContext& context) {
  const int64_t batch = x.size(0), length = x.size(1);
  // Projections come out [B, T, heads * D]; viewing them per head is free, and SDPA takes the
  // transposed [B, heads, T, D] views without a copy.
  torch::Tensor q = qProj(x).view({batch, length, m_numHeads, m_headDim});
  torch::Tensor k = kProj(x).view({batch, length, m_numKeyValueHeads, m_headDim});
  torch::Tensor v = vProj(x).view({batch, length, m_numKeyValueHeads, m_headDim}).transpose(1, 2);
  if (qNorm) {
    // Qwen3 normalizes each head before RoPE.
    q = qNorm(q);
    k = kNorm(k);
  }
  // RoPE's result goes straight into attention, which under autocast casts an fp32 result to the
  // autocast type: produce that type directly (the same values, without an fp32 intermediate).
  const c10::DeviceType device = q.device().type();
  const torch::ScalarType promoted =
      torch::promote_types(q.scalar_type(), context.cos.scalar_type());
  const torch::ScalarType ropeType =
      at::autocast::is_autocast_enabled(device) && promoted == torch::kFloat
          ? at::autocast::get_autocast_dtype(device)
          : promoted;
  q = rotary(q, context.cos, context.sin, ropeType).transpose(1, 2);
  k = rotary(k, context.cos, context.sin, ropeType).transpose(1, 2);
  if (context.cache) std::tie(k, v) = context.cache->append(m_layerIndex, k, v);
  // Grouped-query attention shares each key/value head across its query group without
  // materializing repeated copies.
  const torch::Tensor attended = attention(q, k, v, context.mask, context.causal);
  return oProj(attended.transpose(1, 2).reshape({batch, length, m_numHeads * m_headDim}));
}

// ----- MLP ---------------------------------------------------------------------------------

MlpImpl::MlpImpl(int64_t hidden, int64_t intermediate, bool bias,
                 const torch::TensorOptions& options, bool initialize, bool mixtralNames) {
  gateProj = register_module(mixtralNames ? "w1" : "gate_proj",
                             QuantLinear(hidden, intermediate, bias, options, initialize));
  // Registration order is the order of named_parameters(), so keep HF's: w1, w2, w3 for
  // Mixtral experts, gate, up, down for the others.
  if (mixtralNames) {
    downProj = register_module("w2", QuantLinear(intermediate, hidden, bias, options, initialize));
    upProj = register_module("w3", QuantLinear(hidden, intermediate, bias, options, initialize));
  } else {
    upProj =
        register_module("up_proj", QuantLinear(hidden, intermediate, bias, options, initialize));
    downProj =
        register_module("down_proj", QuantLinear(intermediate, hidden, bias, options, initialize));
  }
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  return downProj(swiglu(gateProj(x), upProj(x)));
}

// ----- Sparse MoE --------------------------------------------------------------------------

SparseMoeImpl::SparseMoeImpl(const ModelConfig& config, const torch::TensorOptions& options,
                             bool initialize)
    : m_topK(config.numExpertsPerTok) {
  gate = register_module(
      "gate", QuantLinear(config.hiddenSize, config.numLocalExperts, false, options, initialize));
  experts = register_module("experts", torch::nn::ModuleList());
  for (int64_t e = 0; e < config.numLocalExperts; ++e) {
    Mlp expert(config.hiddenSize, config.intermediateSize, false, options, initialize,
               /*mixtralNames=*/true);
    experts->push_back(expert);
    expertList.push_back(expert);
  }
}

torch::Tensor SparseMoeImpl::forward(const torch::Tensor& x) {
  const auto shape = x.sizes().vec();
  const torch::Tensor tokens = x.reshape({-1, shape.back()});
  const int64_t numExperts = static_cast<int64_t>(expertList.size());

  const torch::Tensor routerLogits = gate(tokens);  // [N, E]
  const torch::Tensor probabilities =
      torch::softmax(routerLogits, -1, accumulationType(routerLogits.scalar_type()));
  auto [topWeights, topExperts] = probabilities.topk(m_topK, -1);  // [N, k]
  topWeights = (topWeights / topWeights.sum(-1, /*keepdim=*/true)).to(x.scalar_type());

  // Group the (token, slot) pairs by expert with one sort, so each expert runs one batched
  // matmul over its tokens and only the per-expert counts cross to the host (one sync).
  const torch::Tensor flatExperts = topExperts.reshape({-1});
  const torch::Tensor order = torch::argsort(flatExperts, /*stable=*/true);
  const torch::Tensor tokenOfSlot = torch::floor_divide(order, m_topK);
  const torch::Tensor weightOfSlot = topWeights.reshape({-1}).index_select(0, order);
  const torch::Tensor counts = torch::bincount(flatExperts, {}, numExperts).cpu();
  const int64_t* countData = counts.data_ptr<int64_t>();

  torch::Tensor output = torch::zeros_like(tokens);
  int64_t offset = 0;
  for (int64_t e = 0; e < numExperts; ++e) {
    const int64_t count = countData[e];
    if (count == 0) continue;
    const torch::Tensor rows = tokenOfSlot.narrow(0, offset, count);
    const torch::Tensor expertOut = expertList[e](tokens.index_select(0, rows)) *
                                    weightOfSlot.narrow(0, offset, count).unsqueeze(1);
    output.index_add_(0, rows, expertOut);
    offset += count;
  }
  return output.view(shape);
}

// ----- Decoder layer -----------------------------------------------------------------------

DecoderLayerImpl::DecoderLayerImpl(const ModelConfig& config, int64_t layerIndex,
                                   const torch::TensorOptions& options, bool initialize) {
  inputLayernorm =
      register_module("input_layernorm", RMSNorm(config.hiddenSize, config.rmsNormEps, options));
  selfAttn = register_module("self_attn", Attention(config, layerIndex, options, initialize));
  if (config.isMoe()) {
    moe = register_module("block_sparse_moe", SparseMoe(config, options, initialize));
  } else {
    mlp = register_module("mlp", Mlp(config.hiddenSize, config.intermediateSize, config.mlpBias,
                                     options, initialize));
  }
  postAttentionLayernorm = register_module("post_attention_layernorm",
                                           RMSNorm(config.hiddenSize, config.rmsNormEps, options));
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& x, const AttentionContext& context) {
  const torch::Tensor h = x + selfAttn(inputLayernorm(x), context);
  const torch::Tensor normed = postAttentionLayernorm(h);
  return h + (moe ? moe(normed) : mlp(normed));
}

}  // namespace fp4lab::model
