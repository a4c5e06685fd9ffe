// The model's forward pass against an independent fp64 reference written out longhand (per-head
// loops, scalar RoPE angles, explicit masked softmax, explicit GQA head mapping, per-token MoE),
// plus parameter names, QuantLinear hooks, the KV cache and gradients.
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "fp4lab/error.h"
#include "model/causal_lm.h"
#include "model/config.h"

using namespace fp4lab::model;

namespace {

using Params = std::map<std::string, torch::Tensor>;

ModelConfig fixture(const std::string& name) {
  return loadModelConfig(std::string(FP4LAB_TEST_DATA_DIR) + "/" + name + ".json");
}

bool endsWith(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Weights of order one (HF's 0.02 init would make attention nearly uniform and hide bugs):
// norm weights around 1, biases around 0.5, linears scaled by 1/sqrt(fan_in).
void randomize(CausalLM& model, uint64_t seed) {
  torch::NoGradGuard noGrad;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  for (auto& item : model->named_parameters()) {
    torch::Tensor& p = item.value();
    const torch::Tensor noise =
        at::randn(p.sizes(), generator, torch::TensorOptions(torch::kDouble)).to(p.dtype());
    if (endsWith(item.key(), "norm.weight")) {
      p.copy_(1 + 0.4 * noise);
    } else if (endsWith(item.key(), ".bias") || endsWith(item.key(), "_bias")) {
      p.copy_(0.5 * noise);
    } else if (item.key() == "model.embed_tokens.weight" || endsWith(item.key(), ".sinks")) {
      p.copy_(noise);
    } else {
      p.copy_(noise / std::sqrt(static_cast<double>(p.size(1))));
    }
  }
}

torch::Tensor randomIds(int64_t batch, int64_t length, int64_t vocab, uint64_t seed) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randint(vocab, {batch, length}, generator, torch::TensorOptions(torch::kLong));
}

double maxAbsDiff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

double maxAbs(const torch::Tensor& a) {
  return a.to(torch::kDouble).abs().max().item<double>();
}

// The reference: one sequence at a time, everything in fp64 and spelled out. It takes only the
// parameter tensors (by HF name) and the scalar hyper-parameters of the config; which optional
// pieces exist (biases, QK-norm, MoE, tied head) it reads off the parameter names.
class Reference {
 public:
  Reference(const ModelConfig& config, CausalLM& model, bool applyRopeScaling = true)
      : m_config(config), m_applyRopeScaling(applyRopeScaling) {
    for (const auto& item : model->named_parameters()) {
      m_params[item.key()] = item.value().detach().to(torch::kDouble).clone();
    }
  }

  // ids of one sequence -> logits [T, vocab]
  torch::Tensor logits(const std::vector<int64_t>& ids) {
    const int64_t length = static_cast<int64_t>(ids.size());
    std::vector<torch::Tensor> rows;
    for (int64_t id : ids) rows.push_back(param("model.embed_tokens.weight")[id]);
    torch::Tensor x = torch::stack(rows);  // [T, hidden]
    for (int64_t layer = 0; layer < m_config.numHiddenLayers; ++layer) {
      const std::string prefix = "model.layers." + std::to_string(layer) + ".";
      x = x + attention(rmsNorm(x, param(prefix + "input_layernorm.weight")), prefix + "self_attn.",
                        length, windowOf(layer));
      const torch::Tensor normed = rmsNorm(x, param(prefix + "post_attention_layernorm.weight"));
      x = x + (has(prefix + "block_sparse_moe.gate.weight")
                   ? moe(normed, prefix + "block_sparse_moe.")
               : has(prefix + "mlp.router.weight") ? gptOssMoe(normed, prefix + "mlp.")
                                                   : mlp(normed, prefix + "mlp.", false));
    }
    x = rmsNorm(x, param("model.norm.weight"));
    const torch::Tensor head =
        has("lm_head.weight") ? param("lm_head.weight") : param("model.embed_tokens.weight");
    return x.matmul(head.t());
  }

  // inv_freq written from the formulas (HF rope_init_fn docs), scalar by scalar.
  std::vector<double> inverseFrequencies() const {
    const int64_t dim = m_config.headDim;
    std::vector<double> result;
    const RopeScaling& s = m_config.ropeScaling;
    for (int64_t i = 0; i < dim / 2; ++i) {
      double f = 1.0 / std::pow(m_config.ropeTheta, static_cast<double>(2 * i) / dim);
      if (m_applyRopeScaling && s.type == RopeScaling::Type::Linear) f /= s.factor;
      if (m_applyRopeScaling && s.type == RopeScaling::Type::Llama3) {
        const double wavelength = 2 * M_PI / f;
        const double old = static_cast<double>(s.originalMaxPositionEmbeddings);
        if (wavelength > old / s.lowFreqFactor) {
          f = f / s.factor;  // low frequency: fully interpolated
        } else if (wavelength >= old / s.highFreqFactor) {
          const double smooth =
              (old / wavelength - s.lowFreqFactor) / (s.highFreqFactor - s.lowFreqFactor);
          f = (1 - smooth) * f / s.factor + smooth * f;
        }  // high frequency: unchanged
      }
      if (m_applyRopeScaling && s.type == RopeScaling::Type::Yarn) {
        // YaRN (Peng et al. 2023, and HF's _compute_yarn_parameters): the dimension index d at
        // which a frequency completes r rotations over the original context is
        // dim ln(L / (2 pi r)) / (2 ln theta); below d(beta_fast) frequencies are kept, above
        // d(beta_slow) divided by factor, linearly mixed between (ramp over the pair index i).
        const double old = static_cast<double>(s.originalMaxPositionEmbeddings);
        auto d = [&](double r) {
          return dim * std::log(old / (2 * M_PI * r)) / (2 * std::log(m_config.ropeTheta));
        };
        double low = d(s.betaFast), high = d(s.betaSlow);
        if (s.truncate) low = std::floor(low), high = std::ceil(high);
        low = std::max(low, 0.0);
        high = std::min(high, static_cast<double>(dim - 1));
        if (low == high) high += 0.001;
        const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
        f = f / s.factor * ramp + f * (1 - ramp);
      }
      result.push_back(f);
    }
    return result;
  }

  // YaRN's magnitude correction of cos and sin (1 without yarn).
  double ropeMagnitude() const {
    const RopeScaling& s = m_config.ropeScaling;
    if (!m_applyRopeScaling || s.type != RopeScaling::Type::Yarn) return 1.0;
    return s.factor <= 1 ? 1.0 : 0.1 * std::log(s.factor) + 1.0;
  }

 private:
  bool has(const std::string& name) const { return m_params.count(name) > 0; }
  const torch::Tensor& param(const std::string& name) const {
    const auto found = m_params.find(name);
    if (found == m_params.end()) FAIL("reference needs parameter " << name);
    return found->second;
  }

  torch::Tensor linear(const torch::Tensor& x, const std::string& name) const {
    torch::Tensor y = x.matmul(param(name + ".weight").t());
    if (has(name + ".bias")) y = y + param(name + ".bias");
    return y;
  }

  torch::Tensor rmsNorm(const torch::Tensor& x, const torch::Tensor& weight) const {
    return x / torch::sqrt(x.pow(2).mean(-1, true) + m_config.rmsNormEps) * weight;
  }

  // RoPE of one head's rows [T, D] at positions 0..T-1: element i pairs with i + D/2.
  torch::Tensor rope(const torch::Tensor& x) const {
    const int64_t length = x.size(0), dim = x.size(1), half = dim / 2;
    const std::vector<double> frequencies = inverseFrequencies();
    torch::Tensor out = torch::empty_like(x);
    auto in = x.accessor<double, 2>();
    auto result = out.accessor<double, 2>();
    for (int64_t t = 0; t < length; ++t) {
      for (int64_t i = 0; i < half; ++i) {
        const double angle = static_cast<double>(t) * frequencies[i];
        const double c = std::cos(angle) * ropeMagnitude(), s = std::sin(angle) * ropeMagnitude();
        result[t][i] = in[t][i] * c - in[t][i + half] * s;
        result[t][i + half] = in[t][i + half] * c + in[t][i] * s;
      }
    }
    return out;
  }

  // gpt-oss names its windowed layers; the others apply sliding_window (if any) everywhere.
  int64_t windowOf(int64_t layer) const {
    if (m_config.slidingLayers.empty()) return m_config.slidingWindow;
    return m_config.slidingLayers[layer] ? m_config.slidingWindow : 0;
  }

  static bool allowed(int64_t query, int64_t key, int64_t window) {
    if (key > query) return false;
    return window == 0 || query - key < window;
  }

  torch::Tensor attention(const torch::Tensor& x, const std::string& prefix, int64_t length,
                          int64_t window) const {
    const int64_t heads = m_config.numAttentionHeads, kvHeads = m_config.numKeyValueHeads;
    const int64_t dim = m_config.headDim;
    const torch::Tensor q = linear(x, prefix + "q_proj");
    const torch::Tensor k = linear(x, prefix + "k_proj");
    const torch::Tensor v = linear(x, prefix + "v_proj");
    std::vector<torch::Tensor> outputs;
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t kvHead = h / (heads / kvHeads);  // GQA: consecutive query heads share one
      torch::Tensor qh = q.narrow(1, h * dim, dim).contiguous();
      torch::Tensor kh = k.narrow(1, kvHead * dim, dim).contiguous();
      const torch::Tensor vh = v.narrow(1, kvHead * dim, dim);
      if (has(prefix + "q_norm.weight")) {
        qh = rmsNorm(qh, param(prefix + "q_norm.weight"));
        kh = rmsNorm(kh, param(prefix + "k_norm.weight"));
      }
      qh = rope(qh);
      kh = rope(kh);
      const torch::Tensor scores = qh.matmul(kh.t()) / std::sqrt(static_cast<double>(dim));
      torch::Tensor probabilities = torch::zeros({length, length}, torch::kDouble);
      auto s = scores.accessor<double, 2>();
      auto p = probabilities.accessor<double, 2>();
      // gpt-oss: the head's sink logit joins the softmax's denominator and nothing else.
      const bool sink = has(prefix + "sinks");
      const double sinkLogit = sink ? param(prefix + "sinks")[h].item<double>() : 0.0;
      for (int64_t i = 0; i < length; ++i) {
        double maximum = sink ? sinkLogit : -INFINITY;
        for (int64_t j = 0; j < length; ++j) {
          if (allowed(i, j, window)) maximum = std::max(maximum, s[i][j]);
        }
        double sum = sink ? std::exp(sinkLogit - maximum) : 0.0;
        for (int64_t j = 0; j < length; ++j) {
          if (allowed(i, j, window)) sum += (p[i][j] = std::exp(s[i][j] - maximum));
        }
        for (int64_t j = 0; j < length; ++j) p[i][j] /= sum;
      }
      outputs.push_back(probabilities.matmul(vh));
    }
    return linear(torch::cat(outputs, 1), prefix + "o_proj");
  }

  static torch::Tensor silu(const torch::Tensor& x) { return x / (1 + torch::exp(-x)); }

  torch::Tensor mlp(const torch::Tensor& x, const std::string& prefix, bool mixtralNames) const {
    const std::string gate = mixtralNames ? "w1" : "gate_proj";
    const std::string up = mixtralNames ? "w3" : "up_proj";
    const std::string down = mixtralNames ? "w2" : "down_proj";
    return linear(silu(linear(x, prefix + gate)) * linear(x, prefix + up), prefix + down);
  }

  // Per token: the k largest router logits, a softmax over just those k, and the weighted sum
  // of those experts' outputs.
  torch::Tensor moe(const torch::Tensor& x, const std::string& prefix) const {
    const torch::Tensor routerLogits = linear(x, prefix + "gate");
    const int64_t experts = routerLogits.size(1), topK = m_config.numExpertsPerTok;
    std::vector<torch::Tensor> rows;
    for (int64_t t = 0; t < x.size(0); ++t) {
      std::vector<int64_t> order(experts);
      std::iota(order.begin(), order.end(), 0);
      auto logit = [&](int64_t e) { return routerLogits[t][e].item<double>(); };
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t a, int64_t b) { return logit(a) > logit(b); });
      double sum = 0;
      for (int64_t j = 0; j < topK; ++j) sum += std::exp(logit(order[j]) - logit(order[0]));
      torch::Tensor out = torch::zeros({x.size(1)}, torch::kDouble);
      for (int64_t j = 0; j < topK; ++j) {
        const double weight = std::exp(logit(order[j]) - logit(order[0])) / sum;
        const std::string expert = prefix + "experts." + std::to_string(order[j]) + ".";
        out = out + weight * mlp(x[t].unsqueeze(0), expert, true).squeeze(0);
      }
      rows.push_back(out);
    }
    return torch::stack(rows);
  }

  // gpt-oss, per token: the k largest router logits (with the router's bias), a softmax over
  // those k, and each chosen expert's clamped SwiGLU: with gate_up = x W[e] + b[e] (W [H, 2I]),
  // gate = its even and up its odd columns, g = min(gate, limit), u = clamp(up, +-limit),
  // out = ((u + 1) g sigmoid(alpha g)) D[e] + d[e].
  torch::Tensor gptOssMoe(const torch::Tensor& x, const std::string& prefix) const {
    const torch::Tensor routerLogits = linear(x, prefix + "router");
    const int64_t experts = routerLogits.size(1), topK = m_config.numExpertsPerTok;
    const double limit = m_config.swigluLimit, alpha = m_config.swigluAlpha;
    const torch::Tensor& gateUp = param(prefix + "experts.gate_up_proj");
    const torch::Tensor& gateUpBias = param(prefix + "experts.gate_up_proj_bias");
    const torch::Tensor& down = param(prefix + "experts.down_proj");
    const torch::Tensor& downBias = param(prefix + "experts.down_proj_bias");
    const int64_t inner = down.size(1);
    std::vector<torch::Tensor> rows;
    for (int64_t t = 0; t < x.size(0); ++t) {
      std::vector<int64_t> order(experts);
      std::iota(order.begin(), order.end(), 0);
      auto logit = [&](int64_t e) { return routerLogits[t][e].item<double>(); };
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t a, int64_t b) { return logit(a) > logit(b); });
      double sum = 0;
      for (int64_t j = 0; j < topK; ++j) sum += std::exp(logit(order[j]) - logit(order[0]));
      torch::Tensor out = torch::zeros({x.size(1)}, torch::kDouble);
      for (int64_t j = 0; j < topK; ++j) {
        const int64_t e = order[j];
        const double weight = std::exp(logit(e) - logit(order[0])) / sum;
        const torch::Tensor projected = x[t].matmul(gateUp[e]) + gateUpBias[e];  // [2I]
        torch::Tensor gated = torch::empty({inner}, torch::kDouble);
        for (int64_t c = 0; c < inner; ++c) {
          const double g = std::min(projected[2 * c].item<double>(), limit);
          const double u = std::clamp(projected[2 * c + 1].item<double>(), -limit, limit);
          gated[c] = (u + 1) * g / (1 + std::exp(-alpha * g));
        }
        out = out + weight * (gated.matmul(down[e]) + downBias[e]);
      }
      rows.push_back(out);
    }
    return torch::stack(rows);
  }

  ModelConfig m_config;
  bool m_applyRopeScaling;
  Params m_params;
};

