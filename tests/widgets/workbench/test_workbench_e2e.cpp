// The workbench window end to end, with real child processes of the fp4lab executable: a run
// launched from the window is queued, runs, its validation-loss curve grows, SIGTERM stops it
// with a checkpoint (cancelled), resume finishes it; a run killed with SIGKILL shows as crashed.
// And the window's layout: saved, restored, and a saved state of another version refused.
// Hidden tags ([.e2e], [.layout]) are run by their own CTest entries.
#include <catch2/catch.hpp>

#include <signal.h>

#include <QAbstractButton>
#include <QAbstractSeries>
#include <QChart>
#include <QAbstractItemView>
#include <QAbstractSlider>
#include <QAbstractSpinBox>
#include <QComboBox>
#include <QDockWidget>
#include <QLineEdit>
#include <QScrollBar>
#include <QTabBar>
#include <QHeaderView>
#include <QLabel>
#include <QScreen>
#include <QSettings>
#include <QTableView>
#include <QTextBlock>
#include <QTextBrowser>
#include <QTextCursor>
#include <QTextDocument>
#include <QTextLayout>
#include <QTextTable>

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>

#include "fp4lab/widgets/charts_page.h"
#include "fp4lab/widgets/compare_view.h"
#include "fp4lab/widgets/curve_panel.h"
#include "fp4lab/widgets/main_window.h"
#include "fp4lab/widgets/quant_inspector.h"
#include "fp4lab/widgets/run_details.h"
#include "fp4lab/widgets/run_table_model.h"
#include "fp4lab/widgets/runs_table_view.h"
#include "workbench_fixtures.h"

using namespace fp4lab;
using namespace fp4lab::widgets;
using fp4lab::testing::TempDir;
using fp4lab::testing::waitFor;

namespace {

const RunSnapshot* findRun(MainWindow& w, const QString& dir) {
  const int row = w.runsModel()->rowOf(dir.toStdString());
  return row < 0 ? nullptr : w.runsModel()->run(row);
}

RunState stateOf(MainWindow& w, const QString& dir) {
  const RunSnapshot* r = findRun(w, dir);
  return r ? r->state() : RunState::Unknown;
}

size_t evalRows(MainWindow& w, const QString& dir) {
  const RunSnapshot* r = findRun(w, dir);
  return r && r->curves ? r->curves->eval.size() : 0;
}

// A window on an empty runs folder under `tmp` that launches nothing (/bin/false).
WorkbenchOptions idleWindowOptions(const TempDir& tmp) {
  WorkbenchOptions options;
  options.roots = {QString::fromStdString(tmp.file("runs"))};
  options.program = QStringLiteral("/bin/false");
  return options;
}

run::RunConfig tinyRun(const std::string& name, int steps) {
  return run::RunConfig::fromYamlText(
      "",
      {"run.name=" + name, "model.path=builtin:tiny", "data.train=builtin:sft", "data.seq_len=64",
       "train.batch_size=4", "train.eval_every=10", "train.eval_batches=1", "data.validation_max=8",
       "train.threads=1", "train.checkpoint_every=10", "train.max_steps=" + std::to_string(steps)});
}

}  // namespace

