// The chart worker and the panel that draws its frames: what a frame holds against the bucketing
// and smoothing it is built from, tagged requests replacing queued ones, forgetting a panel, and
// a panel drawing by its event loop alone (the live path) as well as by redrawNow().
#include <QApplication>
#include <QChart>
#include <QLabel>
#include <QLineSeries>
#include <QCategoryAxis>
#include <QFontMetrics>
#include <QImage>
#include <QValueAxis>

#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <random>
#include <set>

#include "fp4lab/widgets/chart_export.h"
#include "fp4lab/widgets/curve_panel.h"
#include "fp4lab/widgets/curve_worker.h"
#include "workbench_fixtures.h"

using namespace fp4lab;
using namespace fp4lab::widgets;
using fp4lab::testing::waitFor;

namespace {

// `runs` synthetic runs of `steps` noisy training rows each.
RunSnapshotsPtr snapshots(int runs, int steps, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0, 0.05);
  auto out = std::make_shared<RunSnapshots>();
  for (int r = 0; r < runs; ++r) {
    auto curves = std::make_shared<RunCurves>();
    curves->name = "run-" + std::to_string(r);
    for (int s = 1; s <= steps; ++s) {
      log::TrainRow row;
      row.step = s;
      row.tokens = 64 * s;
      row.wallSeconds = 0.01 * s;
      row.loss = float((2.0 + 0.1 * r) / std::sqrt(double(s)) * std::exp(noise(rng)));
      curves->train.push_back(row);
    }
    RunSnapshot snap;
    snap.id = "/runs/" + curves->name;
    snap.name = curves->name;
    snap.curves = curves;
    out->push_back(std::move(snap));
  }
  return out;
}

std::set<std::string> allIds(const RunSnapshots& s) {
  std::set<std::string> ids;
  for (const RunSnapshot& r : s) ids.insert(r.id);
  return ids;
}

FloatPoints toFloat(const Points& p) {
  FloatPoints out;
  for (const auto& [x, y] : p) out.emplace_back(float(x), float(y));
  return out;
}

}  // namespace

TEST_CASE("a frame is the bucketed, smoothed curve of every shown run", "[curve-worker]") {
  std::mt19937 rng(std::random_device{}());
  const int runs = std::uniform_int_distribution<int>(1, 8)(rng);
  const int steps = std::uniform_int_distribution<int>(10, 20000)(rng);
  const RunSnapshotsPtr snaps = snapshots(runs, steps, rng());
  CurveRequest request;
  request.series = "train/loss";
  request.runs = snaps;
  request.shown = allIds(*snaps);
  request.shown.erase(snaps->front().id);  // one run not shown
  request.selected = snaps->back().id;
  request.settings.smoothing = 0.6;
  request.plotWidth = std::uniform_int_distribution<int>(100, 1500)(rng);
  const bool follow = GENERATE(true, false);
  request.follow = follow;
  request.x0 = 0.2 * steps, request.x1 = 0.7 * steps;
  INFO("runs=" << runs << " steps=" << steps << " width=" << request.plotWidth
               << " follow=" << follow);
  CurveCache cache;
  const CurveFrame frame = computeFrame(request, cache);
  REQUIRE(frame.runs.size() == size_t(runs - 1));
  const int shown = runs - 1;
  if (shown == 0) return;
  CHECK(frame.buckets ==
        std::clamp(kChartPointBudget / shown, 50, std::max(50, request.plotWidth / 2)));
  if (follow) {
    CHECK(frame.x0 == 1);  // the data's first step
    CHECK(frame.x1 == double(float(steps)));
  } else {
    CHECK(frame.x0 == request.x0);
    CHECK(frame.x1 == request.x1);
  }
  for (const CurveFrame::Run& r : frame.runs) {
    const RunSnapshot* snap = nullptr;
    for (const RunSnapshot& s : *snaps)
      if (s.id == r.id) snap = &s;
    REQUIRE(snap);
    // The brute-force path: the series, log10, smoothing, single precision, bucketing.
    Points raw;
    for (const log::TrainRow& row : snap->curves->train)
      raw.emplace_back(double(row.step), std::log10(double(row.loss)));
    const FloatPoints smooth = toFloat(smoothCurve(raw, 0.6, 1));
    const BucketedCurve want = bucketCurve(smooth, frame.x0, frame.x1, frame.buckets);
    CHECK(r.line == want.line);
    CHECK(*r.shown == smooth);
    const bool detail = r.id == request.selected || size_t(shown) <= kDetailedRuns;
    CHECK(r.detail == detail);
    CHECK(r.selected == (r.id == request.selected));
    if (detail) {
      // Smoothed: the raw curve is the faint line, and the band is its min/max.
      const BucketedCurve faint = bucketCurve(toFloat(raw), frame.x0, frame.x1, frame.buckets);
      CHECK(r.faint == faint.line);
      REQUIRE(r.band.size() == 2 * faint.low.size());
      for (size_t i = 0; i < faint.low.size(); ++i) {
        const double a = r.band[2 * i].second, b = r.band[2 * i + 1].second;
        CHECK(std::min(a, b) == faint.low[i].second);
        CHECK(std::max(a, b) == faint.high[i].second);
      }
    } else {
      CHECK(r.faint.empty());
      CHECK(r.band.empty());
    }
  }
  // The cache serves the next frame of the same runs: the same curves, not rebuilt.
  const CurveFrame again = computeFrame(request, cache);
  REQUIRE(again.runs.size() == frame.runs.size());
  for (size_t i = 0; i < frame.runs.size(); ++i)
    CHECK(again.runs[i].shown.get() == frame.runs[i].shown.get());
  // New settings rebuild them.
  request.settings.smoothing = 0;
  const CurveFrame plain = computeFrame(request, cache);
  for (size_t i = 0; i < frame.runs.size(); ++i)
    CHECK(plain.runs[i].shown.get() != frame.runs[i].shown.get());
}

