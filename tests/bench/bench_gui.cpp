// The workbench on a large set of runs, measured side by side in one process: synthetic logs
// written with the real RunLogWriter (20 runs x 100 000 steps by default), then
//  - first frame: from before the MainWindow is constructed to the validation-loss and
//    training-loss panels painted with every run (the log worker reads all logs in between);
//  - redraw: a standalone 1200x700 "train/loss" CurvePanel of all runs over zoom and pan steps,
//    bucketing + replace() alone and including the paint; next to it the reference points, one
//    raw 100 000-point QLineSeries and 20 series of 1200 points in a plain QChartView;
//  - live lag: a writer child process (this executable with --writer) appends a row every 10 ms
//    with its wall-clock time and flushes every 100 ms; each time the window's training-loss
//    panel paints a newer row, now minus that row's append time;
//  - resident memory after everything is loaded and drawn, and its peak;
//  - the longest GUI-thread stall: a 5 ms timer runs throughout; the longest gap between its ticks
//    minus 5 ms, by phase.
// Prints a markdown table for docs/performance.md. --quick: a small, fast variant (CTest).
#include <unistd.h>

#include <QApplication>
#include <QAreaSeries>
#include <QChart>
#include <QChartView>
#include <QElapsedTimer>
#include <QLineSeries>
#include <QPointer>
#include <QProcess>
#include <QStandardPaths>
#include <QTimer>
#include <QValueAxis>

#include <algorithm>
#include <chrono>
#include <clocale>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "fp4lab/common/files.h"
#include "fp4lab/log/run_log.h"
#include "fp4lab/run/run_config.h"
#include "fp4lab/run/run_folder.h"
#include "fp4lab/widgets/charts_page.h"
#include "fp4lab/widgets/curve_panel.h"
#include "fp4lab/widgets/curve_worker.h"
#include "fp4lab/widgets/main_window.h"

using namespace fp4lab;
using namespace fp4lab::widgets;

namespace {

constexpr char kLiveRun[] = "live-writer";

double wallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double steadyMs() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Options {
  int runs = 20;
  int64_t steps = 100000;
  int64_t evalEvery = 1000;
  double liveSeconds = 10;
  int zoomSteps = 30, panSteps = 30, referenceReps = 5;
  std::string dir;  // reuse (or create) the synthetic runs here; default: a temporary folder
  bool quick = false;
};

// --- the synthetic runs ---------------------------------------------------------------------

log::RunLogSchema schema() {
  log::RunLogSchema s;
  s.evalColumns = {"val_loss", "val_kl"};
  return s;
}

void writeConfig(const std::string& dir, const std::string& name, int64_t steps) {
  files::createDirectories(dir);
  run::RunConfig c;
  c.name = name;
  c.maxSteps = steps;
  files::writeFileAtomically(files::join(dir, "run.yaml"), c.toYaml());
}

log::RootAttributes attributesOf(const std::string& name) {
  log::RootAttributes a;
  a.runId = name;
  a.recipe = "qat";
  a.format = "nvfp4";
  return a;
}

void writeRun(const std::string& dir, const std::string& name, int index, int64_t steps,
              int64_t evalEvery) {
  writeConfig(dir, name, steps);
  std::mt19937 rng(uint32_t(1000 + index));
  std::normal_distribution<float> noise(0.f, 1.f);
  auto w = log::RunLogWriter::create(files::join(dir, "log.h5"), attributesOf(name), schema());
  w.event("start", "synthetic");
  const float offset = 0.02f * float(index);
  for (int64_t step = 1; step <= steps; ++step) {
    const double t = double(step) / double(steps);
    log::TrainRow row;
    row.step = step;
    row.tokens = step * 4096;
    row.wallSeconds = 0.25 * double(step);
    row.loss = float(3.0 * std::pow(double(step), -0.12)) * (1.f + 0.05f * noise(rng)) + offset;
    row.lr = float(1e-3 * (t < 0.03 ? t / 0.03 : 0.1 + 0.45 * (1 + std::cos(M_PI * t))));
    row.gradNorm = 0.8f + 0.3f * std::abs(noise(rng));
    row.tokensPerSecond = 20000.f + 800.f * noise(rng);
    w.appendTrain(row);
    if (step % evalEvery == 0) {
      log::EvalRow e;
      e.step = step;
      e.tokens = row.tokens;
      e.wallSeconds = row.wallSeconds;
      e.values = {2.9 * std::pow(double(step), -0.1) + offset, 0.05 + 0.01 * noise(rng)};
      w.appendEval(e);
    }
  }
  w.event("end", "finished");
  w.close();
  run::writeRunStatus(dir, RunState::Finished, steps, steps);
}

// The synthetic runs under `root`, written unless a complete set for these options is there.
double ensureRuns(const std::string& root, const Options& o) {
  const std::string marker = files::join(
      root, ".bench-" + std::to_string(o.runs) + "x" + std::to_string(o.steps) + ".done");
  if (files::isRegularFile(marker)) return 0;
  std::filesystem::remove_all(root);
  files::createDirectories(root);
  const double t0 = steadyMs();
  for (int i = 0; i < o.runs; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "run-%02d", i);
    writeRun(files::join(root, name), name, i, o.steps, o.evalEvery);
  }
  files::writeFileAtomically(marker, "");
  return steadyMs() - t0;
}