TEST_CASE(
    "a run launched from the window: queued, running, live, stopped, resumed, finished; "
    "a killed one crashes",
    "[.e2e]") {
  const char* bin = std::getenv("FP4LAB_BIN");
  REQUIRE(bin);  // CTest sets it to the fp4lab executable
  TempDir tmp;
  const QString root = QString::fromStdString(tmp.file("runs"));
  WorkbenchOptions options;
  options.roots = {root};
  options.program = QString::fromUtf8(bin);
  options.pollMs = 200;
  MainWindow w(options);
  w.resize(1400, 900);
  w.show();
  const QString first = w.launch(tinyRun("first", 400));
  const QString second = w.launch(tinyRun("second", 400));
  REQUIRE_FALSE(first.isEmpty());
  REQUIRE_FALSE(second.isEmpty());
  INFO(w.messageText().toStdString());
  // One CPU slot: the second waits, and the table says so.
  REQUIRE(waitFor([&] { return stateOf(w, second) == RunState::Queued; }, 10000));
  REQUIRE(waitFor([&] { return stateOf(w, first) == RunState::Running; }, 60000));
  CHECK(stateOf(w, second) == RunState::Queued);
  // Its validation loss grows live, and reaches the chart.
  REQUIRE(waitFor([&] { return evalRows(w, first) >= 2; }, 120000));
  const size_t seen = evalRows(w, first);
  REQUIRE(waitFor([&] { return evalRows(w, first) > seen; }, 120000));
  CurvePanel* val = w.charts()->panel("eval/val_loss");
  REQUIRE(val);
  REQUIRE(waitFor([&] { return val->redrawNow() > 0; }, 5000));
  CHECK(val->hasData());

  // Stop: SIGTERM, a checkpoint, cancelled.
  REQUIRE(w.stopRun(first.toStdString()));
  REQUIRE(waitFor([&] { return stateOf(w, first) == RunState::Cancelled; }, 120000));
  const RunSnapshot* stopped = findRun(w, first);
  REQUIRE(stopped);
  CHECK_FALSE(stopped->folder.latestCheckpoint.empty());
  const int64_t stoppedAt = stopped->summary.step;
  CHECK(stoppedAt < 400);

  // The second starts now; killed from outside with SIGKILL, it shows as crashed.
  REQUIRE(waitFor([&] { return stateOf(w, second) == RunState::Running; }, 60000));
  const RunSnapshot* victim = findRun(w, second);
  REQUIRE(victim->folder.pid > 0);
  REQUIRE(::kill(victim->folder.pid, SIGKILL) == 0);
  REQUIRE(waitFor([&] { return stateOf(w, second) == RunState::Crashed; }, 30000));
  CHECK(w.queue()->state(second) == JobState::Crashed);
  CHECK(w.messageText().contains(QLatin1String("crashed")));

  // Resume the stopped one from its checkpoint; it finishes with every step.
  w.selectRun(first.toStdString());
  REQUIRE(w.resumeRun(first.toStdString()));
  REQUIRE(waitFor([&] { return stateOf(w, first) == RunState::Finished; }, 300000));
  const RunSnapshot* done = findRun(w, first);
  REQUIRE(done->curves);
  CHECK(done->curves->lastTrainStep() == 400);
  // Steps are not duplicated across the resume.
  for (size_t i = 1; i < done->curves->train.size(); ++i)
    CHECK(done->curves->train[i].step > done->curves->train[i - 1].step);
  CHECK(w.details()->stateText().contains(QLatin1String("finished")));
  // A running run is never deleted; a finished one is, after confirmation only.
  CHECK_FALSE(w.deleteRun(first.toStdString(), false));
  CHECK(files::isDirectory(first.toStdString()));
  // status.json says finished just before the process exits: the queue follows within seconds.
  CHECK(waitFor([&] { return w.queue()->activeIds().isEmpty(); }, 30000));
  CHECK(w.queue()->state(first) == JobState::Finished);
  w.close();
}

