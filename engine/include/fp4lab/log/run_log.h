// The HDF5 run log (schema 1, docs/log-schema.md): RunLogWriter for the training process,
// RunLogReader for the GUI and tools, live (SWMR) or finished. Plain C++: HDF5 stays in the .cpp.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace fp4lab::log {

// The schema version this library writes and the newest it reads.
constexpr int kSchemaVersion = 1;

// Root attributes of a log. createdUtc is filled with the current time when left empty.
struct RootAttributes {
  std::string runId, recipe, format, createdUtc, configYaml;
  int schemaVersion = kSchemaVersion;
};

// What a log holds besides the fixed train table; fixed at create(), because HDF5 1.10 cannot
// create objects safely once SWMR writing has started.
struct RunLogSchema {
  // /eval columns after step, tokens, wall_s, e.g. "val_loss", "val_kl", "pass_rate_<task>".
  std::vector<std::string> evalColumns;
  // Names of the quantized layers (/quant/layers); may be empty (then quantMetrics must be too).
  std::vector<std::string> quantLayers;
  // One f32[K, L] dataset per metric: rel_l2, sqnr_db, mse, cosine, max_abs, clip_frac, ...
  std::vector<std::string> quantMetrics;
  // Empty: no /quant/blocks. Else one entry per layer: the number of blocks B_l of that layer,
  // giving /quant/blocks/<layer index> f32[K, B_l]; 0 means no per-block data for that layer.
  std::vector<int64_t> blocksPerLayer;
  // Empty, or one entry per layer: the rows of the weight whose blocks /quant/blocks/<l> holds
  // (the weight's elements over its last dimension, so E * out for a 3-D experts tensor), giving
  // the block map's layout: blocksPerLayer[l] / rows blocks per row. Stored as the int64
  // attribute `rows` of /quant/blocks/<l>; 0 = not recorded (logs written before it).
  std::vector<int64_t> blockRowsPerLayer;
};

struct TrainRow {
  int64_t step = 0, tokens = 0;
  double wallSeconds = 0;
  float loss = NAN, lr = NAN, gradNorm = NAN, tokensPerSecond = NAN;
};

struct EvalRow {
  int64_t step = 0, tokens = 0;
  double wallSeconds = 0;
  std::vector<double> values;  // in evalColumns order; NaN = not measured at this step
};

// Who, if anyone, still has a log open for writing (read from the superblock's status flags).
enum class WriterState {
  Closed,   // no writer: finished, stopped cleanly, or never opened for writing since
  Live,     // a writer is running (or cannot be proven dead: other host, unknown pid)
  Crashed,  // the write flags are set but the writing process is gone
};

// Appends to one log. Not thread-safe: one writer per file, called by the training loop.
// Steps must not decrease within a table (resume relies on it). Rows become visible to readers at
// the next flush: automatically once a second during appends, and always at appendEval(),
// event() and close().
class RunLogWriter {
 public:
  // Declares every dataset, writes the root attributes, then starts SWMR writing. Throws if the
  // file exists (a log is never overwritten) or the schema is invalid. Writes no event: the
  // caller logs "start" with whatever it wants to say.
  static RunLogWriter create(const std::string& path, const RootAttributes& attributes,
                             const RunLogSchema& schema);
  // Reopens a closed or crashed log (a live writer makes it throw), drops the /train, /eval and
  // /quant rows with step > keepThroughStep, appends a "resume" event, then starts SWMR writing.
  static RunLogWriter resume(const std::string& path, int64_t keepThroughStep);

  RunLogWriter(RunLogWriter&&) noexcept;
  RunLogWriter& operator=(RunLogWriter&&) noexcept;
  RunLogWriter(const RunLogWriter&) = delete;
  RunLogWriter& operator=(const RunLogWriter&) = delete;
  ~RunLogWriter();  // closes; errors are swallowed (call close() to see them)

  void appendTrain(const TrainRow& row);
  void appendEval(const EvalRow& row);  // row.values.size() must equal evalColumns.size()
  // metricByLayer[m][l]: quantMetrics.size() vectors of quantLayers.size() values each.
  void appendQuant(int64_t step, const std::vector<std::vector<float>>& metricByLayer);
  // Per-block errors of one layer, written into the most recent /quant row, whose step must be
  // `step` (call appendQuant(step, ...) first). Layers not given stay NaN in that row.
  void appendBlocks(int64_t step, size_t layer, const std::vector<float>& perBlock);
  // One fixed-length line "<UTC time> <kind> <text>"; kind is [a-z0-9_]{1,16} (start, resume,
  // checkpoint, warning, end, ...); newlines become spaces, lines are cut at 255 bytes.
  void event(const std::string& kind, const std::string& text);
  void flush();
  void close();  // idempotent
  bool isOpen() const;
  const std::string& path() const;

 private:
  struct Impl;
  explicit RunLogWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

// Reads a log read-only with SWMR: live and finished logs take the same path. Row counts are
// those of the last refresh() (or of opening); reads are clamped to them. A reader and the
// writer of one file must live in different processes (HDF5 shares one open file per process).
// Every HDF5 call of this library takes one process-wide lock, so different readers may be used
// from different threads at once; one reader object is for one thread at a time.
class RunLogReader {
 public:
  explicit RunLogReader(const std::string& path);
  RunLogReader(RunLogReader&&) noexcept;
  RunLogReader& operator=(RunLogReader&&) noexcept;
  RunLogReader(const RunLogReader&) = delete;
  RunLogReader& operator=(const RunLogReader&) = delete;
  ~RunLogReader();

  // Re-reads every dataset's extent. True if any row count changed: normally it grew; it drops
  // only when a resume truncated the log under this reader (reopen then).
  bool refresh();

  RootAttributes attributes() const;
  RunLogSchema schema() const;
  // True when the file was opened with SWMR (false only for a log whose non-SWMR writer died).
  bool isSwmr() const;

  int64_t trainRows() const;
  int64_t evalRows() const;
  int64_t quantRows() const;  // rows complete in /quant/step and every /quant dataset
  int64_t eventRows() const;

  // Rows [fromRow, toRow), clamped to the current row count.
  std::vector<TrainRow> readTrain(int64_t fromRow, int64_t toRow) const;
  std::vector<EvalRow> readEval(int64_t fromRow, int64_t toRow) const;
  std::vector<int64_t> quantSteps(int64_t fromRow, int64_t toRow) const;
  // Row-major [rows, layers].
  std::vector<float> readQuant(const std::string& metric, int64_t fromRow, int64_t toRow) const;
  // Row-major [rows, blocksPerLayer[layer]]; NaN where no blocks were logged for a row.
  std::vector<float> readBlocks(size_t layer, int64_t fromRow, int64_t toRow) const;
  std::vector<std::string> events() const;

  // Plottable series: "train/loss", "train/lr", "train/grad_norm", "train/tok_per_s",
  // "eval/<column>", "quant/<metric>". The x axes (step, tokens, wall_s) are not listed.
  std::vector<std::string> listSeries() const;

  // Live, crashed or closed, from the superblock's write flags, the flock of a non-SWMR writer,
  // and the writer_pid/writer_host attributes of a SWMR writer. Throws for a missing or
  // non-HDF5 file. A zombie (exited, not yet reaped) writer still counts as Live.
  static WriterState writerState(const std::string& path);

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace fp4lab::log
