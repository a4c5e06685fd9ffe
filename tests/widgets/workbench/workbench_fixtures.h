// Shared by the workbench tests: synthetic run folders written with the project's own log
// writer, a Qt message handler that turns model-tester warnings into failures, and waiting on
// the event loop.
#pragma once

#include <QAbstractItemModelTester>
#include <QCoreApplication>
#include <QElapsedTimer>
#include <QTest>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "../../engine/temp_dir.h"
#include "fp4lab/common/files.h"
#include "fp4lab/log/run_log.h"
#include "fp4lab/run/run_config.h"
#include "fp4lab/run/run_folder.h"

namespace fp4lab::testing {

// Runs the event loop until `done()` or `ms` pass; returns done().
inline bool waitFor(const std::function<bool()>& done, int ms = 5000) {
  QElapsedTimer t;
  t.start();
  while (!done() && t.elapsed() < ms) QTest::qWait(20);
  return done();
}

// A run folder with run.yaml (from overrides), status.json and a log of `steps` training rows
// and an eval every `evalEvery` steps (val_loss = 2 / sqrt(step)).
struct SyntheticRun {
  std::string dir;
  std::vector<std::string> overrides;
  int steps = 20, evalEvery = 5;
  RunState state = RunState::Finished;
  // /quant: these layers (none: a log without per-layer data), one row of quantMetrics at every
  // evaluation, quantValue(metric, layer, step) each (default: sqnr_db 20 + layer - step / 10,
  // others (layer + 1) / 100 + step / 1000). blocks > 0: /quant/blocks with that many blocks per
  // layer, blockValue(layer, block, step) each (default: 1e-4 * (block + 1)), written at each
  // row for the layers blockLayers names (empty: all).
  std::vector<std::string> quantLayers{};
  std::vector<std::string> quantMetrics = {"sqnr_db", "rel_l2", "mse"};
  std::function<float(const std::string&, size_t, int)> quantValue{};
  int64_t blocks = 0;
  int64_t blockRows = 0;  // > 0: recorded as the weights' row count (blockRowsPerLayer)
  std::function<float(size_t, int64_t, int)> blockValue{};
  std::vector<size_t> blockLayers{};
};

inline void writeRun(const SyntheticRun& r) {
  files::createDirectories(r.dir);
  run::RunConfig c = run::RunConfig::fromYamlText("", r.overrides);
  c.name = files::baseName(r.dir);
  files::writeFileAtomically(files::join(r.dir, "run.yaml"), c.toYaml());
  run::writeRunStatus(r.dir, r.state, r.steps, r.steps);
  log::RootAttributes attributes;
  attributes.runId = c.name;
  attributes.recipe = c.recipe;
  attributes.format = c.quantFormat;
  log::RunLogSchema schema;
  schema.evalColumns = {"val_loss", "val_kl", "pass_rate_arith"};
  if (!r.quantLayers.empty()) {
    schema.quantLayers = r.quantLayers;
    schema.quantMetrics = r.quantMetrics;
    if (r.blocks > 0) schema.blocksPerLayer.assign(r.quantLayers.size(), r.blocks);
    if (r.blocks > 0 && r.blockRows > 0)
      schema.blockRowsPerLayer.assign(r.quantLayers.size(), r.blockRows);
  }
  auto w = log::RunLogWriter::create(files::join(r.dir, "log.h5"), attributes, schema);
  for (int step = 1; step <= r.steps; ++step) {
    log::TrainRow row;
    row.step = step;
    row.tokens = 100 * step;
    row.wallSeconds = 0.5 * step;
    row.loss = float(3.0 / std::sqrt(double(step)));
    row.lr = 1e-3f;
    row.gradNorm = 1.0f;
    row.tokensPerSecond = 200.0f;
    w.appendTrain(row);
    if (step % r.evalEvery == 0) {
      log::EvalRow e;
      e.step = step;
      e.tokens = row.tokens;
      e.wallSeconds = row.wallSeconds;
      e.values = {2.0 / std::sqrt(double(step)), NAN, 0.5};
      w.appendEval(e);
      if (!r.quantLayers.empty()) {
        std::vector<std::vector<float>> metricByLayer;
        for (const auto& m : r.quantMetrics) {
          std::vector<float> v;
          for (size_t l = 0; l < r.quantLayers.size(); ++l)
            v.push_back(r.quantValue     ? r.quantValue(m, l, step)
                        : m == "sqnr_db" ? float(20.0 + double(l) - step / 10.0)
                                         : float((l + 1) / 100.0 + step / 1000.0));
          metricByLayer.push_back(v);
        }
        w.appendQuant(step, metricByLayer);
        for (size_t l = 0; r.blocks > 0 && l < r.quantLayers.size(); ++l) {
          if (!r.blockLayers.empty() &&
              std::find(r.blockLayers.begin(), r.blockLayers.end(), l) == r.blockLayers.end())
            continue;
          std::vector<float> perBlock;
          for (int64_t b = 0; b < r.blocks; ++b)
            perBlock.push_back(r.blockValue ? r.blockValue(l, b, step) : float(1e-4 * (b + 1)));
          w.appendBlocks(step, l, perBlock);
        }
      }
    }
  }
  w.event("end", "finished");
  w.close();
}

// Fails the running test on any warning Qt prints while installed (QAbstractItemModelTester
// reports broken model contracts as warnings in its Warning mode).
struct FailOnQtWarnings {
  static inline std::vector<std::string>* messages = nullptr;
  std::vector<std::string> seen;
  QtMessageHandler previous;
  FailOnQtWarnings() {
    messages = &seen;
    previous = qInstallMessageHandler([](QtMsgType type, const QMessageLogContext& context,
                                         const QString& m) {
      const bool modelTest = context.category && std::string(context.category) == "qt.modeltest";
      if (type != QtDebugMsg && type != QtInfoMsg &&
          (modelTest || m.contains(QLatin1String("FAIL"))))
        messages->push_back(m.toStdString());
    });
  }
  ~FailOnQtWarnings() {
    qInstallMessageHandler(previous);
    messages = nullptr;
  }
};

}  // namespace fp4lab::testing