TEST_CASE("a launch that fails reads failed, with its message, in every view and status.json",
          "[workbench][launch]") {
  const char* bin = std::getenv("FP4LAB_BIN");
  REQUIRE(bin);  // CTest sets it to the fp4lab executable
  TempDir tmp;
  // A stand-in for the fp4lab program that loads for a second, then refuses as train does.
  const std::string fake = tmp.file("slow-refusal.sh");
  std::ofstream(fake)
      << "#!/bin/sh\nsleep 1\n"
         "echo '{\"event\":\"failed\",\"message\":\"model.path: no such folder\"}'\n"
         "echo 'error: model.path: no such folder' >&2\nexit 2\n";
  REQUIRE(::chmod(fake.c_str(), 0755) == 0);
  WorkbenchOptions options = idleWindowOptions(tmp);
  options.program = QString::fromStdString(fake);
  options.pollMs = 100;
  MainWindow w(options);
  w.show();
  REQUIRE(QTest::qWaitForWindowExposed(&w));
  run::RunConfig c = tinyRun("doomed", 10);
  c.modelPath = tmp.file("no-such-model");
  const QString dir = w.launch(c);
  REQUIRE_FALSE(dir.isEmpty());
  REQUIRE(waitFor([&] { return findRun(w, dir) != nullptr; }));
  w.selectRun(dir.toStdString());
  auto* status = w.findChild<QLabel*>(QStringLiteral("queue summary"));
  REQUIRE(status);
  // While its process loads, status.json still says queued; the window says starting.
  REQUIRE(waitFor([&] {
    const RunSnapshot* r = findRun(w, dir);
    return r && r->starting;
  }));
  const int row = w.runsModel()->rowOf(dir.toStdString());
  CHECK(w.runsModel()->index(row, RunTableModel::State).data().toString() == "starting");
  CHECK(status->text().contains(QLatin1String("1 starting, 0 queued")));
  CHECK(w.details()->stateText().contains(QLatin1String("starting")));
  CHECK(run::readRunState(dir.toStdString()) == RunState::Queued);
  // Then it fails: failed everywhere, with the message, and nothing left "queued".
  REQUIRE(waitFor([&] { return stateOf(w, dir) == RunState::Failed; }, 10000));
  const run::RunFolder folder = run::readRunFolder(dir.toStdString());
  CHECK(folder.state == RunState::Failed);
  CHECK(folder.message.find("no such folder") != std::string::npos);
  const QModelIndex state =
      w.runsModel()->index(w.runsModel()->rowOf(dir.toStdString()), RunTableModel::State);
  CHECK(state.data().toString() == "failed");
  CHECK(state.data(Qt::ToolTipRole).toString().contains(QLatin1String("no such folder")));
  CHECK(w.details()->stateText().contains(QLatin1String("no such folder")));
  CHECK(status->text().contains(QLatin1String("0 running, 0 queued")));
  w.close();

  // The real program, refusing a model folder that does not exist: the same end.
  options.program = QString::fromUtf8(bin);
  MainWindow real(options);
  const QString second = real.launch(c);
  REQUIRE_FALSE(second.isEmpty());
  REQUIRE(waitFor([&] { return stateOf(real, second) == RunState::Failed; }, 60000));
  CHECK(run::readRunFolder(second.toStdString()).message.find("no-such-model") !=
        std::string::npos);
}

TEST_CASE("a damaged status.json reads (damaged) with the reason; queued outlives no workbench",
          "[workbench][launch]") {
  TempDir tmp;
  const std::string runs = tmp.file("runs");
  testing::SyntheticRun damaged;
  damaged.dir = files::join(runs, "damaged");
  testing::writeRun(damaged);
  std::ofstream(files::join(damaged.dir, "status.json")) << "garbage";
  MainWindow w(idleWindowOptions(tmp));
  w.show();
  REQUIRE(QTest::qWaitForWindowExposed(&w));
  REQUIRE(waitFor([&] { return findRun(w, QString::fromStdString(damaged.dir)) != nullptr; }));
  const QModelIndex state =
      w.runsModel()->index(w.runsModel()->rowOf(damaged.dir), RunTableModel::State);
  CHECK(state.data().toString() == "unknown (damaged)");
  CHECK(state.data(Qt::ToolTipRole).toString().contains(QLatin1String("status.json: not a JSON")));
  // The column is wide enough for what it says.
  auto* table = w.findChild<QTableView*>(QStringLiteral("runs table"));
  REQUIRE(table);
  CHECK(table->columnWidth(RunTableModel::State) >=
        table->fontMetrics().horizontalAdvance(state.data().toString()));
}