std::vector<int64_t> row(const torch::Tensor& ids, int64_t b) {
  const torch::Tensor r = ids[b].contiguous();
  return std::vector<int64_t>(r.data_ptr<int64_t>(), r.data_ptr<int64_t>() + r.numel());
}

const char* const kFixtures[] = {"llama_gqa",   "qwen2_bias_tied", "qwen3_qknorm", "llama3_rope",
                                 "mixtral_moe", "mistral_window",  "gpt_oss_tiny"};

}  // namespace

TEST_CASE("forward matches the fp64 reference", "[model][forward]") {
  const std::string name = GENERATE(from_range(std::begin(kFixtures), std::end(kFixtures)));
  INFO("fixture " << name);
  const ModelConfig config = fixture(name);
  CausalLM model(config, torch::TensorOptions(torch::kDouble));
  randomize(model, 11);
  const torch::Tensor ids = randomIds(2, 9, config.vocabSize, 5);

  const torch::Tensor logits = model->forward(ids);
  REQUIRE(logits.sizes() == torch::IntArrayRef({2, 9, config.vocabSize}));
  REQUIRE(logits.scalar_type() == torch::kDouble);
  Reference reference(config, model);
  for (int64_t b = 0; b < 2; ++b) {
    const torch::Tensor expected = reference.logits(row(ids, b));
    CHECK(maxAbs(expected) > 0.5);  // a non-degenerate model
    CHECK(maxAbsDiff(logits[b], expected) < 1e-10 * std::max(1.0, maxAbs(expected)));
  }
}

