// Decoder building blocks. The arithmetic mirrors Hugging Face transformers' Llama/Qwen/Mixtral
// modeling code, including where it computes in fp32, so BF16 logits match HF's closely.
#include "model/layers.h"

#include <ATen/autocast_mode.h>

#include <cmath>
#include <functional>
#include <limits>

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

RMSNormImpl::RMSNormImpl(int64_t dim, double eps_, const torch::TensorOptions& options,
                         bool weightFirst_)
    : eps(eps_), weightFirst(weightFirst_) {
  weight = register_parameter("weight", torch::ones({dim}, options));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  if (!weightFirst) return rmsNorm(x, weight, eps);
  const torch::ScalarType wide = accumulationType(x.scalar_type());
  const torch::Tensor h = x.to(wide);
  const torch::Tensor normalized = h * torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return (weight.to(wide) * normalized).to(x.scalar_type());
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
    case RopeScaling::Type::Yarn: {
      // HF _compute_yarn_parameters: dimensions that rotate fewer than beta_slow times over the
      // original context are interpolated (divided by factor), those that rotate more than
      // beta_fast times are kept, with a linear ramp between.
      const double dim = static_cast<double>(m_headDim);
      const double old = static_cast<double>(m_scaling.originalMaxPositionEmbeddings);
      const auto correctionDim = [&](double rotations) {
        return dim * std::log(old / (rotations * 2 * M_PI)) / (2 * std::log(m_theta));
      };
      double low = correctionDim(m_scaling.betaFast), high = correctionDim(m_scaling.betaSlow);
      if (m_scaling.truncate) {
        low = std::floor(low);
        high = std::ceil(high);
      }
      low = std::max(low, 0.0);
      high = std::min(high, dim - 1);
      if (low == high) high += 0.001;  // HF: prevents a division by zero
      const torch::Tensor positionFrequencies = torch::pow(m_theta, exponents);
      const torch::Tensor extrapolation = 1.0 / positionFrequencies;
      const torch::Tensor interpolation = 1.0 / (m_scaling.factor * positionFrequencies);
      const torch::Tensor ramp =
          ((torch::arange(m_headDim / 2, torch::TensorOptions(wide)) - low) / (high - low))
              .clamp(0, 1);
      const torch::Tensor extrapolationFactor = 1 - ramp;
      invFreq = interpolation * (1 - extrapolationFactor) + extrapolation * extrapolationFactor;
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
    torch::Tensor cos = angles.cos(), sin = angles.sin();
    if (m_scaling.type == RopeScaling::Type::Yarn && m_scaling.attentionFactor != 1.0) {
      cos = cos * m_scaling.attentionFactor;  // HF: in fp32, before the cast
      sin = sin * m_scaling.attentionFactor;
    }
    m_cos = cos.to(device, type).contiguous();
    m_sin = sin.to(device, type).contiguous();
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
  if (config.isGptOss()) {
    sinks = register_parameter("sinks", torch::empty({m_numHeads}, options));
    if (initialize) {
      torch::NoGradGuard noGrad;
      sinks.normal_(0.0, config.initializerRange);
    }
  }
}

namespace {

// gpt-oss's attention, as HF's eager_attention_forward computes it: scores, the mask, one more
// column holding the head's sink logit, the row maximum subtracted, a softmax in the scores'
// type, the sink column dropped. q [B, H, T, D], k and v [B, KV, S, D]; `mask` bool [T, S]
// (true: may attend) or, when absent, causal with T == S (`causal`) or everything.
torch::Tensor sinkAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                            const torch::Tensor& sinks, const std::optional<torch::Tensor>& mask,
                            bool causal) {
  const int64_t batch = q.size(0), heads = q.size(1), length = q.size(2), dim = q.size(3);
  const int64_t kvHeads = k.size(1), keys = k.size(2), group = heads / kvHeads;
  const auto repeat = [&](const torch::Tensor& t) {
    return group == 1 ? t
                      : t.unsqueeze(2)
                            .expand({batch, kvHeads, group, keys, dim})
                            .reshape({batch, heads, keys, dim});
  };
  const torch::Tensor keysAll = repeat(k), valuesAll = repeat(v);
  torch::Tensor scores =
      torch::matmul(q, keysAll.transpose(2, 3)) * (1.0 / std::sqrt(static_cast<double>(dim)));
  if (mask && mask->defined()) {
    scores = scores.masked_fill(mask->logical_not(), -std::numeric_limits<double>::infinity());
  } else if (causal) {
    const torch::Tensor allowed =
        torch::ones({length, keys}, torch::TensorOptions(torch::kBool).device(q.device())).tril();
    scores = scores.masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity());
  }
  const torch::Tensor sinkColumn =
      sinks.to(scores.scalar_type()).view({1, heads, 1, 1}).expand({batch, heads, length, 1});
  torch::Tensor combined = torch::cat({scores, sinkColumn}, -1);
  combined = combined - std::get<0>(combined.max(-1, /*keepdim=*/true));
  const torch::Tensor probabilities =
      torch::softmax(combined, -1, combined.scalar_type()).narrow(-1, 0, keys);
  return torch::matmul(probabilities.to(valuesAll.scalar_type()), valuesAll);
}

}  // namespace

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
  const torch::Tensor attended = sinks.defined()
                                     ? sinkAttention(q, k, v, sinks, context.mask, context.causal)
                                     : attention(q, k, v, context.mask, context.causal);
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