TEST_CASE("layout: saved and restored; another version's state is not half-restored", "[.layout]") {
  TempDir tmp;
  QSettings().clear();
  const WorkbenchOptions options = idleWindowOptions(tmp);
  QByteArray defaultState;
  {
    MainWindow w(options);
    w.resize(1200, 800);
    w.show();
    REQUIRE(QTest::qWaitForWindowExposed(&w));
    defaultState = w.saveState(MainWindow::kLayoutVersion);
    auto* details = w.findChild<QDockWidget*>(QStringLiteral("detailsDock"));
    REQUIRE(details);
    details->hide();
    auto* table = w.findChild<QTableView*>(QStringLiteral("runs table"));
    table->setColumnHidden(RunTableModel::Kl, true);
    CurveSettings s = w.charts()->settings();
    s.x = XAxis::Tokens;
    s.smoothing = 0.3;
    w.charts()->setSettings(s);
    w.close();
  }
  {
    MainWindow w(options);
    w.show();
    REQUIRE(QTest::qWaitForWindowExposed(&w));
    CHECK_FALSE(w.findChild<QDockWidget*>(QStringLiteral("detailsDock"))->isVisible());
    CHECK(
        w.findChild<QTableView*>(QStringLiteral("runs table"))->isColumnHidden(RunTableModel::Kl));
    CHECK(w.charts()->settings().x == XAxis::Tokens);
    CHECK(w.charts()->settings().smoothing == Approx(0.3));
    CHECK(w.roots() == options.roots);
    w.resetLayout();
    CHECK(w.findChild<QDockWidget*>(QStringLiteral("detailsDock"))->isVisible());
    CHECK_FALSE(
        w.findChild<QTableView*>(QStringLiteral("runs table"))->isColumnHidden(RunTableModel::Kl));
    CHECK(w.charts()->settings().x == XAxis::Step);
    // Hide it again and save a state under another layout version.
    w.findChild<QDockWidget*>(QStringLiteral("detailsDock"))->hide();
    QSettings().setValue(QStringLiteral("mainWindow/state"),
                         w.saveState(MainWindow::kLayoutVersion + 1));
  }
  {
    MainWindow w(options);
    w.show();
    REQUIRE(QTest::qWaitForWindowExposed(&w));
    // Refused: the default layout, where the details dock is shown.
    CHECK(w.findChild<QDockWidget*>(QStringLiteral("detailsDock"))->isVisible());
  }
  QSettings().clear();
}

TEST_CASE("layout: a window made narrower by hand keeps the middle for the charts", "[.layout]") {
  TempDir tmp;
  QSettings().clear();
  const WorkbenchOptions options = idleWindowOptions(tmp);
  MainWindow w(options);
  w.resize(1600, 1000);
  w.show();
  REQUIRE(QTest::qWaitForWindowExposed(&w));
  w.resetLayout();  // the wide default: runs on the left, details on the right
  QTest::qWait(50);
  auto* runs = w.findChild<QDockWidget*>(QStringLiteral("runsDock"));
  auto* details = w.findChild<QDockWidget*>(QStringLiteral("detailsDock"));
  REQUIRE(w.dockWidgetArea(details) == Qt::RightDockWidgetArea);
  const int runsWide = runs->width(), detailsWide = details->width();
  w.resize(1000, 650);
  QTest::qWait(50);
  INFO("docks " << runs->width() << " + " << details->width() << " of " << w.width() << " (were "
                << runsWide << " + " << detailsWide << " of 1600)");
  // The middle keeps at least about 40% (without the fix it kept 1000 - 904 px).
  CHECK(w.charts()->width() >= w.width() * 35 / 100);
  CHECK(runs->width() < runsWide);
  CHECK(details->width() < detailsWide);
  // In proportion: the runs dock stays the wider one.
  CHECK(runs->width() > details->width());
  // Widening again leaves the docks as they are.
  const int runsNarrow = runs->width();
  w.resize(1200, 650);
  QTest::qWait(50);
  CHECK(runs->width() == runsNarrow);
  QSettings().clear();
}

