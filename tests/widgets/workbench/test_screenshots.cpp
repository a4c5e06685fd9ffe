// Renders each view of the workbench with real runs into PNG files: the README's and the user
// guide's pictures (tests/gui/render-screenshots.sh runs it under Xvfb on the quick experiment's
// runs), the quantization inspector's views included. Hidden ([.screenshots]): it needs
// FP4LAB_SCREENSHOT_RUNS and FP4LAB_SCREENSHOT_OUT.
#include <catch2/catch.hpp>

#include <QDockWidget>
#include <QSettings>
#include <QSignalSpy>
#include <QTabWidget>
#include <QTimer>

#include <cstdlib>

#include "fp4lab/widgets/charts_page.h"
#include "fp4lab/widgets/compare_view.h"
#include "fp4lab/widgets/curve_panel.h"
#include "fp4lab/widgets/main_window.h"
#include "fp4lab/widgets/new_run_dialog.h"
#include "fp4lab/widgets/quant_inspector.h"
#include "fp4lab/widgets/heatmap_widget.h"
#include "fp4lab/analyze/analyze.h"
#include "fp4lab/widgets/run_table_model.h"
#include "workbench_fixtures.h"

using namespace fp4lab;
using namespace fp4lab::widgets;

namespace {

void save(QWidget& w, const QString& path) {
  QTest::qWait(300);  // frames coalesce at 33 ms; let every panel draw
  for (CurvePanel* p : w.findChildren<CurvePanel*>())
    if (p->isVisible()) p->redrawNow();
  QTest::qWait(100);
  REQUIRE(w.grab().save(path));
}

std::string idOf(MainWindow& w, const std::string& name) {
  for (const auto& r : w.runsModel()->snapshots())
    if (r.name == name) return r.id;
  return {};
}

}  // namespace

TEST_CASE("screenshots of every view", "[.screenshots]") {
  const char* runs = std::getenv("FP4LAB_SCREENSHOT_RUNS");
  const char* out = std::getenv("FP4LAB_SCREENSHOT_OUT");
  REQUIRE(runs);
  REQUIRE(out);
  const QString dir = QString::fromUtf8(out);
  QSettings().clear();  // the default layout, not what an earlier render left
  WorkbenchOptions options;
  options.roots = {QString::fromUtf8(runs)};
  options.program = QStringLiteral("/bin/false");
  MainWindow w(options);
  w.resize(1600, 1000);
  w.show();
  REQUIRE(QTest::qWaitForWindowExposed(&w));
  REQUIRE(testing::waitFor([&] { return w.runsModel()->rowCount() >= 5; }, 30000));
  testing::waitFor(
      [&] {
        for (const auto& r : w.runsModel()->snapshots())
          if (!r.curves) return false;
        return true;
      },
      30000);
  // Curves of the runs from the SFT model; the selected run drawn thicker.
  for (const auto& r : w.runsModel()->snapshots())
    if (r.name.find("from-base") != std::string::npos || r.name.find("seed") != std::string::npos)
      w.runsModel()->setChecked(r.id, false);
  w.selectRun(idOf(w, "qad-nvfp4"));
  save(w, dir + QStringLiteral("/main-window.png"));

  const std::string a = idOf(w, "qat-mxfp4"), b = idOf(w, "qat-nvfp4");
  if (!a.empty() && !b.empty()) {
    w.compare()->setPair(a, b);
    w.showView(w.compare());
    save(w, dir + QStringLiteral("/compare.png"));
  }
  // The quantization inspector: run view (one run, then A − B), layer view, model view on an
  // analysis of the SFT model made with the analyze library.
  if (!a.empty() && !b.empty()) {
    QuantInspector* inspector = w.inspector();
    w.showView(inspector);
    w.selectRun(a);
    inspector->setRunB({});
    inspector->setMetric("sqnr_db");
    inspector->showView(0);
    save(w, dir + QStringLiteral("/inspector-run.png"));
    inspector->setRunB(b);
    save(w, dir + QStringLiteral("/inspector-difference.png"));
    inspector->setRunB({});
    QSignalSpy blocks(inspector, &QuantInspector::layerBlocksLoaded);
    const int worst = inspector->worstLayers()->layerOf(0);
    inspector->showLayer(worst < 0 ? 0 : worst);
    testing::waitFor([&] { return blocks.count() > 0; }, 10000);
    // The same layer of QAT in NVFP4 beside QAT in MXFP4, on one colour scale.
    inspector->setRunB(b);
    testing::waitFor([&] { return blocks.count() > 1; }, 10000);
    save(w, dir + QStringLiteral("/inspector-layer.png"));
    w.resize(1000, 650);
    save(w, dir + QStringLiteral("/inspector-layer-small.png"));
    w.resize(1600, 1000);
    inspector->setRunB({});
    const std::string model = std::string(runs) + "/sft/model";
    if (files::isRegularFile(files::join(model, "model.safetensors"))) {
      testing::TempDir tmp;
      analyze::Options o;
      o.modelDir = model;
      const std::string file = tmp.file("sft-analysis.h5");
      analyze::writeAnalysisFile(analyze::analyzeModel(o), file);
      QSignalSpy loaded(inspector, &QuantInspector::analysisLoaded);
      inspector->openAnalysis(QString::fromStdString(file));
      REQUIRE(testing::waitFor([&] { return loaded.count() > 0; }, 30000));
      // The last layer in NVFP4 (column 2), then MXFP4 beside it, in the order a user picks them
      // (a block map shown after the first one is laid out).
      inspector->showView(2);
      inspector->modelHeatmap()->cellActivated(inspector->modelHeatmap()->rows() - 1, 2);
      QTest::qWait(200);
      inspector->setModelCompareFormat("mxfp4");
      QTest::qWait(200);
      // The frontier, when the screenshot script measured one (fp4lab sensitivity of the SFT
      // model into the runs folder).
      const std::string sensitivity = std::string(runs) + "/sensitivity.h5";
      if (files::isRegularFile(sensitivity))
        CHECK(inspector->openSensitivity(QString::fromStdString(sensitivity)));
      save(w, dir + QStringLiteral("/inspector-model.png"));
      w.resize(1000, 650);
      save(w, dir + QStringLiteral("/inspector-model-small.png"));
      inspector->showView(0);
      save(w, dir + QStringLiteral("/inspector-run-small.png"));
      w.resize(1600, 1000);
    }
  }
  if (std::getenv("FP4LAB_SCREENSHOT_REPORT")) {
    w.resize(1000, 650);
    w.openReport(QString::fromUtf8(runs));
    save(w, dir + QStringLiteral("/report-small.png"));
    w.resize(1600, 1000);
  }
  w.centralTabs()->setCurrentIndex(0);
  // A 900x600 screen's default layout: the details under the runs (MainWindow::fitDefaultLayout).
  w.resize(855, 570);
  w.resetLayout();
  save(w, dir + QStringLiteral("/main-window-small.png"));

  NewRunDialog dialog(&w);
  if (const int row = w.runsModel()->rowOf(a); row >= 0) {
    run::RunConfig c = w.runsModel()->run(row)->folder.config;
    c.name = "qat-nvfp4-lr3e-4";
    c.quantFormat = "nvfp4";
    c.lr = 3e-4;
    dialog.setConfig(c);
  }
  dialog.resize(1080, 780);
  dialog.show();
  REQUIRE(QTest::qWaitForWindowExposed(&dialog));
  save(dialog, dir + QStringLiteral("/new-run.png"));
}