// --writer ROOT SECONDS: the live run. A row every 10 ms whose wallSeconds is the wall-clock
// time of its append; a flush every 100 ms (the engine's writer flushes at least once a second).
int writerMain(const std::string& root, double seconds) {
  const std::string dir = files::join(root, kLiveRun);
  writeConfig(dir, kLiveRun, 1000000);
  run::writeRunStatus(dir, RunState::Running, 0, 1000000);
  auto w = log::RunLogWriter::create(files::join(dir, "log.h5"), attributesOf(kLiveRun), schema());
  w.event("start", "live benchmark writer");
  w.flush();
  const auto start = std::chrono::steady_clock::now();
  auto next = start, lastFlush = start;
  std::mt19937 rng(7);
  std::normal_distribution<float> noise(0.f, 1.f);
  for (int64_t step = 1;; ++step) {
    std::this_thread::sleep_until(next);
    next += std::chrono::milliseconds(10);
    log::TrainRow row;
    row.step = step;
    row.tokens = step * 4096;
    row.wallSeconds = wallNow();
    row.loss = float(3.0 * std::pow(double(step), -0.12)) * (1.f + 0.05f * noise(rng));
    row.lr = 1e-3f;
    row.gradNorm = 1.f;
    row.tokensPerSecond = 20000.f;
    w.appendTrain(row);
    const auto now = std::chrono::steady_clock::now();
    if (now - lastFlush >= std::chrono::milliseconds(100)) w.flush(), lastFlush = now;
    if (now - start >= std::chrono::duration<double>(seconds)) {
      w.event("end", "finished");
      w.close();
      run::writeRunStatus(dir, RunState::Finished, step, step);
      return 0;
    }
  }
}

// --- measuring ------------------------------------------------------------------------------

// The GUI thread's responsiveness: a 5 ms timer; the longest gap between ticks, by phase.
class StallMonitor : public QObject {
 public:
  StallMonitor() {
    m_timer.setTimerType(Qt::PreciseTimer);
    m_timer.setInterval(5);
    connect(&m_timer, &QTimer::timeout, this, [this] { tick(); });
    m_last = steadyMs();
    m_timer.start();
  }
  // The gap up to now belongs to the phase that is ending.
  void setPhase(const std::string& phase) {
    tick();
    m_phase = phase;
    m_order.push_back(phase);
  }
  double worst(const std::string& phase) const {
    auto it = m_worst.find(phase);
    return it == m_worst.end() ? 0 : std::max(0.0, it->second - 5);
  }
  const std::vector<std::string>& phases() const { return m_order; }

 private:
  void tick() {
    const double now = steadyMs();
    double& w = m_worst[m_phase];
    w = std::max(w, now - m_last);
    m_last = now;
  }
  QTimer m_timer;
  double m_last = 0;
  std::string m_phase = "start";
  std::vector<std::string> m_order;
  std::map<std::string, double> m_worst;
};

