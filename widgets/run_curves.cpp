// RunCurves and RunLogFollower: a run's log read incrementally into plain vectors.
#include "fp4lab/widgets/run_curves.h"

#include <algorithm>
#include <cmath>
#include <iterator>

namespace fp4lab::widgets {

namespace {

void addIfFinite(Points& points, double x, double y) {
  if (std::isfinite(x) && std::isfinite(y)) points.emplace_back(x, y);
}

}  // namespace

namespace {

template <typename Row>
double xOf(const Row& row, XAxis x) {
  switch (x) {
    case XAxis::Tokens:
      return double(row.tokens);
    case XAxis::WallSeconds:
      return row.wallSeconds;
    case XAxis::Step:
      break;
  }
  return double(row.step);
}

}  // namespace

Points RunCurves::series(const std::string& name, XAxis x) const {
  Points points;
  const std::string trainPrefix = "train/", evalPrefix = "eval/";
  if (name.compare(0, trainPrefix.size(), trainPrefix) == 0) {
    std::string field = name.substr(trainPrefix.size());
    // QAD's training loss is its KL to the teacher (plus recipe.ce_weight x cross-entropy), not
    // a cross-entropy: the charts plot the two apart, never on one axis.
    if (field == "ce_loss" || field == "distill_loss") {
      if ((recipe == "qad") != (field == "distill_loss")) return points;
      field = "loss";
    }
    float log::TrainRow::*member = nullptr;
    if (field == "loss") member = &log::TrainRow::loss;
    if (field == "lr") member = &log::TrainRow::lr;
    if (field == "grad_norm") member = &log::TrainRow::gradNorm;
    if (field == "tok_per_s") member = &log::TrainRow::tokensPerSecond;
    if (!member) return points;
    points.reserve(train.size());
    for (const auto& row : train) addIfFinite(points, xOf(row, x), double(row.*member));
  } else if (name.compare(0, evalPrefix.size(), evalPrefix) == 0) {
    const std::string column = name.substr(evalPrefix.size());
    for (size_t c = 0; c < evalColumns.size(); ++c) {
      if (evalColumns[c] != column) continue;
      points.reserve(eval.size());
      for (const auto& row : eval)
        if (c < row.values.size()) addIfFinite(points, xOf(row, x), row.values[c]);
    }
  }
  return points;
}

int64_t RunCurves::lastTrainStep() const {
  int64_t last = 0;
  for (const auto& row : train) last = std::max(last, row.step);
  return last;
}

std::vector<float> RunCurves::lastQuantRow(const std::string& metric) const {
  const auto it = quant.find(metric);
  const size_t layers = quantLayers.size();
  if (it == quant.end() || layers == 0 || it->second.size() < layers) return {};
  return std::vector<float>(it->second.end() - static_cast<std::ptrdiff_t>(layers),
                            it->second.end());
}

RunLogFollower::RunLogFollower(std::string runName, std::string logPath)
    : m_path(std::move(logPath)), m_reader(m_path) {
  m_curves.name = std::move(runName);
  readHeader();
  readNewRows();
}

bool RunLogFollower::poll() {
  if (!m_reader.refresh()) return false;
  const bool shrank = m_reader.trainRows() < int64_t(m_curves.train.size()) ||
                      m_reader.evalRows() < int64_t(m_curves.eval.size()) ||
                      m_reader.quantRows() < int64_t(m_curves.quantSteps.size());
  if (shrank) {
    m_reader = log::RunLogReader(m_path);
    RunCurves fresh;
    fresh.name = m_curves.name;
    m_curves = std::move(fresh);
    readHeader();
  }
  const auto rows = [&] {
    return m_curves.train.size() + m_curves.eval.size() + m_curves.quantSteps.size() +
           m_curves.events.size();
  };
  const size_t before = rows();
  readNewRows();
  return shrank || rows() != before;
}

void RunLogFollower::readHeader() {
  const log::RootAttributes attributes = m_reader.attributes();
  const log::RunLogSchema schema = m_reader.schema();
  m_curves.recipe = attributes.recipe;
  m_curves.format = attributes.format;
  m_curves.createdUtc = attributes.createdUtc;
  m_curves.evalColumns = schema.evalColumns;
  m_curves.quantLayers = schema.quantLayers;
  m_curves.quantMetrics = schema.quantMetrics;
}

void RunLogFollower::readNewRows() {
  const auto appendAll = [](auto& to, auto&& from) {
    to.insert(to.end(), std::make_move_iterator(from.begin()), std::make_move_iterator(from.end()));
  };
  appendAll(m_curves.train,
            m_reader.readTrain(int64_t(m_curves.train.size()), m_reader.trainRows()));
  appendAll(m_curves.eval, m_reader.readEval(int64_t(m_curves.eval.size()), m_reader.evalRows()));
  const int64_t quantFrom = int64_t(m_curves.quantSteps.size()), quantTo = m_reader.quantRows();
  if (quantTo > quantFrom) {
    for (const auto& metric : m_curves.quantMetrics)
      appendAll(m_curves.quant[metric], m_reader.readQuant(metric, quantFrom, quantTo));
    appendAll(m_curves.quantSteps, m_reader.quantSteps(quantFrom, quantTo));
  }
  if (m_reader.eventRows() != int64_t(m_curves.events.size())) m_curves.events = m_reader.events();
}

RunCurves readRunCurves(const std::string& runName, const std::string& logPath) {
  return RunLogFollower(runName, logPath).curves();
}

}  // namespace fp4lab::widgets