TEST_CASE("the worker replaces a tag's queued request and forgets a tag at once",
          "[curve-worker]") {
  CurveWorker worker;
  // A slow request of another tag keeps the worker busy while B's requests queue up.
  const RunSnapshotsPtr big = snapshots(20, 100000, 1), small = snapshots(3, 500, 2);
  int a = 0, b = 0;
  std::atomic<int> deliveredA{0}, deliveredB{0};
  std::atomic<uint64_t> lastB{0};
  worker.setDelivery(&a, [&](std::shared_ptr<const CurveFrame>) { ++deliveredA; });
  worker.setDelivery(&b, [&](std::shared_ptr<const CurveFrame> f) {
    ++deliveredB;
    lastB = f->generation;
  });
  CurveRequest slow;
  slow.series = "train/loss";
  slow.runs = big;
  slow.shown = allIds(*big);
  slow.settings.smoothing = 0.9;
  worker.submit(&a, slow);
  uint64_t generation = 0;
  for (int i = 0; i < 50; ++i) {
    CurveRequest r;
    r.series = "train/loss";
    r.runs = small;
    r.shown = allIds(*small);
    r.follow = false;
    r.x0 = i, r.x1 = 400 + i;
    generation = worker.submit(&b, r);
  }
  const std::shared_ptr<const CurveFrame> f = worker.wait(&b, generation);
  REQUIRE(f);
  CHECK(f->generation == generation);
  CHECK(f->x0 == 49);  // the last request's range
  CHECK(worker.replaced() >= 40);
  CHECK(deliveredB <= 10);
  CHECK(lastB == generation);
  CHECK(deliveredA == 1);
  // Forgotten while queued or computing: nothing more is delivered to it.
  worker.submit(&a, slow);
  worker.forget(&a);
  const int before = deliveredA;
  worker.submit(&b, CurveRequest{});
  worker.wait(&b, generation + 1);
  CHECK(deliveredA == before);
  CHECK(worker.wait(&a, 1) == nullptr);  // a forgotten tag does not block
}

TEST_CASE("a panel draws by its event loop, follows zoom and skips work while hidden",
          "[curve-worker]") {
  const RunSnapshotsPtr snaps = snapshots(6, 3000, 3);
  auto worker = std::make_shared<CurveWorker>();
  CurvePanel panel("train/loss", QStringLiteral("Training loss"), worker);
  panel.resize(900, 500);
  // Hidden: new runs ask for nothing.
  panel.setRuns(snaps, allIds(*snaps));
  QTest::qWait(200);
  CHECK(worker->computed() == 0);
  CHECK_FALSE(panel.hasData());
  // Shown: the frame timer asks the worker, and its frame is drawn without redrawNow().
  panel.show();
  REQUIRE(waitFor([&] { return panel.drawnPoints() > 0; }, 5000));
  CHECK(panel.hasData());
  int lines = 0;
  for (QAbstractSeries* s : panel.chart()->series())
    if (auto* l = qobject_cast<QLineSeries*>(s); l && !l->name().isEmpty()) ++lines;
  CHECK(lines == 6);
  // A zoom: the axis shows exactly the range asked for.
  panel.setXRange(1000, 2000);
  CHECK(panel.redrawNow() > 0);
  auto* x = qobject_cast<QValueAxis*>(panel.chart()->axes(Qt::Horizontal).value(0));
  REQUIRE(x);
  CHECK(x->min() == 1000);
  CHECK(x->max() == 2000);
  // The hover read-out names every run with a value there.
  CHECK(panel.readoutAt(1500).count(QLatin1Char('\n')) == 5);
  // Fewer shown runs: their series go.
  std::set<std::string> two = {snaps->at(0).id, snaps->at(1).id};
  panel.setRuns(snaps, two);
  panel.redrawNow();
  lines = 0;
  for (QAbstractSeries* s : panel.chart()->series())
    if (auto* l = qobject_cast<QLineSeries*>(s); l && !l->name().isEmpty()) ++lines;
  CHECK(lines == 2);
}