TEST_CASE("the reference is sensitive to what the forward pass must get right",
          "[model][forward]") {
  // The agreement above means something only if these ingredients change the logits.
  SECTION("llama3 rope scaling") {
    const ModelConfig config = fixture("llama3_rope");
    CausalLM model(config, torch::TensorOptions(torch::kDouble));
    randomize(model, 3);
    const auto ids = row(randomIds(1, 9, config.vocabSize, 4), 0);
    const torch::Tensor scaled = Reference(config, model).logits(ids);
    const torch::Tensor unscaled = Reference(config, model, /*applyRopeScaling=*/false).logits(ids);
    CHECK(maxAbsDiff(scaled, unscaled) > 1e-3);
  }
  SECTION("sliding window") {
    ModelConfig config = fixture("mistral_window");
    CausalLM model(config, torch::TensorOptions(torch::kDouble));
    randomize(model, 3);
    const torch::Tensor ids = randomIds(1, 9, config.vocabSize, 4);
    ModelConfig full = config;
    full.slidingWindow = 0;
    CHECK(maxAbsDiff(Reference(full, model).logits(row(ids, 0)), model->forward(ids)[0]) > 1e-3);
  }
  SECTION("gpt-oss: sinks, the clamp, the layer types and YaRN each change the logits") {
    const ModelConfig config = fixture("gpt_oss_tiny");
    CausalLM model(config, torch::TensorOptions(torch::kDouble));
    randomize(model, 3);
    const torch::Tensor ids = randomIds(1, 9, config.vocabSize, 4);
    const torch::Tensor logits = model->forward(ids)[0];
    ModelConfig unclamped = config;
    unclamped.swigluLimit = 1e6;
    CHECK(maxAbsDiff(Reference(unclamped, model).logits(row(ids, 0)), logits) > 1e-3);
    ModelConfig full = config;
    full.slidingLayers.assign(full.slidingLayers.size(), false);
    CHECK(maxAbsDiff(Reference(full, model).logits(row(ids, 0)), logits) > 1e-3);
    ModelConfig allSliding = config;
    allSliding.slidingLayers.assign(allSliding.slidingLayers.size(), true);
    CHECK(maxAbsDiff(Reference(allSliding, model).logits(row(ids, 0)), logits) > 1e-3);
    CHECK(maxAbsDiff(Reference(config, model, /*applyRopeScaling=*/false).logits(row(ids, 0)),
                     logits) > 1e-3);
    {
      torch::NoGradGuard noGrad;
      for (auto& item : model->named_parameters())
        if (endsWith(item.key(), ".sinks")) item.value().fill_(-1e3);  // no sink at all
    }
    CHECK(maxAbsDiff(model->forward(ids)[0], logits) > 1e-3);
  }
}

