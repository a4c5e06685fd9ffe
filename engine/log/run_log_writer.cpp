// RunLogWriter: create() declares every dataset then starts SWMR writing, resume() truncates past
// a checkpoint, and the appends go through Impl, which knows the row counts and the last steps.
#include "fp4lab/common/time.h"
#include "fp4lab/log/run_log.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "hdf5_handles.h"
#include "log_layout.h"

namespace fp4lab::log {

using namespace detail;

struct RunLogWriter::Impl {
  // The impl of a writer that is open, else an fp4lab::Error.
  static Impl& opened(const std::unique_ptr<Impl>& impl);

  std::string path;
  Hid file;
  Layout layout;
  Hid trainMemory, evalMemory, eventMemory;
  int64_t trainRows = 0, evalRows = 0, quantRows = 0, eventRows = 0;
  int64_t lastTrainStep = INT64_MIN, lastEvalStep = INT64_MIN, lastQuantStep = INT64_MIN;
  std::chrono::steady_clock::time_point lastFlush = std::chrono::steady_clock::now();

  // Opens the datasets of the (SWMR-writing) file and learns the row counts and last steps.
  void attach() {
    layout = openLayout(file.get(), path);
    trainMemory = trainType(false);
    evalMemory = evalType(layout.schema.evalColumns, false);
    eventMemory = fixedStringType(layout.eventBytes, H5T_STR_NULLTERM);
    trainRows = rowsOf(layout.train.get(), at(path, kTrain));
    evalRows = rowsOf(layout.eval.get(), at(path, kEval));
    eventRows = rowsOf(layout.events.get(), at(path, kEvents));
    quantRows = completeQuantRows(layout, path);
    lastTrainStep = lastStep(layout.train.get(), trainRows, true, kTrain);
    lastEvalStep = lastStep(layout.eval.get(), evalRows, true, kEval);
    lastQuantStep = lastStep(layout.quantStep.get(), quantRows, false, kQuantStep);
  }

  int64_t lastStep(hid_t dataset, int64_t rows, bool compound, const char* name) const {
    if (rows == 0) return INT64_MIN;
    int64_t step = 0;
    Hid type = compound ? stepOnlyType() : Hid();
    readRows(dataset, static_cast<hsize_t>(rows - 1), 1, 0,
             compound ? type.get() : H5T_NATIVE_INT64, &step, at(path, name));
    return step;
  }

  void checkStep(int64_t step, int64_t last, const char* table) const {
    if (step < last)
      fail("step " + std::to_string(step) + " comes after step " + std::to_string(last),
           at(path, table),
           "steps must not decrease; to go back to a checkpoint, resume() the log");
  }

  void flushNow() {
    check(H5Fflush(file.get(), H5F_SCOPE_LOCAL), "cannot flush the run log", path,
          "is the disk full?");
    lastFlush = std::chrono::steady_clock::now();
  }

  void flushIfDue() {
    const std::chrono::duration<double> since = std::chrono::steady_clock::now() - lastFlush;
    if (since.count() >= kFlushIntervalSeconds) flushNow();
  }