TEST_CASE("a panel with nothing to draw says why", "[curve-worker]") {
  const RunSnapshotsPtr snaps = snapshots(2, 50, 4);  // training rows only: no evaluations
  auto worker = std::make_shared<CurveWorker>();
  CurvePanel kl("eval/val_kl", QStringLiteral("KL to the reference"), worker);
  kl.setEmptyText(QStringLiteral("no reference model"));
  CurvePanel loss("train/loss", QStringLiteral("Training loss"), worker);
  for (CurvePanel* p : {&kl, &loss}) {
    p->resize(600, 400);
    p->setRuns(snaps, allIds(*snaps));
    p->show();
  }
  REQUIRE(waitFor([&] { return loss.drawnPoints() > 0; }, 5000));
  kl.redrawNow();
  auto* message = kl.findChild<QLabel*>(QStringLiteral("empty chart message"));
  REQUIRE(message);
  CHECK(kl.emptyMessage() == QStringLiteral("no reference model"));
  CHECK(message->isVisible());
  CHECK(message->text() == QStringLiteral("no reference model"));
  // A panel that draws shows no message.
  CHECK(loss.emptyMessage().isEmpty());
  auto* none = loss.findChild<QLabel*>(QStringLiteral("empty chart message"));
  REQUIRE(none);
  CHECK_FALSE(none->isVisible());
  // Nothing checked: the message says so, in every panel.
  loss.setRuns(snaps, {});
  loss.redrawNow();
  CHECK(loss.emptyMessage().contains(QStringLiteral("No run is checked")));
  CHECK(none->isVisible());
  // The default message names the chart.
  CurvePanel grad("train/grad_norm", QStringLiteral("Gradient norm"), worker);
  CHECK(grad.emptyText().contains(QStringLiteral("gradient norm")));
}

TEST_CASE("a pass-rate panel spans 0 to 1 whatever the rates", "[curve-worker]") {
  // Flat rates (0% early in a run, 100% once it has learnt the task) used to get a hair-thin
  // axis around the value, reading as -4e-05 to 4e-05; rates in between keep the same span.
  for (double rate : {0.0, 1.0, 0.35}) {
    auto curves = std::make_shared<RunCurves>();
    curves->name = "r";
    curves->evalColumns = {"val_loss", "pass_rate_math"};
    for (int s = 0; s <= 40; s += 10)
      curves->eval.push_back(log::EvalRow{s, 64 * s, 0.1 * s, {1.0, rate}});
    auto snaps = std::make_shared<RunSnapshots>();
    RunSnapshot snap;
    snap.id = "/runs/r", snap.name = "r", snap.curves = curves;
    snaps->push_back(snap);
    CurvePanel panel("eval/pass_rate_math", QStringLiteral("Pass rate: math"));
    CurveSettings linear;
    linear.logY = false;
    panel.setSettings(linear);
    panel.setValueBounds(0, 1);
    panel.resize(600, 400);
    panel.show();
    panel.setRuns(snaps, {"/runs/r"});
    REQUIRE(panel.redrawNow() > 0);
    const auto [lo, hi] = panel.yAxisRange();
    INFO("rate " << rate << ": axis " << lo << " to " << hi);
    CHECK(lo <= 0);
    CHECK(lo > -0.1);
    CHECK(hi >= 1);
    CHECK(hi < 1.1);
  }
}

