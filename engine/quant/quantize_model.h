// Turning a model's QuantLinear layers into fake-quantized ones: which layers (globs), which
// format (MXFP4 / NVFP4, W4A16 / W4A4), calibration of the per-tensor amax, the per-layer error
// statistics logged at every evaluation, and the quantizer state saved with checkpoints.
#pragma once

#include "fp4lab/common/glob.h"

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fp4lab/run/run_config.h"
#include "model/causal_lm.h"
#include "quant/fake_quant.h"

namespace fp4lab::quant {

struct QuantOptions {
  fp4_format format = FP4_FORMAT_NVFP4;
  fp4_scale_rule scaleRule = FP4_SCALE_RULE_CEIL;  // MXFP4
  bool blocks2d = false;                           // NVFP4 weights: 16x16 tiles
  bool activations = true;                         // W4A4; false: W4A16
  Backward backward = Backward::ClippedStraightThrough;
  bool frozenAmax = true;
  // NVFP4: one weight tensor scale per fused group (q/k/v_proj, gate/up_proj, w1/w3), the group's
  // largest amax, as the export writes it; false: each layer its own (files from before it).
  bool sharedGroupScale = true;
  std::vector<std::string> include, exclude;  // glob patterns over HF module names

  // From the quant.* keys (quant.format must not be none).
  static QuantOptions fromConfig(const run::RunConfig& config);
  // e.g. "NVFP4 W4A4, 1-D blocks, shared fused-group scales, clipped STE, calibrated amax".
  std::string describe() const;
};

// The file of a model or checkpoint folder that records its fake quantizers (options, layers and
// calibrated amaxes), written by the quantizing recipes.
constexpr const char* kQuantStateFile = "quant_state.json";

// The project's glob matcher (fp4lab/common/glob.h): what quant.include / quant.exclude use.
using fp4lab::globMatch;

struct QuantizedLayer {
  std::string name;  // HF module name, e.g. model.layers.0.mlp.down_proj
  model::QuantLinear linear{nullptr};
  std::shared_ptr<FakeQuantizer> weight, input;  // input null with W4A16
};

// The HF module names of the QuantLinears matching an include and no exclude pattern, in model
// order. Throws if nothing matches or a matching layer's input size is not a multiple of the
// block.
std::vector<std::string> selectLayers(model::CausalLM& model, const QuantOptions& options);
// Attaches quantizers to the layers selectLayers picks; with NVFP4 and sharedGroupScale, the
// weight quantizers of each fused group of at least two of them share one tensor scale.
std::vector<QuantizedLayer> attachQuantizers(model::CausalLM& model, const QuantOptions& options);

// Whether two option sets quantize identically (include/exclude aside, and the settings that do
// not apply to the format: scale rule for NVFP4, 2-D blocks for MXFP4).
bool sameQuantization(const QuantOptions& a, const QuantOptions& b);

// Max calibration: runs `forward(i)` for i in [0, batches) under no-grad with every quantizer
// recording max |x|, then freezes the amaxes.
void calibrate(std::vector<QuantizedLayer>& layers, int64_t batches,
               const std::function<void(int64_t)>& forward);

// Per-layer error metrics, in this order (the /quant/<metric> datasets of the run log).
const std::vector<std::string>& layerMetricNames();
// Blocks per layer (for /quant/blocks): the weight's element count / block size.
std::vector<int64_t> blocksPerLayer(const std::vector<QuantizedLayer>& layers);
// The rows those blocks span (the weight's elements over its last dimension; E * out for a 3-D
// experts tensor): the block map's layout.
std::vector<int64_t> blockRowsPerLayer(const std::vector<QuantizedLayer>& layers);

// Starts or stops the activation statistics of every input quantizer.
void setMeasuringActivations(std::vector<QuantizedLayer>& layers, bool on);
struct LayerErrors {
  std::vector<std::vector<float>> metricByLayer;  // [metric][layer]
  std::vector<std::vector<float>> blockMse;       // [layer][block]: the weight's per-block MSE
};
// Weight statistics measured now; activation statistics from the last measuring window (NaN
// with W4A16 or when nothing was measured).
LayerErrors measureLayers(std::vector<QuantizedLayer>& layers);

// {"format": describe(), "options": {format, scale_rule, blocks_2d, activations, backward, amax,
// shared_group_scale},
// "layers": {name: {"weight_amax": a, "input_amax": b}}} and back; loading checks that the layers
// match.
std::string quantStateJson(const std::vector<QuantizedLayer>& layers, const QuantOptions& options);
void loadQuantState(std::vector<QuantizedLayer>& layers, const std::string& json,
                    const std::string& where);

// A saved quant_state.json re-attached to a loaded model: quantizers on exactly the layers it
// names, with its options and amaxes (files without "options", from before it was recorded, are
// read from their "format" description; without options.shared_group_scale, per-layer scales).
struct SavedQuantizers {
  QuantOptions options;
  std::vector<QuantizedLayer> layers;
};
SavedQuantizers attachSavedQuantizers(model::CausalLM& model, const std::string& json,
                                      const std::string& where);

}  // namespace fp4lab::quant