TEST_CASE("accessibility lint: every interactive widget of the window has a name and a tooltip",
          "[a11y]") {
  TempDir tmp;
  const WorkbenchOptions options = idleWindowOptions(tmp);
  MainWindow w(options);
  w.show();
  REQUIRE(QTest::qWaitForWindowExposed(&w));
  int checked = 0;
  for (QWidget* widget : w.findChildren<QWidget*>()) {
    const bool interactive =
        qobject_cast<QAbstractButton*>(widget) || qobject_cast<QLineEdit*>(widget) ||
        qobject_cast<QComboBox*>(widget) || qobject_cast<QAbstractSpinBox*>(widget) ||
        qobject_cast<QAbstractSlider*>(widget) || qobject_cast<QAbstractItemView*>(widget);
    if (!interactive || !widget->isVisibleTo(&w)) continue;
    // Qt's own parts of composite widgets: tab-bar scroll arrows, line-edit clear buttons,
    // scroll bars, a combo box's popup list, dock title buttons.
    const QWidget* parent = widget->parentWidget();
    if (widget->objectName().startsWith(QLatin1String("qt_")) ||
        qobject_cast<QScrollBar*>(widget) || qobject_cast<QHeaderView*>(widget) ||
        qobject_cast<const QTabBar*>(parent) || qobject_cast<const QLineEdit*>(parent) ||
        qobject_cast<const QComboBox*>(parent) || qobject_cast<const QDockWidget*>(parent) ||
        qobject_cast<const QAbstractSpinBox*>(parent))
      continue;
    ++checked;
    // A button with text is announced by its text; anything else needs a name.
    const auto* button = qobject_cast<QAbstractButton*>(widget);
    const bool named = !widget->accessibleName().isEmpty() || (button && !button->text().isEmpty());
    INFO(widget->metaObject()->className() << " '" << widget->objectName().toStdString() << "'");
    CHECK(named);
    CHECK_FALSE(widget->toolTip().isEmpty());
  }
  CHECK(checked > 15);
}

// Run by the workbench_small_screen entry on a 900x600 offscreen screen (small-screen.json): a
// window with no saved layout opens inside the screen, every view reachable, the charts wide.
TEST_CASE("the window fits a small screen: no part off screen, details under the runs",
          "[.small-screen]") {
  TempDir tmp;
  QSettings().clear();
  const WorkbenchOptions options = idleWindowOptions(tmp);
  MainWindow w(options);
  w.show();
  REQUIRE(QTest::qWaitForWindowExposed(&w));
  const QRect screen = w.screen()->availableGeometry();
  REQUIRE(screen.width() <= 900);  // the configured screen, else this proves nothing
  INFO("window " << w.width() << "x" << w.height() << ", its minimum "
                 << w.minimumSizeHint().width() << "x" << w.minimumSizeHint().height()
                 << ", screen " << screen.width() << "x" << screen.height());
  CHECK(w.minimumSizeHint().width() <= screen.width());
  CHECK(w.minimumSizeHint().height() <= screen.height());
  CHECK(screen.contains(w.frameGeometry()));
  auto* runs = w.findChild<QDockWidget*>(QStringLiteral("runsDock"));
  auto* details = w.findChild<QDockWidget*>(QStringLiteral("detailsDock"));
  CHECK(w.dockWidgetArea(details) == Qt::LeftDockWidgetArea);
  CHECK(details->y() > runs->y());
  // The middle keeps at least a third of the window for the charts.
  CHECK(w.charts()->width() >= w.width() / 3);
  for (QWidget* view : {static_cast<QWidget*>(w.charts()), static_cast<QWidget*>(w.compare()),
                        static_cast<QWidget*>(w.inspector())}) {
    w.showView(view);
    QTest::qWait(50);
    CHECK(view->isVisible());
  }
  // Reset layout gives the same layout again after the user moved the dock back.
  w.addDockWidget(Qt::RightDockWidgetArea, details);
  w.resetLayout();
  CHECK(w.dockWidgetArea(details) == Qt::LeftDockWidgetArea);
}