namespace {

// The weighted sum over each token's chosen experts: tokens [N, H], topExperts and topWeights
// [N, k]; `expert(e, rows)` maps the rows routed to expert e to its outputs. The (token, slot)
// pairs are grouped by expert with one sort, so each expert runs one batched matmul over its
// tokens and only the per-expert counts cross to the host (one sync). Experts are added in
// ascending order, as Hugging Face's loops do.
torch::Tensor routeToExperts(
    const torch::Tensor& tokens, const torch::Tensor& topExperts, const torch::Tensor& topWeights,
    int64_t numExperts, const std::function<torch::Tensor(int64_t, const torch::Tensor&)>& expert) {
  const int64_t topK = topExperts.size(1);
  const torch::Tensor flatExperts = topExperts.reshape({-1});
  const torch::Tensor order = torch::argsort(flatExperts, /*stable=*/true);
  const torch::Tensor tokenOfSlot = torch::floor_divide(order, topK);
  const torch::Tensor weightOfSlot = topWeights.reshape({-1}).index_select(0, order);
  const torch::Tensor counts = torch::bincount(flatExperts, {}, numExperts).cpu();
  const int64_t* countData = counts.data_ptr<int64_t>();

  torch::Tensor output = torch::zeros_like(tokens);
  int64_t offset = 0;
  for (int64_t e = 0; e < numExperts; ++e) {
    const int64_t count = countData[e];
    if (count == 0) continue;
    const torch::Tensor rows = tokenOfSlot.narrow(0, offset, count);
    const torch::Tensor expertOut = expert(e, tokens.index_select(0, rows)) *
                                    weightOfSlot.narrow(0, offset, count).unsqueeze(1);
    output.index_add_(0, rows, expertOut.to(output.scalar_type()));
    offset += count;
  }
  return output;
}

}  // namespace

torch::Tensor SparseMoeImpl::forward(const torch::Tensor& x) {
  const auto shape = x.sizes().vec();
  const torch::Tensor tokens = x.reshape({-1, shape.back()});
  const torch::Tensor routerLogits = gate(tokens);  // [N, E]
  const torch::Tensor probabilities =
      torch::softmax(routerLogits, -1, accumulationType(routerLogits.scalar_type()));
  auto [topWeights, topExperts] = probabilities.topk(m_topK, -1);  // [N, k]
  topWeights = (topWeights / topWeights.sum(-1, /*keepdim=*/true)).to(x.scalar_type());
  return routeToExperts(tokens, topExperts, topWeights, static_cast<int64_t>(expertList.size()),
                        [&](int64_t e, const torch::Tensor& rows) { return expertList[e](rows); })
      .view(shape);
}

// ----- gpt-oss MLP -------------------------------------------------------------------------

torch::Tensor clampedSwiglu(const torch::Tensor& gateUp, double limit, double alpha) {
  using torch::indexing::Slice;
  const torch::Tensor gate =
      gateUp.index({"...", Slice(0, torch::indexing::None, 2)}).clamp(c10::nullopt, limit);
  const torch::Tensor up =
      gateUp.index({"...", Slice(1, torch::indexing::None, 2)}).clamp(-limit, limit);
  return (up + 1) * (gate * torch::sigmoid(gate * alpha));
}

GptOssExpertsImpl::GptOssExpertsImpl(const ModelConfig& config, const torch::TensorOptions& options)
    : m_limit(config.swigluLimit), m_alpha(config.swigluAlpha) {
  const int64_t experts = config.numLocalExperts, hidden = config.hiddenSize,
                inner = config.intermediateSize;
  gateUpProj =
      register_parameter("gate_up_proj", torch::empty({experts, hidden, 2 * inner}, options));
  gateUpProjBias =
      register_parameter("gate_up_proj_bias", torch::empty({experts, 2 * inner}, options));
  downProj = register_parameter("down_proj", torch::empty({experts, inner, hidden}, options));
  downProjBias = register_parameter("down_proj_bias", torch::empty({experts, hidden}, options));
  m_gateUp = QuantLinear(gateUpProj.transpose(1, 2));
  m_down = QuantLinear(downProj.transpose(1, 2));
}

