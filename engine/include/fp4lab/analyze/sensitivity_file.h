// The file `fp4lab sensitivity --output` writes, and the one reader of it (the command, the
// quantization inspector's frontier chart, tests): plain C++ over fp4lab_log's HDF5 layer, no
// LibTorch, so the GUI may link it. Two encodings of the same content:
// - HDF5 (`.h5`, `.hdf5`), laid out like an analysis file (docs/log-schema.md, "Sensitivity
//   files"): the per-layer losses as a run log's /quant group (`/quant/<format>` with one row, so
//   readQuantRow serves it too), the rest under /sensitivity;
// - JSON (any other name), the same fields, for scripts.
// The measurement itself is fp4lab::run::measureSensitivity (engine/run, LibTorch).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace fp4lab::analyze {

struct SensitivityLayer {
  std::string name;  // Hugging Face module name
  int64_t rows = 0, cols = 0;
  int64_t bf16Bytes = 0, fp4Bytes = 0;  // the weight in BF16; in the format (codes + scales)
  double loss = 0, kl = 0;              // only this layer fake-quantized (kl NaN without kl)
  int64_t rank = 0;                     // 1: the most sensitive (largest loss increase over BF16)
};

struct SensitivityPlan {
  int64_t keep = 0;               // layers kept in BF16: the `keep` most sensitive
  std::vector<std::string> kept;  // their names, most sensitive first
  int64_t bytes = 0;              // the model's size with this plan
  double loss = 0, kl = 0;        // measured (keep == N: the BF16 model's); NaN: not measured
  std::string exclude;            // quant.exclude for a run of this plan
};

struct SensitivityFile {
  std::string model, data;
  std::string format;      // the quantization, e.g. "NVFP4 W4A16, 1-D blocks, ..."
  std::string formatName;  // as given, e.g. "nvfp4"
  bool w4a4 = false;
  int64_t sequences = 0, tokens = 0;  // evaluated per measurement
  int64_t seqLen = 0, batchSize = 0, evalBatches = 0;
  double bf16Loss = NAN, ptqLoss = NAN, ptqKl = NAN;
  int64_t bf16Bytes = 0, ptqBytes = 0;   // the whole model in BF16; with every layer quantized
  std::vector<SensitivityLayer> layers;  // in model order
  std::vector<SensitivityPlan> plans;    // by keep, ascending; keep 0 = PTQ, keep N = BF16
  int64_t chosenKeep = -1;               // the plan --emit-exclude wrote; -1: none
  double tolerance = NAN;                // of the default choice
  double seconds = 0;
  int threads = 0;
};

// True for a path the HDF5 encoding is used for (ends in .h5 or .hdf5).
bool isHdf5Path(const std::string& path);

// The JSON encoding: {"model", "data", "format", "format_name", "w4a4", "sequences", "tokens",
// "seq_len", "batch_size", "eval_batches", "bf16": {loss, bytes}, "ptq": {loss, kl, bytes},
// "layers": [{name, rows, cols, rank, loss, kl, delta_loss, bf16_bytes, fp4_bytes}] (model
// order), "plans": [{keep, bytes, loss, kl, kept, exclude}], "chosen_keep", "tolerance",
// "seconds", "threads"} (NaN as null).
std::string sensitivityJson(const SensitivityFile& file, int indent = 2);

// Writes `file` to `path`, HDF5 or JSON by isHdf5Path, through a temporary name: an existing
// `path` is refused (fp4lab::Error) unless `overwrite`, and is never left half-written.
void writeSensitivityFile(const SensitivityFile& file, const std::string& path, bool overwrite);

// Reads either encoding (told apart by the file's first bytes, not its name). Throws
// fp4lab::Error saying what and where for a missing, unreadable, damaged or foreign file (the
// JSON of another command, an analysis file, a plan without keep or bytes, no BF16 loss).
// Fields the file does not have keep their defaults (files of older versions lack some).
SensitivityFile readSensitivityFile(const std::string& path);

}  // namespace fp4lab::analyze