TEST_CASE("the tokens axis reads 100k, 200k: whole, compact, never elided", "[curve-worker]") {
  const RunSnapshotsPtr snaps = snapshots(2, 3000, 5);  // row.tokens = 64 * step: to 192000
  CurvePanel panel("train/loss", QStringLiteral("Training loss"));
  CurveSettings s;
  s.x = XAxis::Tokens;
  panel.setSettings(s);
  panel.resize(500, 300);
  panel.show();
  panel.setRuns(snaps, allIds(*snaps));
  REQUIRE(panel.redrawNow() > 0);
  auto* x = qobject_cast<QCategoryAxis*>(panel.chart()->axes(Qt::Horizontal).value(0));
  REQUIRE(x);
  const QStringList labels = x->categoriesLabels();
  INFO(labels.join(QStringLiteral(" | ")).toStdString());
  REQUIRE(labels.size() >= 2);
  CHECK(labels.contains(QStringLiteral("100k")));
  CHECK(labels.contains(QStringLiteral("200k")));
  // Each label fits the room its tick has, so Qt never elides it.
  const double room = panel.chart()->plotArea().width() / (labels.size() - 1);
  const QFontMetrics metrics(x->labelsFont());
  for (const QString& label : labels) CHECK(metrics.horizontalAdvance(label) < room);
}

TEST_CASE("Save as PNG: the chart alone, at twice its size, named after it", "[curve-worker]") {
  const RunSnapshotsPtr snaps = snapshots(1, 200, 6);
  CurvePanel panel("train/loss", QStringLiteral("Training loss"));
  panel.resize(400, 300);
  panel.show();
  panel.setRuns(snaps, allIds(*snaps));
  REQUIRE(panel.redrawNow() > 0);
  fp4lab::testing::TempDir tmp;
  const QString clean = QString::fromStdString(tmp.file("clean.png"));
  const QString hovered = QString::fromStdString(tmp.file("hovered.png"));
  QString error;
  REQUIRE(panel.savePng(clean, &error));
  // The hover read-out is on screen: the saved image does not show it.
  auto* readout = panel.findChild<QLabel*>(QStringLiteral("hover readout"));
  REQUIRE(readout);
  readout->setText(QStringLiteral("run: 1.234"));
  readout->setStyleSheet(QStringLiteral("QLabel { background: #ff00ff; }"));
  readout->move(40, 40);
  readout->resize(120, 40);
  readout->show();
  REQUIRE(panel.savePng(hovered, &error));
  const QImage a(clean), b(hovered);
  REQUIRE_FALSE(a.isNull());
  auto* view = panel.findChild<QWidget*>(QStringLiteral("chart train/loss"));
  REQUIRE(view);
  CHECK(a.size() == view->size() * 2);
  CHECK(a.convertToFormat(QImage::Format_RGB32) == b.convertToFormat(QImage::Format_RGB32));
  CHECK(panel.suggestedName(QStringLiteral("png")).startsWith(QLatin1String("training-loss-")));
  CHECK(fp4lab::widgets::suggestedFileName(
            {QStringLiteral("Pass rate: math"), QStringLiteral("QAT / NVFP4 (seed 2)")},
            QStringLiteral("png")) == QStringLiteral("pass-rate-math-qat-nvfp4-seed-2.png"));
}

TEST_CASE("the hover read-out leaves out runs that ended before the hovered step",
          "[curve-worker]") {
  auto snaps = std::make_shared<RunSnapshots>(*snapshots(2, 1000, 7));
  // run-1 stopped at step 100.
  auto shorter = std::make_shared<RunCurves>(*(*snaps)[1].curves);
  shorter->train.resize(100);
  (*snaps)[1].curves = shorter;
  CurvePanel panel("train/loss", QStringLiteral("Training loss"));
  panel.resize(600, 400);
  panel.show();
  panel.setRuns(snaps, allIds(*snaps));
  REQUIRE(panel.redrawNow() > 0);
  CHECK(panel.readoutAt(50).count(QLatin1Char('\n')) == 1);  // both
  CHECK(panel.readoutAt(100).contains(QLatin1String("run-1")));
  const QString late = panel.readoutAt(800);
  CHECK(late.contains(QLatin1String("run-0")));
  CHECK_FALSE(late.contains(QLatin1String("run-1")));
}

TEST_CASE("past eight runs, lines get dash patterns as well as colours", "[curve-worker]") {
  const RunSnapshotsPtr snaps = snapshots(11, 50, 8);
  CurvePanel panel("train/loss", QStringLiteral("Training loss"));
  panel.resize(600, 400);
  panel.show();
  panel.setRuns(snaps, allIds(*snaps));
  REQUIRE(panel.redrawNow() > 0);
  int solid = 0, patterned = 0;
  std::set<int> styles;
  for (QAbstractSeries* s : panel.chart()->series()) {
    auto* line = qobject_cast<QLineSeries*>(s);
    if (!line || line->name().isEmpty()) continue;
    (line->pen().style() == Qt::SolidLine ? solid : patterned) += 1;
    styles.insert(int(line->pen().style()));
  }
  CHECK(solid == 8);
  CHECK(patterned == 3);
  CHECK(styles.size() == 4);  // solid and three patterns
}
