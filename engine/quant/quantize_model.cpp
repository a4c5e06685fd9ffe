// Attaching fake quantizers to a model's linear layers, calibrating them, and measuring them.
#include "quant/quantize_model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "fp4lab/error.h"
#include "fp4lab/export/fused_groups.h"

namespace fp4lab::quant {

QuantOptions QuantOptions::fromConfig(const run::RunConfig& config) {
  QuantOptions o;
  if (config.quantFormat == "mxfp4")
    o.format = FP4_FORMAT_MXFP4;
  else if (config.quantFormat == "nvfp4")
    o.format = FP4_FORMAT_NVFP4;
  else
    throw Error("quant.format must be mxfp4 or nvfp4, not '" + config.quantFormat + "'",
                "run config");
  o.scaleRule = config.scaleRule == "floor" ? FP4_SCALE_RULE_FLOOR : FP4_SCALE_RULE_CEIL;
  o.blocks2d = config.blocks2d;
  o.activations = config.quantActivations;
  // ModelOpt's defaults: clipped STE for NVFP4, plain STE for MXFP4.
  const std::string backward = config.quantBackward == "auto"
                                   ? (o.format == FP4_FORMAT_NVFP4 ? "clipped_ste" : "ste")
                                   : config.quantBackward;
  o.backward =
      backward == "clipped_ste" ? Backward::ClippedStraightThrough : Backward::StraightThrough;
  o.frozenAmax = config.amaxMode == "frozen";
  o.sharedGroupScale = o.format == FP4_FORMAT_NVFP4 && config.sharedGroupScale;
  o.include = run::splitList(config.quantInclude);
  o.exclude = run::splitList(config.quantExclude);
  return o;
}

std::string QuantOptions::describe() const {
  std::string s = format == FP4_FORMAT_MXFP4 ? "MXFP4" : "NVFP4";
  s += activations ? " W4A4" : " W4A16";
  if (format == FP4_FORMAT_MXFP4)
    s += scaleRule == FP4_SCALE_RULE_CEIL ? ", ceil scales" : ", floor scales";
  else
    s += blocks2d ? ", 16x16 weight blocks" : ", 1-D blocks";
  if (format == FP4_FORMAT_NVFP4 && sharedGroupScale) s += ", shared fused-group scales";
  s += backward == Backward::ClippedStraightThrough ? ", clipped STE" : ", STE";
  s += frozenAmax ? ", calibrated amax" : ", dynamic amax";
  return s;
}

std::vector<std::string> selectLayers(model::CausalLM& model, const QuantOptions& options) {
  auto matchesAny = [](const std::vector<std::string>& patterns, const std::string& name) {
    for (const auto& p : patterns)
      if (globMatch(p, name)) return true;
    return false;
  };
  const int64_t block = fp4_block_size(options.format);
  std::vector<std::string> include;
  for (const std::string& pattern : options.include) {
    for (const std::string& p :
         run::quantIncludePatterns(pattern, model::architectureName(model->config().architecture)))
      include.push_back(p);
  }
  std::vector<std::string> names;
  for (auto& [name, linear] : model->quantLinears()) {
    if (!matchesAny(include, name) || matchesAny(options.exclude, name)) continue;
    if (linear->inFeatures() % block != 0)
      throw Error("layer " + name + " has " + std::to_string(linear->inFeatures()) +
                      " inputs, not a multiple of the " + std::to_string(block) + "-element block",
                  "quant.include", "exclude it with quant.exclude");
    names.push_back(name);
  }
  if (names.empty()) {
    std::string all;
    for (auto& [name, linear] : model->quantLinears()) all += (all.empty() ? "" : ", ") + name;
    throw Error("no linear layer matches quant.include without matching quant.exclude",
                "quant.include", "the model's linear layers are: " + all);
  }
  return names;
}

std::vector<QuantizedLayer> attachQuantizers(model::CausalLM& model, const QuantOptions& options) {
  const std::vector<std::string> names = selectLayers(model, options);
  fp4_config weightConfig = fp4_default_config(options.format);
  weightConfig.scale_rule = options.scaleRule;
  weightConfig.nvfp4_2d_blocks = options.format == FP4_FORMAT_NVFP4 && options.blocks2d;
  fp4_config inputConfig = weightConfig;
  inputConfig.nvfp4_2d_blocks = 0;

  std::vector<QuantizedLayer> layers;
  for (auto& [name, linear] : model->quantLinears()) {
    if (std::find(names.begin(), names.end(), name) == names.end()) continue;
    QuantizedLayer q;
    q.name = name;
    q.linear = linear;
    q.weight = std::make_shared<FakeQuantizer>(weightConfig, options.backward,
                                               FakeQuantizer::Role::Weight, options.frozenAmax);
    if (options.activations)
      q.input = std::make_shared<FakeQuantizer>(inputConfig, options.backward,
                                                FakeQuantizer::Role::Input, options.frozenAmax);
    linear->weightQuantizer = q.weight;
    linear->inputQuantizer = q.input;
    layers.push_back(std::move(q));
  }
  if (options.format == FP4_FORMAT_NVFP4 && options.sharedGroupScale) {
    std::map<std::string, std::vector<size_t>> groups;
    for (size_t i = 0; i < layers.size(); ++i) {
      const std::string g = exporter::fusedGroupOf(layers[i].name);
      if (!g.empty()) groups[g].push_back(i);
    }
    for (const auto& [group, members] : groups) {
      if (members.size() < 2) continue;
      auto shared = std::make_shared<SharedTensorScale>();
      for (size_t i : members) shared->add(layers[i].weight, layers[i].linear);
      for (size_t i : members) layers[i].weight->setSharedScale(shared);
    }
  }
  return layers;
}

bool sameQuantization(const QuantOptions& a, const QuantOptions& b) {
  if (a.format != b.format || a.activations != b.activations || a.backward != b.backward ||
      a.frozenAmax != b.frozenAmax)
    return false;
  if (a.format == FP4_FORMAT_MXFP4) return a.scaleRule == b.scaleRule;
  return a.blocks2d == b.blocks2d && a.sharedGroupScale == b.sharedGroupScale;
}

void calibrate(std::vector<QuantizedLayer>& layers, int64_t batches,
               const std::function<void(int64_t)>& forward) {
  if (batches <= 0) return;
  for (auto& l : layers) {
    l.weight->beginCalibration();
    if (l.input) l.input->beginCalibration();
  }
  {
    torch::NoGradGuard noGrad;
    for (int64_t i = 0; i < batches; ++i) forward(i);
  }
  for (auto& l : layers) {
    l.weight->endCalibration();
    if (l.input) l.input->endCalibration();
  }
}

const std::vector<std::string>& layerMetricNames() {
  static const std::vector<std::string> names = {
      "rel_l2",    "sqnr_db",   "mse",         "cosine",     "max_abs",
      "clip_frac", "zero_frac", "act_sqnr_db", "act_rel_l2", "act_clip_frac"};
  return names;
}

std::vector<int64_t> blocksPerLayer(const std::vector<QuantizedLayer>& layers) {
  std::vector<int64_t> out;
  for (const auto& l : layers)
    out.push_back(l.linear->weight.numel() / fp4_block_size(l.weight->config().format));
  return out;
}

std::vector<int64_t> blockRowsPerLayer(const std::vector<QuantizedLayer>& layers) {
  std::vector<int64_t> out;
  for (const auto& l : layers) {
    const torch::Tensor& w = l.linear->weight;
    out.push_back(w.dim() > 0 && w.size(-1) > 0 ? w.numel() / w.size(-1) : 0);
  }
  return out;
}

void setMeasuringActivations(std::vector<QuantizedLayer>& layers, bool on) {
  for (auto& l : layers)
    if (l.input) l.input->setMeasuring(on);
}

LayerErrors measureLayers(std::vector<QuantizedLayer>& layers) {
  torch::NoGradGuard noGrad;
  LayerErrors out;
  const size_t n = layers.size();
  out.metricByLayer.assign(layerMetricNames().size(), std::vector<float>(n, NAN));
  out.blockMse.resize(n);
  for (size_t i = 0; i < n; ++i) {
    QuantizedLayer& l = layers[i];
    fp4_error_stats s;
    fp4_stats_clear(&s);
    torch::Tensor blockSq;
    const float amax = l.weight->tensorAmax();
    fakeQuantize(l.linear->weight.detach(), l.weight->config(), amax, &s, &blockSq);
    const double block = fp4_block_size(l.weight->config().format);
    torch::Tensor mse = (blockSq.to(torch::kCPU) / block).contiguous();
    out.blockMse[i].assign(mse.data_ptr<float>(), mse.data_ptr<float>() + mse.numel());
    const std::vector<double> weight = {
        fp4_stats_rel_l2(&s),       fp4_stats_sqnr_db(&s), fp4_stats_mse(&s),
        fp4_stats_cosine(&s),       s.max_abs_err,         fp4_stats_clip_fraction(&s),
        fp4_stats_zero_fraction(&s)};
    for (size_t m = 0; m < weight.size(); ++m) out.metricByLayer[m][i] = float(weight[m]);
    if (l.input && l.input->stats().count > 0) {
      const fp4_error_stats& a = l.input->stats();
      out.metricByLayer[7][i] = float(fp4_stats_sqnr_db(&a));
      out.metricByLayer[8][i] = float(fp4_stats_rel_l2(&a));
      out.metricByLayer[9][i] = float(fp4_stats_clip_fraction(&a));
    }
  }
  return out;
}

std::string quantStateJson(const std::vector<QuantizedLayer>& layers, const QuantOptions& options) {
  nlohmann::json j;
  j["format"] = options.describe();
  j["options"] = {
      {"format", options.format == FP4_FORMAT_MXFP4 ? "mxfp4" : "nvfp4"},
      {"scale_rule", options.scaleRule == FP4_SCALE_RULE_FLOOR ? "floor" : "ceil"},
      {"blocks_2d", options.blocks2d},
      {"activations", options.activations},
      {"backward", options.backward == Backward::ClippedStraightThrough ? "clipped_ste" : "ste"},
      {"amax", options.frozenAmax ? "frozen" : "dynamic"},
      {"shared_group_scale", options.format == FP4_FORMAT_NVFP4 && options.sharedGroupScale}};
  j["layers"] = nlohmann::json::object();
  for (const auto& l : layers) {
    nlohmann::json e;
    auto amax = [](float a) { return std::isfinite(a) ? nlohmann::json(a) : nlohmann::json(); };
    e["weight_amax"] = amax(l.weight->amax());
    if (l.input) e["input_amax"] = amax(l.input->amax());
    j["layers"][l.name] = e;
  }
  return j.dump(2) + "\n";
}

void loadQuantState(std::vector<QuantizedLayer>& layers, const std::string& text,
                    const std::string& where) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.contains("layers") || !j["layers"].is_object())
    throw Error("malformed quantizer state (no \"layers\" object)", where);
  auto read = [&](const nlohmann::json& e, const char* key, const std::string& layer) {
    if (!e.contains(key)) throw Error("no " + std::string(key) + " for layer " + layer, where);
    return e[key].is_number() ? e[key].get<float>() : NAN;
  };
  for (auto& l : layers) {
    if (!j["layers"].contains(l.name))
      throw Error("the quantizer state has no layer " + l.name, where,
                  "resume with the quant.* settings the run started with");
    const nlohmann::json& e = j["layers"][l.name];
    l.weight->setAmax(read(e, "weight_amax", l.name));
    if (l.input) l.input->setAmax(read(e, "input_amax", l.name));
  }
}

