// Analysis of any model, without training: every linear weight the recipes would quantize,
// fake-quantized in each FP4 format by the kernels' fused pass, with its error statistics (the
// run log's /quant metrics: rel_l2, sqnr_db, mse, cosine, max_abs, clip_frac, zero_frac), its
// per-block errors (the run log's /quant/blocks: each block's MSE), histograms of its weights,
// block scale codes and block amax, and outlier counts. Plain C++ over fp4lab_io, fp4lab_kernels
// and fp4lab_log's HDF5 layer (no LibTorch, no Qt), so the GUI may link it; `fp4lab analyze`
// prints it as a table or JSON and writes it as HDF5 (docs/log-schema.md, "Analysis files").
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

// Log-spaced histogram bins over magnitudes v >= 0 (weights' |w|; block amax / tensor amax).
// Bin 0: v == 0; bin 1: 0 < v < 2^minExp; bins 2 .. size()-3: [lowerEdge(i), lowerEdge(i + 1)),
// binsPerOctave per octave from 2^minExp to 2^maxExp (the edges 2^(e + j / binsPerOctave) as
// floats); bin size()-2: v >= 2^maxExp (Inf included); bin size()-1: NaN.
struct LogBins {
  int minExp = 0, maxExp = 0, binsPerOctave = 1;
  int size() const { return (maxExp - minExp) * binsPerOctave + 4; }
  int index(float v) const;
  // The lower edge of bin i: 0 for bins 0 and 1, then 2^minExp ... 2^maxExp; NaN for the last.
  double lowerEdge(int bin) const;
};
// |w|: 2^-24 to 2^8, 4 bins per octave (132 bins).
const LogBins& weightBins();
// Block amax / tensor amax (fp32 division): 2^-16 to 1, 4 bins per octave (68 bins); the
// overflow bin holds the blocks whose amax is the tensor's (ratio 1).
const LogBins& amaxRatioBins();
// The k of the outlier counts |w| > k * rms: 3, 6, 10.
const std::vector<double>& outlierMultiples();

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
  // Keep each block's MSE (Entry::blockMse; 4 bytes per block and format). Off: only statistics
  // and histograms.
  bool blocks = true;
};

struct Layer {
  std::string module;          // Hugging Face module name, e.g. model.layers.0.mlp.down_proj
  std::string tensor;          // its weight, <module>.weight (gpt-oss experts: the module itself)
  int64_t rows = 0, cols = 0;  // as quantized: [out, in], blocks along the rows
  // gpt-oss's experts tensors ([E, in, out], Hugging Face's layout): E, and the rows are
  // E * out of the transposed [E, out, in]; 0 for a plain [out, in] linear weight.
  int64_t experts = 0;
};

// One layer in one format.
struct Entry {
  size_t layer = 0;       // index into Analysis::layers
  std::string format;     // a formatNames() entry
  bool measured = false;  // false: the layer's columns are not a multiple of the block
  float tensorAmax = 0;   // the amax behind the tensor scale (NVFP4: the fused group's)
  fp4_error_stats stats{};
  // Each block's mean squared error, sum over its elements of (x - x')^2 / block, rows*cols/block
  // entries in row-major order (row r, block c at r * (cols / block) + c), NaN for a block
  // holding NaN/Inf: what the run log writes to /quant/blocks/<l>. nvfp4-2d: 1x16 blocks of a
  // row, each with its tile's scale. Empty when not measured or Options::blocks is off.
  std::vector<float> blockMse;
  // Block scale codes: 256 counts, one per scale byte (E8M0: exponent + 127, 0xFF for a NaN
  // block; E4M3: the code, 0x7F for NaN). nvfp4-2d counts each 1x16 block (16 per tile).
  std::vector<int64_t> scaleHist;
  // Block amax / tensorAmax in amaxRatioBins() (nvfp4-2d: the tile's amax).
  std::vector<int64_t> amaxHist;
  int64_t blockCount() const;  // the sum of scaleHist: rows * cols / block when measured
};

struct LayerOutliers {
  float amax = 0;                            // max |w| over the finite weights
  double rms = 0;                            // sqrt(mean w^2) over the finite weights
  int64_t over3 = 0, over6 = 0, over10 = 0;  // |w| > k * rms for k = 3, 6, 10
  // Signed histogram of the weights in weightBins(): by the sign bit (so -0.0 counts as
  // negative zero); negative.size() == positive.size() == weightBins().size(), and the two sum
  // to rows * cols.
  std::vector<int64_t> negative, positive;
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

// The analysis file (HDF5; layout in docs/log-schema.md, "Analysis files"). Written under a
// temporary name in the same folder, fsynced and renamed to `path`; an existing `path` is an
// error unless `overwrite`. Throws fp4lab::Error (nothing is left at `path` then).
void writeAnalysisFile(const Analysis& analysis, const std::string& path, bool overwrite = false);
// Reads a file written by writeAnalysisFile back into the same structs. Throws fp4lab::Error for
// a missing, foreign or damaged file.
Analysis readAnalysisFile(const std::string& path);

// One row of a run-log-style /quant group: the run log's "/quant" (row = the measurement at
// /quant/step[row]; -1: the last) or an analysis file's "/quant/<format>" (one row, step 0). The
// one reader of both.
struct QuantRow {
  std::vector<std::string> layers;
  int64_t rows = 0;  // rows in the group
  int64_t step = -1;
  std::vector<std::string> metrics;        // in the group's order
  std::vector<std::vector<float>> values;  // [metric][layer]
  std::vector<std::vector<float>> blocks;  // [layer]: that row of /blocks/<l>; empty if none
  std::vector<int64_t> blockRows;  // [layer]: the weight rows the blocks span (attribute `rows`);
                                   // 0 if none or not recorded
};
QuantRow readQuantRow(const std::string& path, const std::string& group = "/quant",
                      int64_t row = -1);

// A fixed-width table, one line per layer and format.
std::string formatTable(const Analysis& analysis);
// {"model", "formats", "seconds", "layers": [{"module", "format", "rows", "cols", "tensor_amax",
//  "rel_l2", "sqnr_db", ..., "outliers_3rms", "outliers_6rms", "outliers_10rms", "blocks",
//  "worst_block", "worst_block_mse", ...}]} (NaN as null). Histograms and per-block errors are
//  in the HDF5 file only.
std::string toJson(const Analysis& analysis, int indent = 2);

}  // namespace fp4lab::analyze
