// RunLogReader: opens a log read-only (with SWMR when possible), checks its layout once, then
// reads rows clamped to the counts of the last refresh().
#include "fp4lab/log/run_log.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "hdf5_handles.h"
#include "log_layout.h"

namespace fp4lab::log {

using namespace detail;

struct RunLogReader::Impl {
  static const Impl& of(const std::unique_ptr<Impl>& impl);  // else an fp4lab::Error

  std::string path;
  Hid file;
  bool swmr = false;
  Layout layout;
  RootAttributes attributes;
  Hid trainMemory, evalMemory;
  int64_t trainRows = 0, evalRows = 0, quantRows = 0, eventRows = 0;

  void count() {
    trainRows = rowsOf(layout.train.get(), at(path, kTrain));
    evalRows = rowsOf(layout.eval.get(), at(path, kEval));
    eventRows = rowsOf(layout.events.get(), at(path, kEvents));
    quantRows = completeQuantRows(layout, path);
  }
};

RunLogReader::RunLogReader(const std::string& path) : m_impl(std::make_unique<Impl>()) {
  Hdf5Scope scope;
  Impl& d = *m_impl;
  try {
    d.path = path;
    d.file = openReadOnly(path, &d.swmr);
    d.attributes = readRootAttributes(d.file.get(), path);
    d.layout = openLayout(d.file.get(), path);
    d.trainMemory = trainType(false);
    d.evalMemory = evalType(d.layout.schema.evalColumns, false);
    d.count();
  } catch (...) {
    m_impl.reset();  // closes under the scope's lock
    throw;
  }
}

RunLogReader::RunLogReader(RunLogReader&&) noexcept = default;

RunLogReader& RunLogReader::operator=(RunLogReader&& other) noexcept {
  if (this != &other) {
    Hdf5Scope scope;
    m_impl = std::move(other.m_impl);
  }
  return *this;
}

RunLogReader::~RunLogReader() {
  Hdf5Scope scope;
  m_impl.reset();
}

const RunLogReader::Impl& RunLogReader::Impl::of(const std::unique_ptr<Impl>& impl) {
  if (!impl) fail("the run log reader was moved from", "(moved-from reader)");
  return *impl;
}

bool RunLogReader::refresh() {
  Hdf5Scope scope;
  Impl::of(m_impl);
  Impl& d = *m_impl;
  if (!d.swmr) return false;  // nobody writes a log opened without SWMR
  for (hid_t dataset : allDatasets(d.layout))
    check(H5Drefresh(dataset), "cannot refresh", d.path, "the file may be damaged");
  const int64_t before[4] = {d.trainRows, d.evalRows, d.quantRows, d.eventRows};
  d.count();
  const int64_t after[4] = {d.trainRows, d.evalRows, d.quantRows, d.eventRows};
  return !std::equal(std::begin(before), std::end(before), std::begin(after));
}

RootAttributes RunLogReader::attributes() const {
  return Impl::of(m_impl).attributes;
}
RunLogSchema RunLogReader::schema() const {
  return Impl::of(m_impl).layout.schema;
}
bool RunLogReader::isSwmr() const {
  return Impl::of(m_impl).swmr;
}
int64_t RunLogReader::trainRows() const {
  return Impl::of(m_impl).trainRows;
}
int64_t RunLogReader::evalRows() const {
  return Impl::of(m_impl).evalRows;
}
int64_t RunLogReader::quantRows() const {
  return Impl::of(m_impl).quantRows;
}
int64_t RunLogReader::eventRows() const {
  return Impl::of(m_impl).eventRows;
}

std::vector<TrainRow> RunLogReader::readTrain(int64_t fromRow, int64_t toRow) const {
  Hdf5Scope scope;
  const Impl& d = Impl::of(m_impl);
  const auto [first, count] = clampRange(fromRow, toRow, d.trainRows);
  std::vector<TrainRecord> records(count);
  readRows(d.layout.train.get(), first, count, 0, d.trainMemory.get(), records.data(),
           at(d.path, kTrain));
  std::vector<TrainRow> rows(count);
  for (size_t i = 0; i < count; ++i) {
    const TrainRecord& r = records[i];
    rows[i] = {r.step, r.tokens, r.wallSeconds, r.loss, r.lr, r.gradNorm, r.tokensPerSecond};
  }
  return rows;
}

std::vector<EvalRow> RunLogReader::readEval(int64_t fromRow, int64_t toRow) const {
  Hdf5Scope scope;
  const Impl& d = Impl::of(m_impl);
  const auto [first, count] = clampRange(fromRow, toRow, d.evalRows);
  const size_t columns = d.layout.schema.evalColumns.size();
  const size_t recordSize = evalRecordSize(columns);
  std::vector<unsigned char> buffer(count * recordSize);
  readRows(d.layout.eval.get(), first, count, 0, d.evalMemory.get(), buffer.data(),
           at(d.path, kEval));
  std::vector<EvalRow> rows(count);
  for (size_t i = 0; i < count; ++i) {
    const unsigned char* record = buffer.data() + i * recordSize;
    EvalRow& row = rows[i];
    std::memcpy(&row.step, record, 8);
    std::memcpy(&row.tokens, record + 8, 8);
    std::memcpy(&row.wallSeconds, record + 16, 8);
    row.values.resize(columns);
    if (columns) std::memcpy(row.values.data(), record + 24, 8 * columns);
  }
  return rows;
}

std::vector<int64_t> RunLogReader::quantSteps(int64_t fromRow, int64_t toRow) const {
  Hdf5Scope scope;
  const Impl& d = Impl::of(m_impl);
  const auto [first, count] = clampRange(fromRow, toRow, d.quantRows);
  std::vector<int64_t> steps(count);
  readRows(d.layout.quantStep.get(), first, count, 0, H5T_NATIVE_INT64, steps.data(),
           at(d.path, kQuantStep));
  return steps;
}

std::vector<float> RunLogReader::readQuant(const std::string& metric, int64_t fromRow,
                                           int64_t toRow) const {
  Hdf5Scope scope;
  const Impl& d = Impl::of(m_impl);
  const auto& metrics = d.layout.schema.quantMetrics;
  const auto found = std::find(metrics.begin(), metrics.end(), metric);
  const std::string where = at(d.path, std::string(kQuant) + "/" + metric);
  if (found == metrics.end()) {
    std::string known;
    for (const std::string& name : metrics) known += (known.empty() ? "" : ", ") + name;
    fail("no quant metric '" + metric + "'", where,
         known.empty() ? "this log has no quant metrics" : "the log has: " + known);
  }
  const auto [first, count] = clampRange(fromRow, toRow, d.quantRows);
  const hsize_t layers = d.layout.schema.quantLayers.size();
  std::vector<float> values(count * layers);
  readRows(d.layout.quantMetrics[static_cast<size_t>(found - metrics.begin())].get(), first, count,
           layers, H5T_NATIVE_FLOAT, values.data(), where);
  return values;
}

std::vector<float> RunLogReader::readBlocks(size_t layer, int64_t fromRow, int64_t toRow) const {
  Hdf5Scope scope;
  const Impl& d = Impl::of(m_impl);
  const std::string where = at(d.path, std::string(kQuantBlocks) + "/" + std::to_string(layer));
  if (layer >= d.layout.quantBlocks.size() || !d.layout.quantBlocks[layer].valid())
    fail("no per-block data for layer " + std::to_string(layer), where,
         "see schema().blocksPerLayer");
  const auto [first, count] = clampRange(fromRow, toRow, d.quantRows);
  const hsize_t blocks = static_cast<hsize_t>(d.layout.schema.blocksPerLayer[layer]);
  std::vector<float> values(count * blocks);
  readRows(d.layout.quantBlocks[layer].get(), first, count, blocks, H5T_NATIVE_FLOAT, values.data(),
           where);
  return values;
}

std::vector<std::string> RunLogReader::events() const {
  Hdf5Scope scope;
  const Impl& d = Impl::of(m_impl);
  return readFixedStrings(d.layout.events.get(), static_cast<hsize_t>(d.eventRows),
                          at(d.path, kEvents));
}

std::vector<std::string> RunLogReader::listSeries() const {
  const Impl& d = Impl::of(m_impl);
  std::vector<std::string> series = {"train/loss", "train/lr", "train/grad_norm",
                                     "train/tok_per_s"};
  for (const std::string& column : d.layout.schema.evalColumns) series.push_back("eval/" + column);
  for (const std::string& metric : d.layout.schema.quantMetrics)
    series.push_back("quant/" + metric);
  return series;
}

}  // namespace fp4lab::log