namespace {

QuantOptions optionsFromState(const nlohmann::json& j, const std::string& where) {
  QuantOptions o;
  auto text = [&](const nlohmann::json& e, const char* key) -> std::string {
    if (!e.contains(key) || !e[key].is_string())
      throw Error("malformed quantizer state (options." + std::string(key) + ")", where);
    return e[key].get<std::string>();
  };
  auto flag = [&](const nlohmann::json& e, const char* key) {
    if (!e.contains(key) || !e[key].is_boolean())
      throw Error("malformed quantizer state (options." + std::string(key) + ")", where);
    return e[key].get<bool>();
  };
  if (j.contains("options") && j["options"].is_object()) {
    const nlohmann::json& e = j["options"];
    const std::string format = text(e, "format");
    if (format != "mxfp4" && format != "nvfp4")
      throw Error("unknown format '" + format + "' in the quantizer state", where);
    o.format = format == "mxfp4" ? FP4_FORMAT_MXFP4 : FP4_FORMAT_NVFP4;
    o.scaleRule = text(e, "scale_rule") == "floor" ? FP4_SCALE_RULE_FLOOR : FP4_SCALE_RULE_CEIL;
    o.blocks2d = flag(e, "blocks_2d");
    o.activations = flag(e, "activations");
    o.backward = text(e, "backward") == "clipped_ste" ? Backward::ClippedStraightThrough
                                                      : Backward::StraightThrough;
    o.frozenAmax = text(e, "amax") == "frozen";
    // Files from before the option: each layer its own tensor scale.
    o.sharedGroupScale = e.contains("shared_group_scale") && flag(e, "shared_group_scale") &&
                         o.format == FP4_FORMAT_NVFP4;
    return o;
  }
  // Before the options were recorded: the description describe() wrote.
  if (!j.contains("format") || !j["format"].is_string())
    throw Error("malformed quantizer state (no \"options\" or \"format\")", where);
  const std::string d = j["format"].get<std::string>();
  auto has = [&](const char* part) { return d.find(part) != std::string::npos; };
  if (!has("MXFP4") && !has("NVFP4"))
    throw Error("the quantizer state's format '" + d + "' is neither MXFP4 nor NVFP4", where);
  o.format = has("MXFP4") ? FP4_FORMAT_MXFP4 : FP4_FORMAT_NVFP4;
  o.activations = !has("W4A16");
  o.scaleRule = has("floor scales") ? FP4_SCALE_RULE_FLOOR : FP4_SCALE_RULE_CEIL;
  o.blocks2d = has("16x16");
  o.backward = has("clipped STE") ? Backward::ClippedStraightThrough : Backward::StraightThrough;
  o.frozenAmax = !has("dynamic amax");
  // Descriptions from before the option say nothing: each layer its own tensor scale.
  o.sharedGroupScale = o.format == FP4_FORMAT_NVFP4 && has("shared fused-group scales");
  return o;
}

}  // namespace

SavedQuantizers attachSavedQuantizers(model::CausalLM& model, const std::string& text,
                                      const std::string& where) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("layers") || !j["layers"].is_object() ||
      j["layers"].empty())
    throw Error("malformed quantizer state (no \"layers\" object)", where,
                "load the BF16 weights instead (--bf16, or model.bf16_weights=true)");
  SavedQuantizers saved;
  saved.options = optionsFromState(j, where);
  // Exactly the layers the file names: their names as include patterns (they hold no wildcards).
  std::vector<std::string> known;
  for (auto& [name, linear] : model->quantLinears()) known.push_back(name);
  for (const auto& item : j["layers"].items()) {
    if (std::find(known.begin(), known.end(), item.key()) == known.end())
      throw Error("the quantizer state names layer " + item.key() + ", which the model lacks",
                  where, "is this quant_state.json from another model?");
    if (item.key().find_first_of("*?") != std::string::npos)
      throw Error("malformed layer name '" + item.key() + "' in the quantizer state", where);
    saved.options.include.push_back(item.key());
  }
  saved.layers = attachQuantizers(model, saved.options);
  loadQuantState(saved.layers, text, where);
  return saved;
}

}  // namespace fp4lab::quant