TEST_CASE("llama3 and linear scaling of inv_freq follow the formulas", "[model][rope]") {
  for (const char* name : {"llama3_rope", "qwen2_bias_tied", "llama_gqa", "gpt_oss_tiny"}) {
    INFO(name);
    const ModelConfig config = fixture(name);
    CausalLM model(config, torch::TensorOptions(torch::kDouble));
    const std::vector<double> expected = Reference(config, model).inverseFrequencies();
    const torch::Tensor actual = RotaryEmbedding(config).inverseFrequencies(torch::kDouble);
    REQUIRE(actual.numel() == static_cast<int64_t>(expected.size()));
    for (size_t i = 0; i < expected.size(); ++i) {
      CHECK(actual[i].item<double>() == Approx(expected[i]).epsilon(1e-12));
    }
  }
  // The fixture spans all three llama3 bands: kept, smoothed and divided by the factor.
  const ModelConfig config = fixture("llama3_rope");
  const torch::Tensor scaled = RotaryEmbedding(config).inverseFrequencies(torch::kDouble);
  ModelConfig plainConfig = config;
  plainConfig.ropeScaling = {};
  const torch::Tensor plain = RotaryEmbedding(plainConfig).inverseFrequencies(torch::kDouble);
  const torch::Tensor ratio = plain / scaled;
  CHECK(ratio[0].item<double>() == Approx(1.0));
  CHECK(ratio[-1].item<double>() == Approx(8.0));
  CHECK(((ratio > 1.01) & (ratio < 7.99)).any().item<bool>());
}