// Counts paint events of the widgets it is installed on.
class PaintCounter : public QObject {
 public:
  std::function<void(QObject*)> onPaint;
  int count(QObject* o) const {
    auto it = m_counts.find(o);
    return it == m_counts.end() ? 0 : it->second;
  }

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override {
    if (event->type() == QEvent::Paint) {
      ++m_counts[watched];
      if (onPaint) onPaint(watched);
    }
    return false;
  }

 private:
  std::map<QObject*, int> m_counts;
};

// Runs the event loop until done() or `ms` pass; returns done().
bool spinUntil(const std::function<bool()>& done, double ms) {
  const double t0 = steadyMs();
  while (!done()) {
    if (steadyMs() - t0 > ms) return false;
    // Blocks until an event: the stall monitor's timer wakes it at least every 5 ms.
    QCoreApplication::processEvents(QEventLoop::AllEvents | QEventLoop::WaitForMoreEvents);
    QCoreApplication::sendPostedEvents(nullptr, QEvent::DeferredDelete);
  }
  return true;
}

void spinFor(double ms) {
  spinUntil([] { return false; }, ms);
}

// Until `viewport` has painted again (after a change that scheduled the paint).
double untilPainted(PaintCounter& paints, QWidget* viewport) {
  const double t0 = steadyMs();
  const int before = paints.count(viewport);
  while (paints.count(viewport) == before && steadyMs() - t0 < 2000)
    QCoreApplication::processEvents(QEventLoop::AllEvents | QEventLoop::WaitForMoreEvents);
  return steadyMs() - t0;
}

struct Stats {
  double median = NAN, worst = NAN;
  size_t n = 0;
};

Stats statsOf(std::vector<double> v) {
  Stats s;
  s.n = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.median = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  s.worst = v.back();
  return s;
}

// VmRSS / VmHWM of this process, in MB.
double procStatusMb(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return std::atof(line.c_str() + std::strlen(key)) / 1024.0;
  }
  return NAN;
}

std::string cpuLine() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model = "unknown CPU";
  bool amx = false;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0 && model == "unknown CPU")
      model = line.substr(line.find(':') + 2);
    if (line.rfind("flags", 0) == 0 && line.find(" amx") != std::string::npos) amx = true;
  }
  return model + ", " + std::to_string(std::thread::hardware_concurrency()) + " cores, " +
         (amx ? "with AMX" : "without AMX");
}

// The newest row of run `name` in `snapshots` whose step is <= step, or null.
const log::TrainRow* rowAt(const RunSnapshotsPtr& snapshots, const std::string& name,
                           int64_t step) {
  if (!snapshots) return nullptr;
  for (const RunSnapshot& r : *snapshots) {
    if (r.name != name || !r.curves || r.curves->train.empty()) continue;
    const auto& rows = r.curves->train;
    auto it = std::upper_bound(rows.begin(), rows.end(), step,
                               [](int64_t s, const log::TrainRow& row) { return s < row.step; });
    return it == rows.begin() ? nullptr : &*(it - 1);
  }
  return nullptr;
}

QLineSeries* seriesNamed(QChart* chart, const QString& name) {
  for (QAbstractSeries* s : chart->series())
    if (s->name() == name) return qobject_cast<QLineSeries*>(s);
  return nullptr;
}

// The chart view's viewport, where Qt Charts paints.
QWidget* viewportOf(CurvePanel* panel) {
  return panel->findChild<QChartView*>()->viewport();
}

int lineSeriesCount(QChart* chart) {
  int n = 0;
  for (QAbstractSeries* s : chart->series())
    if (s->type() == QAbstractSeries::SeriesTypeLine && !s->name().isEmpty()) ++n;
  return n;
}

// A plain QChartView at the panel's size drawing `series` raw (the reference points).
struct ReferenceResult {
  Stats aa, plain;
};

