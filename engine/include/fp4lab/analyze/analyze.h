// Analysis of any model, without training: every linear weight the recipes would quantize,
// fake-quantized in each FP4 format by the kernels' fused pass, with its error statistics (the
// run log's /quant metrics: rel_l2, sqnr_db, mse, cosine, max_abs, clip_frac, zero_frac) and
// outlier counts. Plain C++ over fp4lab_io and fp4lab_kernels (no LibTorch), so the GUI may link
// it; `fp4lab analyze` prints it as a table or JSON.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "fp4lab/kernels/fp4.h"

namespace fp4lab::analyze {

// "mxfp4", "mxfp4-floor", "nvfp4", "nvfp4-2d": the formats analysed, in this order.
std::vector<std::string> formatNames();
// The kernel configuration of a format name (the recipes' defaults: nearest-even rounding, no
// Hadamard); throws fp4lab::Error for an unknown name.
fp4_config formatConfig(const std::string& name);

// The run log's weight metric names, in /quant order, and their values for a statistics record.
const std::vector<std::string>& metricNames();
std::vector<double> metricValues(const fp4_error_stats& stats);

struct Options {
  std::string modelDir;  // a Hugging Face folder (model.safetensors or an index with shards)
  std::vector<std::string> formats = formatNames();
  // fnmatch globs ('*' crosses dots) of module names. `include` empty: quant.include's default;
  // `exclude` adds to quant.exclude's default.
  std::vector<std::string> include;
  std::vector<std::string> exclude;
  int threads = 0;  // layers analysed at once (0: the hardware threads)
  // NVFP4: q/k/v and gate/up share one tensor scale, the group's largest amax (quant's
  // shared_group_scale default, as exported).
  bool sharedGroupScale = true;
};

struct Layer {
  std::string module;  // Hugging Face module name, e.g. model.layers.0.mlp.down_proj
  std::string tensor;  // its weight, <module>.weight
  int64_t rows = 0, cols = 0;
};

// One layer in one format.
struct Entry {
  size_t layer = 0;       // index into Analysis::layers
  std::string format;     // a formatNames() entry
  bool measured = false;  // false: the layer's columns are not a multiple of the block
  float tensorAmax = 0;   // the amax behind the tensor scale (NVFP4: the fused group's)
  fp4_error_stats stats{};
};

struct LayerOutliers {
  float amax = 0;
  double rms = 0;
  int64_t over3 = 0, over6 = 0;  // |w| > 3 * rms, |w| > 6 * rms
};

struct Analysis {
  std::string modelDir;
  std::vector<std::string> formats;
  std::vector<Layer> layers;            // in file order
  std::vector<LayerOutliers> outliers;  // one per layer
  std::vector<Entry> entries;           // layer-major, formats in `formats` order
  double seconds = 0;
  int threads = 0;
};

struct Progress {
  int64_t done = 0, total = 0;  // layers
  std::string layer;            // the one just finished
};

// The layers `options` selects: 2-D floating-point "<module>.weight" tensors, no embeddings,
// matching include and no exclude. Throws fp4lab::Error for a malformed folder or none selected.
std::vector<Layer> selectLayers(const Options& options);

// Runs the analysis on `threads` threads. `progress` is called (serialised) after each layer;
// `cancel` set while running stops it with fp4lab::Error("analysis cancelled").
Analysis analyzeModel(const Options& options,
                      const std::function<void(const Progress&)>& progress = {},
                      const std::atomic<bool>* cancel = nullptr);

// A fixed-width table, one line per layer and format.
std::string formatTable(const Analysis& analysis);
// {"model", "formats", "seconds", "layers": [{"module", "format", "rows", "cols", "tensor_amax",
//  "rel_l2", "sqnr_db", ..., "outliers_3rms", "outliers_6rms", ...}]} (NaN as null).
std::string toJson(const Analysis& analysis, int indent = 2);

}  // namespace fp4lab::analyze