TEST_CASE("cached forward matches the full forward", "[model][cache]") {
  const std::string name = GENERATE(from_range(std::begin(kFixtures), std::end(kFixtures)));
  INFO("fixture " << name);
  const ModelConfig config = fixture(name);
  CausalLM model(config, torch::TensorOptions(torch::kDouble));
  randomize(model, 21);
  const torch::Tensor ids = randomIds(2, 11, config.vocabSize, 6);
  torch::NoGradGuard noGrad;
  const torch::Tensor full = model->forward(ids);

  // A prefill, a multi-token chunk after a prefix (explicit mask path), then single tokens;
  // the cache starts small so it has to grow.
  KVCache cache;
  std::vector<torch::Tensor> pieces;
  int64_t position = 0;
  for (int64_t chunk : {3, 4, 1, 1, 1, 1}) {
    pieces.push_back(model->forwardCached(ids.narrow(1, position, chunk), cache));
    position += chunk;
    CHECK(cache.length() == position);
  }
  const torch::Tensor cached = torch::cat(pieces, 1);
  CHECK(maxAbsDiff(cached, full) < 1e-10 * std::max(1.0, maxAbs(full)));
}

TEST_CASE("parameter names are the Hugging Face checkpoint names", "[model][names]") {
  SECTION("llama") {
    ModelConfig config = fixture("llama_gqa");
    config.numHiddenLayers = 1;
    CausalLM model(config);
    std::vector<std::string> names;
    for (const auto& item : model->named_parameters()) names.push_back(item.key());
    const std::vector<std::string> expected = {"model.embed_tokens.weight",
                                               "model.layers.0.input_layernorm.weight",
                                               "model.layers.0.self_attn.q_proj.weight",
                                               "model.layers.0.self_attn.k_proj.weight",
                                               "model.layers.0.self_attn.v_proj.weight",
                                               "model.layers.0.self_attn.o_proj.weight",
                                               "model.layers.0.mlp.gate_proj.weight",
                                               "model.layers.0.mlp.up_proj.weight",
                                               "model.layers.0.mlp.down_proj.weight",
                                               "model.layers.0.post_attention_layernorm.weight",
                                               "model.norm.weight",
                                               "lm_head.weight"};
    CHECK(names == expected);
    const auto parameters = model->named_parameters();
    CHECK(parameters["model.layers.0.self_attn.k_proj.weight"].sizes() ==
          torch::IntArrayRef({16, 32}));
    CHECK(parameters["model.layers.0.mlp.down_proj.weight"].sizes() ==
          torch::IntArrayRef({32, 48}));
    CHECK(parameters["lm_head.weight"].sizes() == torch::IntArrayRef({61, 32}));
    CHECK(model->named_buffers().size() == 0);  // no rotary tables in the state

    std::vector<std::string> linears;
    for (const auto& [linearName, linear] : model->quantLinears()) linears.push_back(linearName);
    CHECK(linears == std::vector<std::string>{
                         "model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.k_proj",
                         "model.layers.0.self_attn.v_proj", "model.layers.0.self_attn.o_proj",
                         "model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj",
                         "model.layers.0.mlp.down_proj", "lm_head"});
  }
  SECTION("qwen2: q/k/v biases, no o_proj bias, tied head") {
    CausalLM model(fixture("qwen2_bias_tied"));
    const auto parameters = model->named_parameters();
    CHECK(parameters.contains("model.layers.1.self_attn.q_proj.bias"));
    CHECK(parameters.contains("model.layers.1.self_attn.k_proj.bias"));
    CHECK(parameters.contains("model.layers.1.self_attn.v_proj.bias"));
    CHECK_FALSE(parameters.contains("model.layers.1.self_attn.o_proj.bias"));
    CHECK_FALSE(parameters.contains("lm_head.weight"));
    const auto linears = model->quantLinears();
    REQUIRE(linears.back().first == "lm_head");
    CHECK(linears.back().second->weight.data_ptr() ==
          parameters["model.embed_tokens.weight"].data_ptr());
  }
  SECTION("qwen3: q_norm and k_norm over head_dim") {
    CausalLM model(fixture("qwen3_qknorm"));
    const auto parameters = model->named_parameters();
    CHECK(parameters["model.layers.0.self_attn.q_norm.weight"].sizes() == torch::IntArrayRef({12}));
    CHECK(parameters["model.layers.0.self_attn.k_norm.weight"].sizes() == torch::IntArrayRef({12}));
    CHECK(parameters["model.layers.0.self_attn.q_proj.weight"].sizes() ==
          torch::IntArrayRef({48, 32}));
    CHECK_FALSE(parameters.contains("model.layers.0.self_attn.q_proj.bias"));
  }
  SECTION("llama with attention_bias and mlp_bias") {
    CausalLM model(fixture("llama3_rope"));
    const auto parameters = model->named_parameters();
    CHECK(parameters.contains("model.layers.0.self_attn.o_proj.bias"));
    CHECK(parameters.contains("model.layers.0.mlp.down_proj.bias"));
  }
  SECTION("mixtral") {
    CausalLM model(fixture("mixtral_moe"));
    const auto parameters = model->named_parameters();
    CHECK(parameters["model.layers.1.block_sparse_moe.gate.weight"].sizes() ==
          torch::IntArrayRef({4, 24}));
    CHECK(parameters["model.layers.1.block_sparse_moe.experts.3.w1.weight"].sizes() ==
          torch::IntArrayRef({32, 24}));
    CHECK(parameters["model.layers.1.block_sparse_moe.experts.3.w2.weight"].sizes() ==
          torch::IntArrayRef({24, 32}));
    CHECK(parameters["model.layers.1.block_sparse_moe.experts.3.w3.weight"].sizes() ==
          torch::IntArrayRef({32, 24}));
    CHECK_FALSE(parameters.contains("model.layers.1.mlp.gate_proj.weight"));
    int gates = 0, experts = 0;
    for (const auto& [linearName, linear] : model->quantLinears()) {
      gates += endsWith(linearName, "block_sparse_moe.gate");
      experts += linearName.find(".experts.") != std::string::npos;
    }
    CHECK(gates == 2);
    CHECK(experts == 2 * 4 * 3);
  }
  SECTION("gpt-oss: sinks, router with bias, experts as 3-D tensors") {
    ModelConfig config = fixture("gpt_oss_tiny");
    config.numHiddenLayers = 1;
    config.slidingLayers = {true};
    CausalLM model(config);
    std::vector<std::string> names;
    for (const auto& item : model->named_parameters()) names.push_back(item.key());
    const std::string p = "model.layers.0.";
    const std::vector<std::string> expected = {"model.embed_tokens.weight",
                                               p + "input_layernorm.weight",
                                               p + "self_attn.sinks",
                                               p + "self_attn.q_proj.weight",
                                               p + "self_attn.q_proj.bias",
                                               p + "self_attn.k_proj.weight",
                                               p + "self_attn.k_proj.bias",
                                               p + "self_attn.v_proj.weight",
                                               p + "self_attn.v_proj.bias",
                                               p + "self_attn.o_proj.weight",
                                               p + "self_attn.o_proj.bias",
                                               p + "mlp.router.weight",
                                               p + "mlp.router.bias",
                                               p + "mlp.experts.gate_up_proj",
                                               p + "mlp.experts.gate_up_proj_bias",
                                               p + "mlp.experts.down_proj",
                                               p + "mlp.experts.down_proj_bias",
                                               p + "post_attention_layernorm.weight",
                                               "model.norm.weight",
                                               "lm_head.weight"};
    // Registration order aside (HF registers sinks last), the same set of names.
    CHECK(std::set<std::string>(names.begin(), names.end()) ==
          std::set<std::string>(expected.begin(), expected.end()));
    CHECK(names.size() == expected.size());
    const auto parameters = model->named_parameters();
    CHECK(parameters[p + "mlp.experts.gate_up_proj"].sizes() == torch::IntArrayRef({4, 32, 64}));
    CHECK(parameters[p + "mlp.experts.down_proj"].sizes() == torch::IntArrayRef({4, 32, 32}));
    CHECK(parameters[p + "self_attn.sinks"].sizes() == torch::IntArrayRef({4}));
    std::vector<std::string> linears;
    for (const auto& [linearName, linear] : model->quantLinears()) {
      linears.push_back(linearName);
      if (endsWith(linearName, "experts.gate_up_proj")) {
        // The quantizers' view: [E, out, in], blocks along the input (hidden) dimension.
        CHECK(linear->weight.sizes() == torch::IntArrayRef({4, 64, 32}));
        CHECK(linear->inFeatures() == 32);
        CHECK(linear->outFeatures() == 4 * 64);
        CHECK(linear->weight.data_ptr() == parameters[p + "mlp.experts.gate_up_proj"].data_ptr());
      }
    }
    CHECK(linears == std::vector<std::string>{p + "self_attn.q_proj", p + "self_attn.k_proj",
                                              p + "self_attn.v_proj", p + "self_attn.o_proj",
                                              p + "mlp.router", p + "mlp.experts.gate_up_proj",
                                              p + "mlp.experts.down_proj", "lm_head"});
  }
}