TEST_CASE("the runs' names stay in sight while the table scrolls sideways", "[workbench][table]") {
  TempDir tmp;
  const std::string runs = tmp.file("runs");
  for (const char* name : {"alpha", "beta", "gamma"}) {
    testing::SyntheticRun r;
    r.dir = files::join(runs, name);
    testing::writeRun(r);
  }
  MainWindow w(idleWindowOptions(tmp));
  w.resize(1600, 1000);
  w.show();
  REQUIRE(QTest::qWaitForWindowExposed(&w));
  REQUIRE(waitFor([&] { return w.runsModel()->rowCount() == 3; }));
  auto* table = w.findChild<RunsTableView*>(QStringLiteral("runs table"));
  REQUIRE(table);
  QTableView* names = table->frozenView();
  REQUIRE(names->isVisible());
  CHECK(names->width() == table->columnWidth(RunTableModel::Name));
  // Scrolled to the last column (duration), the names are still drawn at the left edge.
  table->scrollTo(table->model()->index(0, RunTableModel::Duration));
  QTest::qWait(50);
  REQUIRE(table->horizontalScrollBar()->value() > 0);
  CHECK(names->isVisible());
  CHECK(names->geometry().left() <= table->frameWidth() + 1);
  CHECK(names->indexAt(QPoint(5, names->rowViewportPosition(1) + 2)).data().toString() == "beta");
  // A click on a name selects the run in the table (one selection for both).
  const QRect cell = names->visualRect(names->model()->index(2, 0));
  QTest::mouseClick(names->viewport(), Qt::LeftButton, {}, cell.center() + QPoint(30, 0));
  CHECK(w.details()->stateText().contains(QLatin1String("gamma")));
  // Selecting a run by name does not scroll the numbers away.
  const int scrolled = table->horizontalScrollBar()->value();
  w.selectRun(files::join(runs, "alpha"));
  CHECK(table->horizontalScrollBar()->value() == scrolled);
  // The name cannot be dragged away from the first place.
  table->horizontalHeader()->moveSection(0, 3);
  CHECK(table->horizontalHeader()->logicalIndex(0) == RunTableModel::Name);
}

TEST_CASE("layout: a layout saved wide and restored narrow keeps the middle for the charts",
          "[.layout]") {
  TempDir tmp;
  QSettings().clear();
  const WorkbenchOptions options = idleWindowOptions(tmp);
  {
    MainWindow w(options);
    w.resize(1600, 1000);
    w.show();
    REQUIRE(QTest::qWaitForWindowExposed(&w));
    w.resetLayout();
    QTest::qWait(50);
    w.close();  // saves the layout, docks sized for 1600 px
  }
  // The same layout on a smaller window (a laptop, a VNC screen).
  QSettings().setValue(QStringLiteral("mainWindow/geometry"), QByteArray());
  MainWindow w(options);
  w.resize(1000, 650);
  w.show();
  REQUIRE(QTest::qWaitForWindowExposed(&w));
  QTest::qWait(100);
  INFO("charts " << w.charts()->width() << " of " << w.width());
  CHECK(w.charts()->width() >= w.width() * 38 / 100);
  QSettings().clear();
}

