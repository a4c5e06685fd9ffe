// Renders each view of the workbench with real runs into PNG files: the README's and the user
// guide's pictures (tests/gui/render-screenshots.sh runs it under Xvfb on the quick experiment's
// runs). Hidden ([.screenshots]): it needs FP4LAB_SCREENSHOT_RUNS and FP4LAB_SCREENSHOT_OUT.
#include <catch2/catch.hpp>

#include <QDockWidget>
#include <QTabWidget>
#include <QTimer>

#include <cstdlib>

#include "fp4lab/widgets/charts_page.h"
#include "fp4lab/widgets/compare_view.h"
#include "fp4lab/widgets/curve_panel.h"
#include "fp4lab/widgets/main_window.h"
#include "fp4lab/widgets/new_run_dialog.h"
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
    w.centralTabs()->setCurrentWidget(w.compare());
    save(w, dir + QStringLiteral("/compare.png"));
  }
  w.centralTabs()->setCurrentIndex(0);
  w.resize(1024, 680);
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