namespace {

// Scales its input and counts calls: enough to see that a hook is applied and where.
struct ScaleQuantizer : TensorQuantizer {
  explicit ScaleQuantizer(double s) : scale(s) {}
  torch::Tensor apply(const torch::Tensor& x) override {
    ++calls;
    return x * scale;
  }
  double scale;
  int calls = 0;
};

// Rounds to a coarse grid, as a stand-in for FP4 fake-quant.
struct RoundQuantizer : TensorQuantizer {
  torch::Tensor apply(const torch::Tensor& x) override { return torch::round(x * 4) / 4; }
};

}  // namespace

TEST_CASE("QuantLinear applies its quantizers to weight and input", "[model][quant_linear]") {
  QuantLinear linear(5, 3, true, torch::TensorOptions(torch::kDouble));
  const torch::Tensor x = torch::randn({2, 4, 5}, torch::kDouble);
  const torch::Tensor plain = x.matmul(linear->weight.t()) + linear->bias;
  CHECK(maxAbsDiff(linear(x), plain) < 1e-12);

  auto weightHook = std::make_shared<ScaleQuantizer>(2.0);
  linear->weightQuantizer = weightHook;
  CHECK(maxAbsDiff(linear(x), x.matmul(2 * linear->weight.t()) + linear->bias) < 1e-12);
  CHECK(weightHook->calls == 1);

  auto inputHook = std::make_shared<ScaleQuantizer>(-3.0);
  linear->inputQuantizer = inputHook;
  CHECK(maxAbsDiff(linear(x), (-3 * x).matmul(2 * linear->weight.t()) + linear->bias) < 1e-12);
  CHECK(inputHook->calls == 1);

  QuantLinear noBias(5, 3, false);
  CHECK_FALSE(noBias->bias.defined());
  CHECK(noBias->named_parameters().size() == 1);
}