// `bands`: each series also gets a min/max band (QAreaSeries, translucent fill, no pen) as the
// panel draws for bucketed curves.
ReferenceResult referenceRedraw(PaintCounter& paints, int seriesCount, int pointsPerSeries,
                                int reps, bool bands = false) {
  ReferenceResult result;
  for (bool antialias : {true, false}) {
    auto* chart = new QChart;
    chart->setAnimationOptions(QChart::NoAnimation);
    auto* x = new QValueAxis;
    auto* y = new QValueAxis;
    chart->addAxis(x, Qt::AlignBottom);
    chart->addAxis(y, Qt::AlignLeft);
    std::vector<QLineSeries*> series;
    std::mt19937 rng(3);
    std::normal_distribution<double> noise(0., 1.);
    std::vector<QList<QPointF>> points(static_cast<size_t>(seriesCount));
    std::vector<QList<QPointF>> highs(points.size()), lows(points.size());
    std::vector<QLineSeries*> highSeries, lowSeries;
    for (int s = 0; s < seriesCount; ++s) {
      for (int i = 0; i < pointsPerSeries; ++i)
        points[size_t(s)].append(
            QPointF(i, 3.0 * std::pow(i + 1.0, -0.12) * (1 + 0.05 * noise(rng)) + 0.02 * s));
      auto* line = new QLineSeries;
      line->setName(QStringLiteral("ref %1").arg(s));
      chart->addSeries(line);
      line->attachAxis(x);
      line->attachAxis(y);
      series.push_back(line);
      if (!bands) continue;
      for (const QPointF& p : points[size_t(s)]) {
        highs[size_t(s)].append(QPointF(p.x(), p.y() + 0.1));
        lows[size_t(s)].append(QPointF(p.x(), p.y() - 0.1));
      }
      highSeries.push_back(new QLineSeries);
      lowSeries.push_back(new QLineSeries);
      auto* band = new QAreaSeries(highSeries.back(), lowSeries.back());
      band->setBrush(QColor(40, 40, 160, 45));
      band->setPen(Qt::NoPen);
      chart->addSeries(band);
      band->attachAxis(x);
      band->attachAxis(y);
    }
    x->setRange(0, pointsPerSeries);
    y->setRange(0.5, 3.5);
    QChartView view(chart);
    view.setRenderHint(QPainter::Antialiasing, antialias);
    view.resize(1200, 700);
    view.show();
    view.viewport()->installEventFilter(&paints);
    spinFor(200);
    std::vector<double> times;
    for (int rep = 0; rep < reps; ++rep) {
      const double t0 = steadyMs();
      for (int s = 0; s < seriesCount; ++s) {
        series[size_t(s)]->replace(points[size_t(s)]);
        if (!bands) continue;
        highSeries[size_t(s)]->replace(highs[size_t(s)]);
        lowSeries[size_t(s)]->replace(lows[size_t(s)]);
      }
      untilPainted(paints, view.viewport());
      times.push_back(steadyMs() - t0);
    }
    (antialias ? result.aa : result.plain) = statsOf(times);
  }
  return result;
}