TEST_CASE(
    "the filter hides runs from the charts too, says when nothing matches, keeps the "
    "selection",
    "[workbench][filter]") {
  TempDir tmp;
  const std::string runs = tmp.file("runs");
  for (const char* name : {"sft-a", "qat-b", "qat-c"}) {
    testing::SyntheticRun r;
    r.dir = files::join(runs, name);
    r.overrides = std::string(name).rfind("qat", 0) == 0
                      ? std::vector<std::string>{"recipe.name=qat", "quant.format=nvfp4"}
                      : std::vector<std::string>{"recipe.name=sft"};
    testing::writeRun(r);
  }
  MainWindow w(idleWindowOptions(tmp));
  w.show();
  REQUIRE(QTest::qWaitForWindowExposed(&w));
  REQUIRE(waitFor([&] { return w.runsModel()->rowCount() == 3; }));
  auto* filter = w.findChild<QLineEdit*>(QStringLiteral("runs filter"));
  auto* hint = w.findChild<QLabel*>(QStringLiteral("filter hint"));
  REQUIRE(filter);
  REQUIRE(hint);
  CurvePanel* val = w.charts()->panel("eval/val_loss");
  REQUIRE(val);
  auto drawn = [&] {
    val->redrawNow();
    int lines = 0;
    for (QAbstractSeries* s : val->chart()->series())
      if (!s->name().isEmpty()) ++lines;
    return lines;
  };
  REQUIRE(waitFor([&] { return drawn() == 3; }));
  w.selectRun(files::join(runs, "sft-a"));
  REQUIRE(w.details()->stateText().contains(QLatin1String("sft-a")));
  // Filtered to the QAT runs: the charts draw those only.
  filter->setText(QStringLiteral("qat"));
  CHECK(drawn() == 2);
  CHECK_FALSE(hint->isVisible());
  // The selected run is hidden, but stays the run whose details show.
  CHECK(w.details()->stateText().contains(QLatin1String("sft-a")));
  // Nothing matches: the table says why.
  filter->setText(QStringLiteral("nothing-like-this"));
  CHECK(drawn() == 0);
  CHECK(hint->isVisible());
  CHECK(hint->text().contains(QLatin1String("No run of 3")));
  // Esc clears the filter; the run is selected again.
  filter->setFocus();
  QTest::keyClick(filter, Qt::Key_Escape);
  CHECK(filter->text().isEmpty());
  CHECK_FALSE(hint->isVisible());
  CHECK(drawn() == 3);
  CHECK(w.selectedRun() == files::join(runs, "sft-a"));
}

TEST_CASE("the report tab never breaks a number or a header mid-word", "[workbench][report]") {
  TempDir tmp;
  const std::string dir = tmp.file("experiment");
  files::createDirectories(dir);
  std::string table =
      "| recipe | format | reasoning_language | val_loss | best | kl | gap | a | b | "
      "c | d | e | f |\n|";
  for (int c = 0; c < 13; ++c) table += " --- |";
  table +=
      "\n| qat | NVFP4 W4A4 | 0.2518 | 0.2518 | 0.2431 | 0.01234 | 45.6% | 1 | 2 | 3 | 4 | 5 | "
      "6 |\n";
  files::writeFileAtomically(
      files::join(dir, "report.md"),
      "# Report\n\nA paragraph long enough to wrap between its words.\n\n" + table);
  MainWindow w(idleWindowOptions(tmp));
  w.resize(1000, 650);
  w.show();
  REQUIRE(QTest::qWaitForWindowExposed(&w));
  w.openReport(QString::fromStdString(dir));
  auto* browser = w.findChild<QTextBrowser*>(QStringLiteral("experiment report"));
  REQUIRE(browser);
  browser->resize(420, 400);
  QTest::qWait(50);
  // Every table cell is laid out on one line: nothing broken mid-word or mid-digit.
  int cells = 0;
  for (QTextBlock b = browser->document()->begin(); b.isValid(); b = b.next()) {
    if (!QTextCursor(b).currentTable()) continue;
    INFO(b.text().toStdString());
    CHECK(b.layout()->lineCount() == 1);
    ++cells;
  }
  CHECK(cells == 26);
  // The table is wider than the pane: it scrolls sideways.
  CHECK(browser->horizontalScrollBar()->maximum() > 0);
}