TEST_CASE("every linear of the model goes through its QuantLinear", "[model][quant_linear]") {
  for (const char* name : {"qwen2_bias_tied", "mixtral_moe", "gpt_oss_tiny"}) {
    INFO(name);
    const ModelConfig config = fixture(name);
    CausalLM model(config, torch::TensorOptions(torch::kDouble));
    randomize(model, 8);
    const torch::Tensor ids = randomIds(1, 7, config.vocabSize, 2);
    const torch::Tensor before = model->forward(ids);

    // Quantizing every weight through the hook must equal quantizing the weights themselves.
    auto rounding = std::make_shared<RoundQuantizer>();
    for (auto& [linearName, linear] : model->quantLinears()) linear->weightQuantizer = rounding;
    const torch::Tensor hooked = model->forward(ids);
    CHECK(maxAbsDiff(hooked, before) > 1e-3);

    CausalLM copy = copyCausalLM(model, {});
    {
      torch::NoGradGuard noGrad;
      for (auto& [linearName, linear] : copy->quantLinears()) {
        CHECK_FALSE(linear->weightQuantizer);
        if (linearName == "lm_head" && config.tieWordEmbeddings) continue;  // the embedding stays
        linear->weight.copy_(rounding->apply(linear->weight));
      }
    }
    if (config.tieWordEmbeddings) {
      // The tied head's weight is the embedding: quantize only the product, not the lookup.
      copy->lmHead->weightQuantizer = rounding;
    }
    CHECK(maxAbsDiff(copy->forward(ids), hooked) < 1e-10);
  }
}