  void appendEvent(const std::string& kind, const std::string& text) {
    if (!validKind(kind))
      fail("invalid event kind '" + kind + "'", at(path, kEvents),
           "use [a-z0-9_]{1,16}: start, resume, checkpoint, warning, end");
    std::vector<char> record(layout.eventBytes, '\0');
    const std::string line = eventLine(kind, text, layout.eventBytes - 1);
    std::memcpy(record.data(), line.data(), line.size());
    appendRows(layout.events.get(), static_cast<hsize_t>(eventRows), 1, 0, eventMemory.get(),
               record.data(), at(path, kEvents));
    ++eventRows;
  }
};

namespace {

// Declares everything schema 1 holds, before SWMR writing starts.
void declareLog(hid_t file, const RootAttributes& attributes, const RunLogSchema& schema,
                const std::string& path) {
  writeInt64Attribute(file, "schema_version", kSchemaVersion, path);
  writeStringAttribute(file, "run_id", attributes.runId, path);
  writeStringAttribute(file, "recipe", attributes.recipe, path);
  writeStringAttribute(file, "format", attributes.format, path);
  writeStringAttribute(file, "created_utc",
                       attributes.createdUtc.empty() ? utcTimestamp(false) : attributes.createdUtc,
                       path);
  writeStringAttribute(file, "config_yaml", attributes.configYaml, path);
  writeWriterIdentity(file, path);

  const float nan = std::numeric_limits<float>::quiet_NaN();
  const double nanD = std::numeric_limits<double>::quiet_NaN();
  // Fill values mark rows a reader might see before their data (step -1, NaN): never a fake 0.
  {
    Hid fileType = trainType(true);
    Hid memory = trainType(false);
    const TrainRecord fill{-1, -1, nanD, nan, nan, nan, nan};
    createTable(file, kTrain, fileType.get(), 0, chunkRows(sizeof(TrainRecord), 256), 0,
                memory.get(), &fill, path);
  }
  {
    const size_t columns = schema.evalColumns.size();
    Hid fileType = evalType(schema.evalColumns, true);
    Hid memory = evalType(schema.evalColumns, false);
    std::vector<unsigned char> fill(evalRecordSize(columns));
    const int64_t minusOne = -1;
    std::memcpy(fill.data(), &minusOne, 8);
    std::memcpy(fill.data() + 8, &minusOne, 8);
    for (size_t i = 0; i < columns + 1; ++i) std::memcpy(fill.data() + 16 + 8 * i, &nanD, 8);
    createTable(file, kEval, fileType.get(), 0, chunkRows(fill.size(), 64), 0, memory.get(),
                fill.data(), path);
  }
  {
    Hid type = fixedStringType(kEventBytes, H5T_STR_NULLTERM);
    createTable(file, kEvents, type.get(), 0, chunkRows(kEventBytes, 64), 0, -1, nullptr, path);
  }

  // /quant tracks creation order so the metrics come back in schema order.
  Hid groupCreate = own(H5Pcreate(H5P_GROUP_CREATE), H5Pclose, "H5Pcreate", path);
  check(
      H5Pset_link_creation_order(groupCreate.get(), H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED),
      "H5Pset_link_creation_order", path);
  Hid quant = own(H5Gcreate2(file, kQuant, H5P_DEFAULT, groupCreate.get(), H5P_DEFAULT), H5Gclose,
                  "cannot create group", at(path, kQuant));
  {
    const auto& layers = schema.quantLayers;
    size_t longest = 1;
    for (const std::string& name : layers) longest = std::max(longest, name.size());
    Hid type = fixedStringType(longest, H5T_STR_NULLPAD);
    const hsize_t dims[1] = {layers.size()};
    Hid space = own(H5Screate_simple(1, dims, nullptr), H5Sclose, "H5Screate_simple", path);
    Hid dataset = own(H5Dcreate2(file, kQuantLayers, type.get(), space.get(), H5P_DEFAULT,
                                 H5P_DEFAULT, H5P_DEFAULT),
                      H5Dclose, "cannot create the dataset", at(path, kQuantLayers));
    if (!layers.empty()) {
      std::vector<char> buffer(layers.size() * longest, '\0');
      for (size_t i = 0; i < layers.size(); ++i)
        std::memcpy(buffer.data() + i * longest, layers[i].data(), layers[i].size());
      check(H5Dwrite(dataset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buffer.data()),
            "cannot write the layer names", at(path, kQuantLayers));
    }
  }
  const int64_t minusOne = -1;
  createTable(file, kQuantStep, H5T_STD_I64LE, 0, 64, 0, H5T_NATIVE_INT64, &minusOne, path);
  const hsize_t layerCount = schema.quantLayers.size();
  for (const std::string& metric : schema.quantMetrics) {
    const std::string name = std::string(kQuant) + "/" + metric;
    createTable(file, name.c_str(), H5T_IEEE_F32LE, layerCount, chunkRows(4 * layerCount, 64),
                layerCount, H5T_NATIVE_FLOAT, &nan, path);
  }
  if (!schema.blocksPerLayer.empty()) {
    Hid blocks = own(H5Gcreate2(file, kQuantBlocks, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                     H5Gclose, "cannot create group", at(path, kQuantBlocks));
    for (size_t layer = 0; layer < schema.blocksPerLayer.size(); ++layer) {
      const hsize_t columns = static_cast<hsize_t>(schema.blocksPerLayer[layer]);
      if (columns == 0) continue;
      const std::string name = std::string(kQuantBlocks) + "/" + std::to_string(layer);
      const hsize_t chunkColumns = std::min(columns, kMaxBlockChunkColumns);
      createTable(file, name.c_str(), H5T_IEEE_F32LE, columns, chunkRows(4 * chunkColumns, 64),
                  chunkColumns, H5T_NATIVE_FLOAT, &nan, path);
      Hid dataset = own(H5Dopen2(file, name.c_str(), H5P_DEFAULT), H5Dclose, "cannot open dataset",
                        at(path, name));
      writeStringAttribute(dataset.get(), "layer", schema.quantLayers[layer], at(path, name));
      if (layer < schema.blockRowsPerLayer.size() && schema.blockRowsPerLayer[layer] > 0)
        writeInt64Attribute(dataset.get(), "rows", schema.blockRowsPerLayer[layer], at(path, name));
    }
  }
}

}  // namespace

RunLogWriter::RunLogWriter(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
RunLogWriter::RunLogWriter(RunLogWriter&&) noexcept = default;

RunLogWriter& RunLogWriter::operator=(RunLogWriter&& other) noexcept {
  if (this != &other) {
    try {
      close();
    } catch (...) {
      // A failed close of the old log must not stop the move; close() explicitly to see it.
    }
    Hdf5Scope scope;
    m_impl = std::move(other.m_impl);
  }
  return *this;
}

RunLogWriter::~RunLogWriter() {
  try {
    close();
  } catch (...) {
    // Destructors must not throw; call close() to learn about a failed final flush.
  }
  Hdf5Scope scope;
  m_impl.reset();
}

RunLogWriter RunLogWriter::create(const std::string& path, const RootAttributes& attributes,
                                  const RunLogSchema& schema) {
  Hdf5Scope scope;
  validate(attributes, schema, path);
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0)
    fail("the run log already exists", path,
         "a log is never overwritten: use a new run folder, or resume this log");

  auto impl = std::make_unique<Impl>();
  impl->path = path;
  {
    Hid access = fileAccess(false, path);
    impl->file =
        own(H5Fcreate(path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, access.get()), H5Fclose,
            "cannot create the run log", path, "does the folder exist and is it writable?");
  }
  try {
    declareLog(impl->file.get(), attributes, schema, path);
    check(H5Fstart_swmr_write(impl->file.get()), "cannot start SWMR writing", path);
    impl->attach();
    impl->flushNow();
  } catch (...) {
    // Never leave a half-declared log behind: the next create() would refuse the path.
    impl.reset();
    std::remove(path.c_str());
    throw;
  }
  return RunLogWriter(std::move(impl));
}

RunLogWriter RunLogWriter::resume(const std::string& path, int64_t keepThroughStep) {
  Hdf5Scope scope;
  const WriterState state = RunLogReader::writerState(path);
  if (state == WriterState::Live)
    fail("another process is still writing the run log", path,
         "stop that run first; only closed or crashed logs can be resumed");

  auto impl = std::make_unique<Impl>();
  impl->path = path;
  {
    // Clearing the status flags is what lets a crashed writer's log be opened for writing.
    Hid access = fileAccess(state == WriterState::Crashed, path);
    impl->file = own(H5Fopen(path.c_str(), H5F_ACC_RDWR, access.get()), H5Fclose,
                     "cannot open the run log for writing", path,
                     "is another process writing it, or is the file read-only?");
  }
  const hid_t file = impl->file.get();
  readRootAttributes(file, path);  // refuses files that are not run logs before changing them
  Layout layout = openLayout(file, path);
  // First change: should this process die while truncating, the log names it as the writer.
  writeWriterIdentity(file, path);

  // Rows past the checkpoint go, so curves never show a step twice. Steps never decrease within
  // a table, so the kept rows are a prefix and truncation is a shrink of the extent.
  auto keptRows = [&](hid_t dataset, int64_t rows, bool compound, const char* name) {
    std::vector<int64_t> steps(static_cast<size_t>(rows));
    Hid type = compound ? stepOnlyType() : Hid();
    readRows(dataset, 0, static_cast<hsize_t>(rows), 0, compound ? type.get() : H5T_NATIVE_INT64,
             steps.data(), at(path, name));
    return static_cast<int64_t>(
        std::find_if(steps.begin(), steps.end(), [&](int64_t s) { return s > keepThroughStep; }) -
        steps.begin());
  };
  const int64_t trainRows = rowsOf(layout.train.get(), at(path, kTrain));
  const int64_t evalRows = rowsOf(layout.eval.get(), at(path, kEval));
  const int64_t quantRows = rowsOf(layout.quantStep.get(), at(path, kQuantStep));
  const int64_t keepTrain = keptRows(layout.train.get(), trainRows, true, kTrain);
  const int64_t keepEval = keptRows(layout.eval.get(), evalRows, true, kEval);
  // A crash halfway through appendQuant leaves some /quant datasets a row short: cut to the
  // rows complete everywhere.
  const int64_t keepQuant = std::min(keptRows(layout.quantStep.get(), quantRows, false, kQuantStep),
                                     completeQuantRows(layout, path));

  setRows(layout.train.get(), static_cast<hsize_t>(keepTrain), 0, at(path, kTrain));
  setRows(layout.eval.get(), static_cast<hsize_t>(keepEval), 0, at(path, kEval));
  setRows(layout.quantStep.get(), static_cast<hsize_t>(keepQuant), 0, at(path, kQuantStep));
  for (size_t m = 0; m < layout.quantMetrics.size(); ++m)
    setRows(layout.quantMetrics[m].get(), static_cast<hsize_t>(keepQuant),
            layout.schema.quantLayers.size(), at(path, kQuant));
  for (size_t l = 0; l < layout.quantBlocks.size(); ++l)
    if (layout.quantBlocks[l].valid())
      setRows(layout.quantBlocks[l].get(), static_cast<hsize_t>(keepQuant),
              static_cast<hsize_t>(layout.schema.blocksPerLayer[l]), at(path, kQuantBlocks));
  layout = Layout();

  impl->attach();
  impl->appendEvent("resume",
                    "kept steps <= " + std::to_string(keepThroughStep) + ", dropped " +
                        std::to_string(trainRows - keepTrain) + " train, " +
                        std::to_string(evalRows - keepEval) + " eval, " +
                        std::to_string(quantRows - keepQuant) + " quant rows" +
                        (state == WriterState::Crashed ? " (previous writer crashed)" : ""));
  check(H5Fstart_swmr_write(file), "cannot start SWMR writing", path);
  impl->flushNow();
  return RunLogWriter(std::move(impl));
}

RunLogWriter::Impl& RunLogWriter::Impl::opened(const std::unique_ptr<Impl>& impl) {
  if (!impl || !impl->file.valid())
    fail("the run log writer is closed", impl ? impl->path : std::string("(moved-from writer)"),
         "append before close()");
  return *impl;
}

void RunLogWriter::appendTrain(const TrainRow& row) {
  Hdf5Scope scope;
  Impl& d = Impl::opened(m_impl);
  d.checkStep(row.step, d.lastTrainStep, kTrain);
  const TrainRecord record{row.step, row.tokens,   row.wallSeconds,    row.loss,
                           row.lr,   row.gradNorm, row.tokensPerSecond};
  appendRows(d.layout.train.get(), static_cast<hsize_t>(d.trainRows), 1, 0, d.trainMemory.get(),
             &record, at(d.path, kTrain));
  ++d.trainRows;
  d.lastTrainStep = row.step;
  d.flushIfDue();
}

void RunLogWriter::appendEval(const EvalRow& row) {
  Hdf5Scope scope;
  Impl& d = Impl::opened(m_impl);
  const size_t columns = d.layout.schema.evalColumns.size();
  if (row.values.size() != columns)
    fail("eval row has " + std::to_string(row.values.size()) + " values for " +
             std::to_string(columns) + " columns",
         at(d.path, kEval), "give one value per eval column, NaN where not measured");
  d.checkStep(row.step, d.lastEvalStep, kEval);
  std::vector<unsigned char> record(evalRecordSize(columns));
  std::memcpy(record.data(), &row.step, 8);
  std::memcpy(record.data() + 8, &row.tokens, 8);
  std::memcpy(record.data() + 16, &row.wallSeconds, 8);
  if (columns) std::memcpy(record.data() + 24, row.values.data(), 8 * columns);
  appendRows(d.layout.eval.get(), static_cast<hsize_t>(d.evalRows), 1, 0, d.evalMemory.get(),
             record.data(), at(d.path, kEval));
  ++d.evalRows;
  d.lastEvalStep = row.step;
  d.flushNow();  // evals are rare and the GUI waits for them
}

void RunLogWriter::appendQuant(int64_t step, const std::vector<std::vector<float>>& metricByLayer) {
  Hdf5Scope scope;
  Impl& d = Impl::opened(m_impl);
  const RunLogSchema& schema = d.layout.schema;
  const size_t layers = schema.quantLayers.size();
  if (metricByLayer.size() != schema.quantMetrics.size())
    fail("got " + std::to_string(metricByLayer.size()) + " metrics, the log has " +
             std::to_string(schema.quantMetrics.size()),
         at(d.path, kQuant), "pass metricByLayer[metric][layer] in quantMetrics order");
  for (size_t m = 0; m < metricByLayer.size(); ++m)
    if (metricByLayer[m].size() != layers)
      fail("metric " + schema.quantMetrics[m] + " has " + std::to_string(metricByLayer[m].size()) +
               " values for " + std::to_string(layers) + " layers",
           at(d.path, kQuant), "one value per quantized layer, NaN where not measured");
  d.checkStep(step, d.lastQuantStep, kQuantStep);

  const hsize_t row = static_cast<hsize_t>(d.quantRows);
  appendRows(d.layout.quantStep.get(), row, 1, 0, H5T_NATIVE_INT64, &step, at(d.path, kQuantStep));
  for (size_t m = 0; m < metricByLayer.size(); ++m)
    appendRows(d.layout.quantMetrics[m].get(), row, 1, layers, H5T_NATIVE_FLOAT,
               metricByLayer[m].data(),
               at(d.path, std::string(kQuant) + "/" + schema.quantMetrics[m]));
  // Block rows follow /quant/step; they stay NaN (the fill value) until appendBlocks.
  for (size_t l = 0; l < d.layout.quantBlocks.size(); ++l)
    if (d.layout.quantBlocks[l].valid())
      setRows(d.layout.quantBlocks[l].get(), row + 1,
              static_cast<hsize_t>(schema.blocksPerLayer[l]), at(d.path, kQuantBlocks));
  ++d.quantRows;
  d.lastQuantStep = step;
  d.flushIfDue();
}

void RunLogWriter::appendBlocks(int64_t step, size_t layer, const std::vector<float>& perBlock) {
  Hdf5Scope scope;
  Impl& d = Impl::opened(m_impl);
  const RunLogSchema& schema = d.layout.schema;
  const std::string where = at(d.path, std::string(kQuantBlocks) + "/" + std::to_string(layer));
  if (schema.blocksPerLayer.empty())
    fail("the log has no per-block data", where, "declare blocksPerLayer at create()");
  if (layer >= schema.quantLayers.size())
    fail("layer " + std::to_string(layer) + " is out of range (" +
             std::to_string(schema.quantLayers.size()) + " layers)",
         where);
  if (!d.layout.quantBlocks[layer].valid())
    fail("layer " + schema.quantLayers[layer] + " was declared with 0 blocks", where);
  const size_t blocks = static_cast<size_t>(schema.blocksPerLayer[layer]);
  if (perBlock.size() != blocks)
    fail("got " + std::to_string(perBlock.size()) + " values for " + std::to_string(blocks) +
             " blocks of layer " + schema.quantLayers[layer],
         where);
  if (d.quantRows == 0 || step != d.lastQuantStep)
    fail("no /quant row for step " + std::to_string(step), where,
         "call appendQuant(step, ...) first; blocks go into the most recent quant row");
  writeRows(d.layout.quantBlocks[layer].get(), static_cast<hsize_t>(d.quantRows - 1), 1, blocks,
            H5T_NATIVE_FLOAT, perBlock.data(), where);
  d.flushIfDue();
}

void RunLogWriter::event(const std::string& kind, const std::string& text) {
  Hdf5Scope scope;
  Impl& d = Impl::opened(m_impl);
  d.appendEvent(kind, text);
  d.flushNow();
}

void RunLogWriter::flush() {
  Hdf5Scope scope;
  Impl::opened(m_impl).flushNow();
}

void RunLogWriter::close() {
  Hdf5Scope scope;
  if (!m_impl || !m_impl->file.valid()) return;
  Impl& d = *m_impl;
  // Close everything even when the flush fails, then report the first failure.
  std::string problem;
  if (H5Fflush(d.file.get(), H5F_SCOPE_LOCAL) < 0) problem = "cannot flush the run log";
  hdf5Detail();
  d.layout = Layout();
  d.trainMemory.reset();
  d.evalMemory.reset();
  d.eventMemory.reset();
  if (d.file.reset() < 0 && problem.empty()) problem = "cannot close the run log";
  if (!problem.empty()) failH5(problem, d.path, "is the disk full?");
}

bool RunLogWriter::isOpen() const {
  return m_impl && m_impl->file.valid();
}

const std::string& RunLogWriter::path() const {
  static const std::string none;
  return m_impl ? m_impl->path : none;
}

}  // namespace fp4lab::log
