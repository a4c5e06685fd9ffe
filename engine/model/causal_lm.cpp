// CausalLM: embeddings, decoder layers, final norm and lm_head, plus the growing KV cache that
// makes token-by-token generation linear in the sequence length.
#include "model/causal_lm.h"

#include <algorithm>
#include <map>

#include "fp4lab/error.h"

namespace fp4lab::model {

// ----- KVCache -----------------------------------------------------------------------------

std::pair<torch::Tensor, torch::Tensor> KVCache::append(size_t layer, const torch::Tensor& keys,
                                                        const torch::Tensor& values) {
  if (layer >= m_layers.size()) m_layers.resize(layer + 1);
  Layer& entry = m_layers[layer];
  const int64_t added = keys.size(2);
  const int64_t needed = entry.length + added;
  if (entry.keys.defined()) {
    const bool compatible =
        entry.keys.size(0) == keys.size(0) && entry.keys.size(1) == keys.size(1) &&
        entry.keys.size(3) == keys.size(3) && entry.keys.scalar_type() == keys.scalar_type() &&
        entry.keys.device() == keys.device();
    if (!compatible) {
      throw Error("key/value shape, dtype or device changed between calls", "KVCache",
                  "use a fresh KVCache (or clear()) per sequence batch");
    }
  }
  if (!entry.keys.defined() || entry.keys.size(2) < needed) {
    const int64_t oldCapacity = entry.keys.defined() ? entry.keys.size(2) : 0;
    const int64_t capacity = std::max({needed, m_capacityHint, 2 * oldCapacity});
    auto grow = [&](const torch::Tensor& old, const torch::Tensor& like) {
      torch::Tensor buffer =
          torch::empty({like.size(0), like.size(1), capacity, like.size(3)}, like.options());
      if (entry.length > 0) buffer.narrow(2, 0, entry.length).copy_(old.narrow(2, 0, entry.length));
      return buffer;
    };
    entry.keys = grow(entry.keys, keys);
    entry.values = grow(entry.values, values);
  }
  entry.keys.narrow(2, entry.length, added).copy_(keys);
  entry.values.narrow(2, entry.length, added).copy_(values);
  entry.length = needed;
  return {entry.keys.narrow(2, 0, needed), entry.values.narrow(2, 0, needed)};
}

// ----- DecoderModel ------------------------------------------------------------------------

DecoderModelImpl::DecoderModelImpl(const ModelConfig& config, const torch::TensorOptions& options,
                                   bool initialize)
    : m_config(config), m_rotary(config) {
  embedTokens =
      register_module("embed_tokens", Embedding(config.vocabSize, config.hiddenSize, options));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.numHiddenLayers; ++i) {
    DecoderLayer layer(config, i, options, initialize);
    layers->push_back(layer);
    layerList.push_back(layer);
  }
  norm = register_module("norm",
                         RMSNorm(config.hiddenSize, config.rmsNormEps, options, config.isGptOss()));
}

namespace {

// The attention context of one forward call for layers with sliding window `window` (0: none).
AttentionContext makeContext(int64_t past, int64_t length, int64_t window, torch::Device device) {
  AttentionContext context;
  const int64_t total = past + length;
  const bool windowed = window > 0 && total > window;
  if (!windowed && past == 0) {
    context.causal = true;  // SDPA's own causal path (flash kernels) for full sequences
  } else if (!windowed && length == 1) {
    context.causal = false;  // one new token sees every cached position
  } else {
    // SDPA's is_causal aligns the triangle top-left, which is wrong once a cache prefix makes
    // keys outnumber queries, and it knows no window: spell the mask out.
    const auto positionOptions = torch::TensorOptions(torch::kLong).device(device);
    const torch::Tensor queryPositions = torch::arange(past, total, positionOptions).unsqueeze(1);
    const torch::Tensor keyPositions = torch::arange(total, positionOptions).unsqueeze(0);
    torch::Tensor mask = keyPositions <= queryPositions;
    if (window > 0) mask = mask & (queryPositions - keyPositions < window);
    context.mask = mask;
    context.causal = false;
  }
  return context;
}

}  // namespace

torch::Tensor DecoderModelImpl::forward(const torch::Tensor& inputIds, KVCache* cache) {
  const int64_t length = inputIds.size(1);
  const int64_t past = cache ? cache->length() : 0;
  torch::Tensor hidden = embedTokens(inputIds);

  const auto [cos, sin] = m_rotary.cosSin(past, length, hidden.scalar_type(), hidden.device());
  // One context per window size in use (gpt-oss alternates sliding and full layers).
  std::map<int64_t, AttentionContext> contexts;
  for (size_t i = 0; i < layerList.size(); ++i) {
    const int64_t window = m_config.windowOf(static_cast<int64_t>(i));
    auto found = contexts.find(window);
    if (found == contexts.end()) {
      AttentionContext context = makeContext(past, length, window, hidden.device());
      context.cos = cos;
      context.sin = sin;
      context.cache = cache;
      found = contexts.emplace(window, std::move(context)).first;
    }
    hidden = layerList[i](hidden, found->second);
  }
  return norm(hidden);
}

// ----- CausalLM ----------------------------------------------------------------------------

CausalLMImpl::CausalLMImpl(const ModelConfig& config, const torch::TensorOptions& options,
                           bool initialize)
    : m_config(config) {
  m_config.validate("ModelConfig");
  model = register_module("model", DecoderModel(m_config, options, initialize));
  if (m_config.tieWordEmbeddings) {
    lmHead = QuantLinear(model->embedTokens->weight);
  } else {
    lmHead = register_module(
        "lm_head", QuantLinear(m_config.hiddenSize, m_config.vocabSize, false, options, false));
  }
  if (initialize) initializeWeights();
}