TEST_CASE("BF16 models track the fp64 model", "[model][bf16]") {
  for (const char* name : {"llama_gqa", "qwen3_qknorm", "qwen2_bias_tied"}) {
    INFO(name);
    const ModelConfig config = fixture(name);
    CausalLM reference(config, torch::TensorOptions(torch::kDouble));
    randomize(reference, 13);
    CausalLM model = copyCausalLM(reference, torch::TensorOptions(torch::kBFloat16));
    const torch::Tensor ids = randomIds(2, 8, config.vocabSize, 1);
    const torch::Tensor logits = model->forward(ids);
    CHECK(logits.scalar_type() == torch::kBFloat16);
    const torch::Tensor expected = reference->forward(ids);
    // BF16 weights and activations: a few percent of the logit scale, not more.
    CHECK(maxAbsDiff(logits, expected) < 0.08 * maxAbs(expected));
  }
  // MoE in BF16 can route a near-tie differently; require sanity, not closeness.
  const ModelConfig config = fixture("mixtral_moe");
  CausalLM model(config, torch::TensorOptions(torch::kBFloat16));
  const torch::Tensor logits = model->forward(randomIds(2, 8, config.vocabSize, 1));
  CHECK(logits.scalar_type() == torch::kBFloat16);
  CHECK(torch::isfinite(logits).all().item<bool>());
}

TEST_CASE("gradients reach every parameter", "[model][grad]") {
  for (const char* name : {"llama_gqa", "qwen2_bias_tied", "qwen3_qknorm", "mixtral_moe"}) {
    INFO(name);
    const ModelConfig config = fixture(name);
    CausalLM model(config);
    randomize(model, 4);
    const torch::Tensor ids = randomIds(2, 12, config.vocabSize, 9);
    const torch::Tensor logits = model->forward(ids);
    const torch::Tensor loss = torch::nn::functional::cross_entropy(
        logits.narrow(1, 0, 11).reshape({-1, config.vocabSize}),
        ids.narrow(1, 1, 11).reshape({-1}));
    loss.backward();
    for (const auto& item : model->named_parameters()) {
      INFO(item.key());
      // With 24 tokens and 2 of 4 experts each, every expert is hit for these seeds.
      REQUIRE(item.value().grad().defined());
      CHECK(item.value().grad().abs().sum().item<double>() > 0);
    }
  }
}

TEST_CASE("bad input ids are rejected with fp4lab::Error", "[model][errors]") {
  const ModelConfig config = fixture("llama_gqa");
  CausalLM model(config);
  CHECK_THROWS_AS(model->forward(torch::full({1, 3}, config.vocabSize, torch::kLong)),
                  fp4lab::Error);
  CHECK_THROWS_AS(model->forward(torch::full({1, 3}, -1, torch::kLong)), fp4lab::Error);
  CHECK_THROWS_AS(model->forward(torch::zeros({1, 3}, torch::kInt)), fp4lab::Error);
  CHECK_THROWS_AS(model->forward(torch::zeros({3}, torch::kLong)), fp4lab::Error);
  CHECK_THROWS_AS(model->forward(torch::zeros({1, 0}, torch::kLong)), fp4lab::Error);
}
