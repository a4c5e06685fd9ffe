// Shared by the workbench tests: synthetic run folders written with the project's own log
// writer, a Qt message handler that turns model-tester warnings into failures, and waiting on
// the event loop.
#pragma once

#include <QAbstractItemModelTester>
#include <QCoreApplication>
#include <QElapsedTimer>
#include <QTest>

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