const char* verdict(bool pass) {
  return pass ? "pass" : "**fail**";
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--writer") {
      const std::string root = next();
      return writerMain(root, std::atof(next().c_str()));
    } else if (a == "--quick") {
      o.quick = true, o.runs = 3, o.steps = 5000, o.liveSeconds = 2, o.zoomSteps = 6;
      o.panSteps = 6, o.referenceReps = 2;
    } else if (a == "--runs") {
      o.runs = std::atoi(next().c_str());
    } else if (a == "--steps") {
      o.steps = std::atoll(next().c_str());
    } else if (a == "--live-seconds") {
      o.liveSeconds = std::atof(next().c_str());
    } else if (a == "--dir") {
      o.dir = next();
    } else {
      std::fprintf(stderr,
                   "usage: bench_gui [--quick] [--runs N] [--steps N] [--live-seconds S] "
                   "[--dir FOLDER (synthetic runs kept and reused)]\n");
      return 2;
    }
  }
  std::string tmp;
  if (o.dir.empty()) {
    const char* tmpdir = std::getenv("TMPDIR");
    tmp = files::makeTemporaryDirectory(
        files::join(tmpdir && *tmpdir ? tmpdir : "/tmp", "fp4lab-bench-gui-"));
  }
  const std::string root = o.dir.empty() ? files::join(tmp, "runs") : o.dir;
  const double genMs = ensureRuns(root, o);
  std::filesystem::remove_all(files::join(root, kLiveRun));
  std::printf(
      "synthetic logs: %d runs x %lld steps under %s, %s\n", o.runs, (long long)o.steps,
      root.c_str(),
      genMs > 0 ? ("written in " + std::to_string(int(genMs / 1000)) + " s").c_str() : "reused");

  if (!std::getenv("QT_QPA_PLATFORM")) setenv("QT_QPA_PLATFORM", "offscreen", 1);
  QStandardPaths::setTestModeEnabled(true);
  QApplication::setOrganizationName(QStringLiteral("fp4lab-bench"));
  QApplication::setApplicationName(QStringLiteral("fp4lab-bench-gui"));
  QApplication app(argc, argv);
  std::setlocale(LC_NUMERIC, "C");
  const double rssBeforeMb = procStatusMb("VmRSS:");

  StallMonitor stalls;
  PaintCounter paints;
  bool ok = true;

  // First frame.
  stalls.setPhase("construct");
  const double t0 = steadyMs();
  WorkbenchOptions options;
  options.roots = {QString::fromStdString(root)};
  options.program = QStringLiteral("/bin/false");
  options.pollMs = 1000;
  auto window = std::make_unique<MainWindow>(options);
  MainWindow& w = *window;
  w.resize(1600, 1000);
  w.show();
  const double constructedMs = steadyMs() - t0;
  stalls.setPhase("load");
  CurvePanel* val = w.charts()->panel("eval/val_loss");
  CurvePanel* train = w.charts()->panel("train/ce_loss");
  if (!val || !train) {
    std::fprintf(stderr, "the window has no validation-loss or training-loss panel\n");
    return 1;
  }
  viewportOf(val)->installEventFilter(&paints);
  viewportOf(train)->installEventFilter(&paints);
  double snapshotMs = NAN;
  const auto allRuns = [&] {
    RunSnapshotsPtr s = w.lastSnapshots();
    if (!s) return false;
    int withCurves = 0;
    for (const RunSnapshot& r : *s) withCurves += r.curves && !r.curves->train.empty();
    return withCurves >= o.runs;
  };
  QObject::connect(&w, &MainWindow::snapshotsApplied, [&] {
    if (std::isnan(snapshotMs) && allRuns()) snapshotMs = steadyMs() - t0;
  });
  // Drawn: a paint of each panel once it holds every run (its redraw came before the paint).
  std::set<QObject*> paintedAll;
  const auto holdsAll = [&](CurvePanel* p) {
    return allRuns() && p->drawnPoints() > 0 && lineSeriesCount(p->chart()) >= o.runs;
  };
  paints.onPaint = [&](QObject* viewport) {
    for (CurvePanel* p : {val, train}) {
      if (viewport == viewportOf(p) && holdsAll(p)) paintedAll.insert(viewport);
    }
  };
  if (!spinUntil([&] { return paintedAll.size() == 2; }, 120000)) {
    std::fprintf(stderr, "the panels did not draw every run within 120 s\n");
    ok = false;
  }
  const double firstFrameMs = steadyMs() - t0;
  paints.onPaint = nullptr;
  stalls.setPhase("idle");
  spinFor(o.quick ? 500 : 2000);
  const double rssMb = procStatusMb("VmRSS:"), hwmLoadedMb = procStatusMb("VmHWM:");

  // Redraw: a standalone panel of every run.
  stalls.setPhase("redraw bench");
  // The chart alone: the window stops following the logs and is hidden while the standalone
  // panel and the reference charts are timed, so their frames do not share the event loop with
  // the window's own (it follows the logs again for the live measurement below).
  w.setLive(false);
  w.hide();
  std::vector<double> workerOnly, redrawOnly, redrawPaint;
  double workerFirstMs = NAN;
  int redrawPoints = 0;
  {
    std::set<std::string> shown;
    for (const RunSnapshot& r : *w.lastSnapshots()) shown.insert(r.id);
    CurvePanel panel("train/loss", QStringLiteral("Training loss"));
    panel.resize(1200, 700);
    panel.show();
    viewportOf(&panel)->installEventFilter(&paints);
    panel.setRuns(w.lastSnapshots(), shown);
    spinUntil([&] { return panel.drawnPoints() > 0; }, 10000);
    spinFor(200);
    const auto [x0, x1] = panel.xRange();
    const double span = x1 - x0;
    // Zoom in around 40% of the range by 0.8 per step, then back out; then pan a 20% window.
    std::vector<std::pair<double, double>> ranges;
    double a = x0, b = x1;
    const double centre = x0 + 0.4 * span;
    for (int i = 0; i < o.zoomSteps; ++i) {
      const double f = i < o.zoomSteps / 2 ? 0.8 : 1.25;
      a = centre - (centre - a) * f, b = centre + (b - centre) * f;
      ranges.emplace_back(a, b);
    }
    for (int i = 0; i < o.panSteps; ++i) {
      const double from = x0 + span * 0.8 * i / std::max(1, o.panSteps - 1);
      ranges.emplace_back(from, from + 0.2 * span);
    }
    // The worker's share: the same frames computed here, without the chart.
    {
      CurveRequest request;
      request.series = panel.series();
      request.runs = w.lastSnapshots();
      request.shown = shown;
      request.settings = panel.settings();
      request.follow = false;
      request.plotWidth = int(panel.chart()->plotArea().width());
      CurveCache cache;
      const double s0 = steadyMs();
      computeFrame(request, cache);  // the transformed curves, as the panel's first frame built
      workerFirstMs = steadyMs() - s0;

      for (const auto& [lo, hi] : ranges) {
        request.x0 = lo, request.x1 = hi;
        const double s = steadyMs();
        const CurveFrame frame = computeFrame(request, cache);
        workerOnly.push_back(steadyMs() - s);
      }
    }
    for (const auto& [lo, hi] : ranges) {
      panel.setXRange(lo, hi);
      const double s = steadyMs();
      redrawPoints = std::max(redrawPoints, panel.redrawNow());
      const double r = steadyMs() - s;
      const double p = untilPainted(paints, viewportOf(&panel));
      redrawOnly.push_back(r);
      redrawPaint.push_back(r + p);
      if (std::getenv("FP4LAB_BENCH_STEPS"))
        std::fprintf(stderr, "step [%g, %g]: redraw %.1f ms, paint %.1f ms\n", lo, hi, r, p);
    }
    panel.resetZoom();
    panel.redrawNow();
    untilPainted(paints, viewportOf(&panel));
    const QString png = QString::fromStdString(
        files::join(o.dir.empty() ? tmp : files::parentOf(root), "bench_gui_panel.png"));
    QString error;
    if (panel.savePng(png, &error)) std::printf("the panel as drawn: %s\n", qPrintable(png));
  }
  stalls.setPhase("reference bench");
  const ReferenceResult raw = referenceRedraw(paints, 1, 100000, o.referenceReps);
  const ReferenceResult bucketed = referenceRedraw(paints, 20, 1200, o.referenceReps);
  const ReferenceResult banded = referenceRedraw(paints, 20, 1200, o.referenceReps, true);

  // Live lag: the writer child, the window's training-loss panel.
  stalls.setPhase("window shown again");
  w.show();
  w.setLive(true);
  spinFor(1000);  // the window repaints every panel once after being shown: not part of "live"
  stalls.setPhase("live start");
  std::vector<double> lags;
  double appearedMs = NAN;
  int64_t lastDrawnStep = 0;
  const QString liveName = QString::fromLatin1(kLiveRun);
  paints.onPaint = [&](QObject* viewport) {
    if (viewport != viewportOf(train)) return;
    QLineSeries* s = seriesNamed(train->chart(), liveName);
    if (!s || s->count() == 0) return;
    const auto newest = int64_t(s->at(s->count() - 1).x());
    if (newest <= lastDrawnStep) return;
    lastDrawnStep = newest;
    const log::TrainRow* row = rowAt(w.lastSnapshots(), kLiveRun, newest);
    if (!row) return;
    const double appended = row->wallSeconds;
    // Measured once this paint is done.
    QTimer::singleShot(0, [&lags, appended] { lags.push_back(1000 * (wallNow() - appended)); });
  };
  QProcess writer;
  const double writerStart = steadyMs();
  writer.start(QCoreApplication::applicationFilePath(),
               {QStringLiteral("--writer"), QString::fromStdString(root),
                QString::number(o.liveSeconds + 2)});
  if (!writer.waitForStarted(5000)) {
    std::fprintf(stderr, "the writer did not start\n");
    return 1;
  }
  spinUntil([&] { return !lags.empty(); }, 10000);
  appearedMs = steadyMs() - writerStart;
  lags.clear();  // the first sighting includes the child's start and the run's discovery
  stalls.setPhase("live");
  spinFor(1000 * o.liveSeconds);
  stalls.setPhase("end");
  paints.onPaint = nullptr;
  writer.waitForFinished(10000);
  const Stats lag = statsOf(lags);
  const double hwmMb = procStatusMb("VmHWM:");

  // The report.
  const Stats wo = statsOf(workerOnly), ro = statsOf(redrawOnly), rp = statsOf(redrawPaint);
  double appStall = 0;
  std::string appStallPhase;
  for (const char* phase : {"load", "idle", "live"}) {
    if (stalls.worst(phase) > appStall) appStall = stalls.worst(phase), appStallPhase = phase;
  }
  std::printf("\nCPU: %s; Qt %s, platform %s\n", cpuLine().c_str(), qVersion(),
              qPrintable(QGuiApplication::platformName()));
  std::printf("%d runs x %lld steps (eval every %lld); window 1600x1000, panel 1200x700\n\n",
              o.runs, (long long)o.steps, (long long)o.evalEvery);
  std::printf("| metric | measured | goal | |\n|---|---|---|---|\n");
  std::printf(
      "| first frame (construct %.0f ms, all logs in %.0f ms) | %.0f ms | < 2000 ms | %s |\n",
      constructedMs, snapshotMs, firstFrameMs, verdict(firstFrameMs < 2000));
  std::printf("| the panel's first frame on the worker (every run transformed) | %.0f ms | | |\n",
              workerFirstMs);
  std::printf(
      "| the worker's frame alone: bucketing (median / worst of %zu) | %.1f / %.1f ms | | |\n",
      wo.n, wo.median, wo.worst);
  std::printf("| redraw: request, worker, replace (median / worst) | %.1f / %.1f ms | | |\n",
              ro.median, ro.worst);
  std::printf("| redraw incl. paint (median / worst) | %.1f / %.1f ms | < 50 ms | %s |\n",
              rp.median, rp.worst, verdict(rp.worst < 50));
  std::printf("| points handed to the chart per redraw (most) | %d | | |\n", redrawPoints);
  std::printf(
      "| reference: 1 raw series of 100 000 points, antialiased / not | %.0f / %.0f ms "
      "| | |\n",
      raw.aa.median, raw.plain.median);
  std::printf("| reference: 20 series of 1200 points, antialiased / not | %.1f / %.1f ms | | |\n",
              bucketed.aa.median, bucketed.plain.median);
  std::printf(
      "| reference: the same with a min/max band each, antialiased / not | %.0f / %.0f ms "
      "| | |\n",
      banded.aa.median, banded.plain.median);
  std::printf(
      "| live lag, append to drawn (median / worst of %zu) | %.0f / %.0f ms | < 1000 ms "
      "| %s |\n",
      lag.n, lag.median, lag.worst, verdict(lag.n > 0 && lag.worst < 1000));
  std::printf("| live run first drawn after the writer started | %.0f ms | | |\n", appearedMs);
  std::printf(
      "| resident memory, loaded and drawn (before the window: %.0f MB) | %.0f MB | "
      "< 300 MB | %s |\n",
      rssBeforeMb, rssMb, verdict(rssMb < 300));
  std::printf("| peak resident memory (loaded / whole benchmark) | %.0f / %.0f MB | | |\n",
              hwmLoadedMb, hwmMb);
  std::printf("| longest GUI-thread stall (load, idle, live) | %.0f ms (%s) | < 50 ms | %s |\n",
              appStall, appStallPhase.c_str(), verdict(appStall < 50));
  std::printf("\nstalls by phase (longest gap of a 5 ms timer minus 5 ms):");
  for (const std::string& p : stalls.phases())
    if (p != "end") std::printf(" %s %.0f ms;", p.c_str(), stalls.worst(p));
  std::printf("\n");
  window.reset();
  if (!tmp.empty()) std::filesystem::remove_all(tmp);
  return ok && lag.n > 0 ? 0 : 1;
}