void CausalLMImpl::initializeWeights() {
  // HF PreTrainedModel._init_weights for these architectures.
  torch::NoGradGuard noGrad;
  const double std = m_config.initializerRange;
  for (auto& [name, linear] : quantLinears()) {
    linear->weight.normal_(0.0, std);
    if (linear->bias.defined()) linear->bias.zero_();
  }
  model->embedTokens->weight.normal_(0.0, std);
}

void CausalLMImpl::checkInput(const torch::Tensor& inputIds) const {
  const std::string where = "CausalLM input ids";
  if (!inputIds.defined() || inputIds.dim() != 2 || inputIds.size(0) < 1 || inputIds.size(1) < 1) {
    throw Error("expected a non-empty [batch, tokens] tensor", where);
  }
  if (inputIds.scalar_type() != torch::kLong) {
    throw Error(
        std::string("expected int64 token ids, got ") + c10::toString(inputIds.scalar_type()),
        where);
  }
  // The range check costs a device sync on accelerators; there torch's own index assert fires.
  if (inputIds.device().is_cpu()) {
    const int64_t low = inputIds.min().item<int64_t>();
    const int64_t high = inputIds.max().item<int64_t>();
    if (low < 0 || high >= m_config.vocabSize) {
      throw Error("token id " + std::to_string(low < 0 ? low : high) +
                      " outside the vocabulary [0, " + std::to_string(m_config.vocabSize) + ")",
                  where, "the tokenizer does not match the model");
    }
  }
}

torch::Tensor CausalLMImpl::hiddenStates(const torch::Tensor& inputIds, KVCache* cache) {
  checkInput(inputIds);
  return model->forward(inputIds, cache);
}

torch::Tensor CausalLMImpl::logits(const torch::Tensor& hidden) {
  // Tied: re-point at the embedding in case someone replaced its tensor (not just its data).
  if (m_config.tieWordEmbeddings) lmHead->weight = model->embedTokens->weight;
  return lmHead(hidden);
}

torch::Tensor CausalLMImpl::forward(const torch::Tensor& inputIds) {
  return logits(hiddenStates(inputIds, nullptr));
}

torch::Tensor CausalLMImpl::forwardCached(const torch::Tensor& inputIds, KVCache& cache) {
  return logits(hiddenStates(inputIds, &cache));
}

std::vector<std::pair<std::string, QuantLinear>> CausalLMImpl::quantLinears() {
  std::vector<std::pair<std::string, QuantLinear>> result;
  for (const auto& item : named_modules("", /*include_self=*/false)) {
    if (auto linear = std::dynamic_pointer_cast<QuantLinearImpl>(item.value())) {
      result.emplace_back(item.key(), QuantLinear(linear));
    } else if (auto experts = std::dynamic_pointer_cast<GptOssExpertsImpl>(item.value())) {
      // gpt-oss's experts: one quantized layer per weight tensor, named like the tensor.
      result.emplace_back(item.key() + ".gate_up_proj", experts->gateUpLinear());
      result.emplace_back(item.key() + ".down_proj", experts->downLinear());
    }
  }
  if (m_config.tieWordEmbeddings) result.emplace_back("lm_head", lmHead);
  return result;
}

std::vector<GemmShape> CausalLMImpl::gemmShapes(int64_t rows) {
  const int64_t experts = std::max<int64_t>(1, m_config.numLocalExperts);
  const int64_t expertRows =
      std::max<int64_t>(1, rows * std::max<int64_t>(1, m_config.numExpertsPerTok) / experts);
  std::vector<GemmShape> shapes;
  for (auto& [name, linear] : quantLinears()) {
    const torch::Tensor& w = linear->weight;
    // gpt-oss's experts: one [E, out, in] tensor; Mixtral's: a linear per expert.
    const bool expert = w.dim() == 3 || name.find(".experts.") != std::string::npos;
    shapes.push_back(
        {expert ? expertRows : rows, w.size(-1), w.size(-2), w.dim() == 3 ? w.size(0) : 1});
  }
  return shapes;
}

torch::ScalarType CausalLMImpl::dtype() const {
  return model->embedTokens->weight.scalar_type();
}

torch::Device CausalLMImpl::device() const {
  return model->embedTokens->weight.device();
}

CausalLM copyCausalLM(CausalLM& source, const torch::TensorOptions& options) {
  const torch::TensorOptions resolved =
      torch::TensorOptions()
          .dtype(options.has_dtype() ? options.dtype()
                                     : caffe2::TypeMeta::fromScalarType(source->dtype()))
          .device(options.has_device() ? options.device() : source->device());
  CausalLM copy(source->config(), resolved, /*initialize=*/false);
  torch::NoGradGuard noGrad;
  const auto sourceParameters = source->named_parameters();
  for (auto& item : copy->named_parameters()) item.value().copy_(sourceParameters[item.key()]);
  return copy;
}

void holdMatrixWeightsInBf16(CausalLM& model) {
  torch::NoGradGuard noGrad;
  const torch::Tensor& embeddings = model->model->embedTokens->weight;
  for (auto& p : model->parameters())
    if (p.dim() >= 2 && !p.is_same(embeddings) && p.scalar_type() != torch::kBFloat16)
      p.set_data(p.to(torch::kBFloat16));
}

}  // namespace fp4lab::model