QuantLinear& GptOssExpertsImpl::gateUpLinear() {
  m_gateUp->weight = gateUpProj.transpose(1, 2);  // [E, 2I, H]
  m_gateUp->bias = gateUpProjBias;
  return m_gateUp;
}

QuantLinear& GptOssExpertsImpl::downLinear() {
  m_down->weight = downProj.transpose(1, 2);  // [E, H, I]
  m_down->bias = downProjBias;
  return m_down;
}

torch::Tensor GptOssExpertsImpl::forward(const torch::Tensor& tokens,
                                         const torch::Tensor& topExperts,
                                         const torch::Tensor& topWeights) {
  QuantLinear& gateUp = gateUpLinear();
  QuantLinear& down = downLinear();
  // Each quantizer sees its whole tensor once per call (one tensor amax, as exported); the input
  // quantizer of gate_up sees every token, that of down each expert's activations.
  const torch::Tensor gateUpWeight = gateUp->effectiveWeight();
  const torch::Tensor downWeight = down->effectiveWeight();
  const torch::Tensor input =
      gateUp->inputQuantizer ? gateUp->inputQuantizer->apply(tokens) : tokens;
  return routeToExperts(
      input, topExperts, topWeights, gateUpProj.size(0), [&](int64_t e, const torch::Tensor& rows) {
        torch::Tensor h =
            clampedSwiglu(linear(rows, gateUpWeight[e], gateUpProjBias[e]), m_limit, m_alpha);
        if (down->inputQuantizer) h = down->inputQuantizer->apply(h);
        return linear(h, downWeight[e], downProjBias[e]);
      });
}

GptOssMlpImpl::GptOssMlpImpl(const ModelConfig& config, const torch::TensorOptions& options,
                             bool initialize)
    : m_topK(config.numExpertsPerTok) {
  router = register_module(
      "router", QuantLinear(config.hiddenSize, config.numLocalExperts, true, options, initialize));
  experts = register_module("experts", GptOssExperts(config, options));
  if (initialize) {
    // HF GptOssPreTrainedModel._init_weights (the CausalLM redraws router and experts' weights).
    torch::NoGradGuard noGrad;
    const double std = config.initializerRange;
    experts->gateUpProj.normal_(0.0, std);
    experts->downProj.normal_(0.0, std);
    experts->gateUpProjBias.zero_();
    experts->downProjBias.zero_();
  }
}

torch::Tensor GptOssMlpImpl::forward(const torch::Tensor& x) {
  const auto shape = x.sizes().vec();
  const torch::Tensor tokens = x.reshape({-1, shape.back()});
  // HF GptOssTopKRouter: the top k logits, a softmax over them in their own type.
  auto [topLogits, topExperts] = router(tokens).topk(m_topK, -1);
  const torch::Tensor topWeights = torch::softmax(topLogits, -1, topLogits.scalar_type());
  return experts(tokens, topExperts, topWeights).view(shape);
}

// ----- Decoder layer -----------------------------------------------------------------------

DecoderLayerImpl::DecoderLayerImpl(const ModelConfig& config, int64_t layerIndex,
                                   const torch::TensorOptions& options, bool initialize) {
  const bool weightFirst = config.isGptOss();
  inputLayernorm = register_module(
      "input_layernorm", RMSNorm(config.hiddenSize, config.rmsNormEps, options, weightFirst));
  selfAttn = register_module("self_attn", Attention(config, layerIndex, options, initialize));
  if (config.isMoe()) {
    moe = register_module("block_sparse_moe", SparseMoe(config, options, initialize));
  } else if (config.isGptOss()) {
    gptOssMlp = register_module("mlp", GptOssMlp(config, options, initialize));
  } else {
    mlp = register_module("mlp", Mlp(config.hiddenSize, config.intermediateSize, config.mlpBias,
                                     options, initialize));
  }
  postAttentionLayernorm =
      register_module("post_attention_layernorm",
                      RMSNorm(config.hiddenSize, config.rmsNormEps, options, weightFirst));
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& x, const AttentionContext& context) {
  const torch::Tensor h = x + selfAttn(inputLayernorm(x), context);
  const torch::Tensor normed = postAttentionLayernorm(h);
  return h + (moe ? moe(normed) : gptOssMlp ? gptOssMlp(normed) : mlp(normed));
}

}  // namespace fp4lab::model
