// The Compare tab and the run relations under it: references found among decoys, gap recovered,
// seed groups, and the view's tables, difference series and gap number against independent
// computations.
#include <catch2/catch.hpp>

#include <QAbstractSeries>
#include <QAbstractButton>
#include <QAction>
#include <QApplication>
#include <QAreaSeries>
#include <QChart>
#include <QChartView>
#include <QCheckBox>
#include <QClipboard>
#include <QComboBox>
#include <QValueAxis>
#include <QLabel>
#include <QLineSeries>
#include <QProgressBar>
#include <QSignalSpy>
#include <QTabBar>
#include <QTabWidget>
#include <QTableWidget>
#include <QTest>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "fp4lab/run/run_config.h"
#include "fp4lab/widgets/compare_view.h"
#include "fp4lab/widgets/run_relations.h"
#include "fp4lab/widgets/run_snapshot.h"

using fp4lab::RunState;
using fp4lab::run::RunConfig;
using namespace fp4lab::widgets;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
const std::string kRoot = "/tmp/fp4lab-compare-test/exp";

// A run folder under kRoot (none of it exists on disk: every comparison is lexical).
RunSnapshot makeRun(const std::string& name, std::vector<std::string> overrides,
                    std::vector<std::pair<int64_t, double>> valLoss = {}, int trainSteps = 0) {
  RunSnapshot s;
  s.id = kRoot + "/" + name;
  s.name = name;
  s.root = kRoot;
  s.folder.dir = s.id;
  s.folder.state = RunState::Finished;
  overrides.insert(overrides.begin(), "run.name=" + name);
  s.folder.config = RunConfig::fromYamlText("", overrides);
  s.folder.hasConfig = true;
  auto curves = std::make_shared<RunCurves>();
  curves->name = name;
  curves->recipe = s.folder.config.recipe;
  curves->evalColumns = {"val_loss", "val_kl"};
  for (const auto& [step, loss] : valLoss) {
    fp4lab::log::EvalRow row;
    row.step = step;
    row.values = {loss, std::isfinite(loss) ? loss / 100 : kNaN};
    curves->eval.push_back(row);
  }
  for (int step = 1; step <= trainSteps; ++step) {
    fp4lab::log::TrainRow row;
    row.step = step;
    row.loss = float(2.0 + 1.0 / step);
    row.tokensPerSecond = 1000;
    row.wallSeconds = step * 0.5;
    curves->train.push_back(row);
  }
  s.curves = curves;
  s.summary = summarize(s.folder, s.curves.get());
  return s;
}

// A run whose only evaluation logged `loss` at step `step`.
RunSnapshot withLoss(const std::string& name, std::vector<std::string> overrides, double loss,
                     int64_t step = 100) {
  return makeRun(name, std::move(overrides), {{step, loss}});
}

std::string model(const std::string& tail) {
  return "model.path=" + kRoot + "/" + tail;
}

int indexOf(const RunSnapshots& runs, const std::string& name) {
  for (size_t i = 0; i < runs.size(); ++i)
    if (runs[i].name == name) return int(i);
  FAIL("no run " << name);
  return -1;
}

RunSnapshotsPtr share(RunSnapshots runs) {
  std::sort(runs.begin(), runs.end(),
            [](const RunSnapshot& a, const RunSnapshot& b) { return a.id < b.id; });
  return std::make_shared<const RunSnapshots>(std::move(runs));
}

QLineSeries* seriesNamed(QChartView* view, const QString& name) {
  for (QAbstractSeries* s : view->chart()->series())
    if (s->objectName() == name) return qobject_cast<QLineSeries*>(s);
  return nullptr;
}

// The straightforward reference: B − A at each step either logged (finite values only), within
// both ranges, each interpolated by a scan for its bracketing points.
std::vector<std::pair<double, double>> expectedDifference(const Points& a, const Points& b) {
  Points fa, fb;
  for (const auto& p : a)
    if (std::isfinite(p.second)) fa.push_back(p);
  for (const auto& p : b)
    if (std::isfinite(p.second)) fb.push_back(p);
  std::vector<std::pair<double, double>> out;
  if (fa.empty() || fb.empty()) return out;
  const double lo = std::max(fa.front().first, fb.front().first);
  const double hi = std::min(fa.back().first, fb.back().first);
  std::set<double> xs;
  for (const auto& p : fa) xs.insert(p.first);
  for (const auto& p : fb) xs.insert(p.first);
  auto at = [](const Points& p, double x) {
    for (size_t i = 0; i < p.size(); ++i) {
      if (p[i].first == x) return p[i].second;
      if (i + 1 < p.size() && p[i].first < x && x < p[i + 1].first)
        return p[i].second +
               (x - p[i].first) / (p[i + 1].first - p[i].first) * (p[i + 1].second - p[i].second);
    }
    return kNaN;
  };
  for (double x : xs)
    if (x >= lo && x <= hi) out.emplace_back(x, at(fb, x) - at(fa, x));
  return out;
}

// The experiment's layout: sft, PTQ and QAT of both formats, decoys of another model.
RunSnapshots family() {
  return {
      withLoss("sft", {"recipe.name=sft", "model.path=builtin:tiny", "train.max_steps=200"}, 1.5),
      withLoss("base", {"recipe.name=sft", "model.path=builtin:tiny", "train.max_steps=0"}, 3.0),
      withLoss("ptq-mxfp4", {"recipe.name=ptq", "quant.format=mxfp4", model("sft/model")}, 2.0),
      withLoss("ptq-mxfp4-seed99",
               {"recipe.name=ptq", "quant.format=mxfp4", model("sft/model"), "run.seed=99"}, 2.2),
      withLoss("ptq-nvfp4", {"recipe.name=ptq", "quant.format=nvfp4", model("sft/model")}, 1.9),
      withLoss(
          "ptq-mxfp4-floor",
          {"recipe.name=ptq", "quant.format=mxfp4", "quant.scale_rule=floor", model("sft/model")},
          2.1),
      withLoss("other-sft", {"recipe.name=sft", "model.path=builtin:tiny", "optim.lr=0.01"}, 1.4),
      withLoss("ptq-mxfp4-other",
               {"recipe.name=ptq", "quant.format=mxfp4", model("other-sft/model")}, 2.5),
      withLoss("qat-mxfp4", {"recipe.name=qat", "quant.format=mxfp4", model("sft/model")}, 1.8),
      withLoss("qad-nvfp4", {"recipe.name=qad", "quant.format=nvfp4", model("./sft/model/")}, 1.55),
  };
}

}  // namespace

TEST_CASE("findReferences finds the SFT run and the matching PTQ run among decoys", "[compare]") {
  RunSnapshots runs = family();
  // More ways to name the SFT model, and chains through quantized runs.
  runs.push_back(
      withLoss("qat-ckpt",
               {"recipe.name=qat", "quant.format=mxfp4", model("sft/checkpoints/step-100")}, 1.7));
  runs.push_back(
      withLoss("qat-folder", {"recipe.name=qat", "quant.format=mxfp4", model("sft")}, 1.7));
  runs.push_back(withLoss(
      "qad-after-qat", {"recipe.name=qad", "quant.format=mxfp4", model("qat-mxfp4/model")}, 1.6));
  runs.push_back(withLoss(
      "qat-from-base", {"recipe.name=qat", "quant.format=nvfp4", "model.path=builtin:tiny"}, 2.4));
  runs.push_back(
      withLoss("qat-mxfp4-seed99",
               {"recipe.name=qat", "quant.format=mxfp4", model("sft/model"), "run.seed=99"}, 1.8));
  // A relative model.path, written from the folder above run.output_dir.
  RunSnapshot relative = withLoss(
      "qat-relative",
      {"recipe.name=qat", "quant.format=nvfp4", "run.output_dir=exp", "model.path=exp/sft/model"},
      1.7);
  runs.push_back(relative);
  const auto at = [&](const std::string& name) { return indexOf(runs, name); };
  const auto refs = [&](const std::string& name) { return findReferences(runs, size_t(at(name))); };

  CHECK(refs("qat-mxfp4").bf16 == at("sft"));
  CHECK(refs("qat-mxfp4").ptq == at("ptq-mxfp4"));  // not nvfp4, floor, seed 99, other
  CHECK(refs("qat-mxfp4-seed99").ptq == at("ptq-mxfp4-seed99"));  // the same seed first
  CHECK(refs("qad-nvfp4").bf16 == at("sft"));                     // "./sft/model/" normalised
  CHECK(refs("qad-nvfp4").ptq == at("ptq-nvfp4"));
  CHECK(refs("ptq-mxfp4").ptq == at("ptq-mxfp4"));  // itself
  CHECK(refs("ptq-mxfp4").bf16 == at("sft"));
  CHECK(refs("ptq-mxfp4-other").bf16 == at("other-sft"));
  CHECK(refs("qat-ckpt").bf16 == at("sft"));
  CHECK(refs("qat-ckpt").ptq == -1);  // the PTQ runs quantized sft/model, not this checkpoint
  CHECK(refs("qat-folder").bf16 == at("sft"));
  CHECK(refs("qad-after-qat").bf16 == at("sft"));  // through the QAT run
  CHECK(refs("qad-after-qat").ptq == -1);
  CHECK(refs("qat-from-base").bf16 == at("base"));  // the evaluation of builtin:tiny
  CHECK(refs("qat-from-base").ptq == -1);
  CHECK(refs("qat-relative").bf16 == at("sft"));
  CHECK(refs("qat-relative").ptq == at("ptq-nvfp4"));
  CHECK(refs("sft").bf16 == -1);
  CHECK(refs("sft").ptq == -1);

  // A run without a readable config has no references.
  runs[size_t(at("qat-mxfp4"))].folder.hasConfig = false;
  CHECK(refs("qat-mxfp4").bf16 == -1);
  CHECK(refs("qat-mxfp4").ptq == -1);
  CHECK(findReferences(runs, runs.size()).ptq == -1);
}

TEST_CASE("gapRecovered follows (PTQ - X) / (PTQ - BF16)", "[compare]") {
  CHECK(gapRecovered(2.0, 1.5, 1.8) == Approx(0.4));
  CHECK(gapRecovered(2.0, 1.5, 1.5) == Approx(1.0));
  CHECK(gapRecovered(2.0, 1.5, 2.0) == Approx(0.0));
  CHECK(gapRecovered(2.0, 1.5, 2.25) == Approx(-0.5));
  CHECK(std::isnan(gapRecovered(2.0, 2.0, 1.8)));  // no gap to recover
  CHECK(std::isnan(gapRecovered(kNaN, 1.5, 1.8)));
  CHECK(std::isnan(gapRecovered(2.0, kNaN, 1.8)));
  CHECK(std::isnan(gapRecovered(2.0, 1.5, kNaN)));
  CHECK(std::isnan(gapRecovered(INFINITY, 1.5, 1.8)));

  const RunSnapshots runs = family();
  const auto at = [&](const std::string& name) { return size_t(indexOf(runs, name)); };
  CHECK(gapRecovered(runs, at("qat-mxfp4")) == Approx((2.0 - 1.8) / (2.0 - 1.5)));
  CHECK(gapRecovered(runs, at("qad-nvfp4")) == Approx((1.9 - 1.55) / (1.9 - 1.5)));
  CHECK(gapRecovered(runs, at("ptq-mxfp4")) == 0);
  CHECK(std::isnan(gapRecovered(runs, at("sft"))));
  RunReferences overrides;
  overrides.ptq = int(at("ptq-mxfp4-other"));
  CHECK(gapRecovered(runs, at("qat-mxfp4"), overrides) == Approx((2.5 - 1.8) / (2.5 - 1.5)));
  overrides.bf16 = int(at("other-sft"));
  CHECK(gapRecovered(runs, at("qat-mxfp4"), overrides) == Approx((2.5 - 1.8) / (2.5 - 1.4)));
  overrides = {};
  overrides.ptq = 999;  // out of range: ignored
  CHECK(gapRecovered(runs, at("qat-mxfp4"), overrides) == Approx(0.4));

  // A missing validation loss: NaN.
  RunSnapshots missing = runs;
  missing[at("ptq-mxfp4")].summary.lastValLoss = kNaN;
  CHECK(std::isnan(gapRecovered(missing, at("qat-mxfp4"))));
}

TEST_CASE("gap recovered reads in words where a percentage would mislead", "[compare]") {
  RunSnapshots runs = family();
  const auto at = [&](const std::string& name) { return size_t(indexOf(runs, name)); };
  // An ordinary figure: the percentage, with the losses in the detail.
  GapText t = gapRecoveredText(runs, at("qat-mxfp4"));
  CHECK(t.text == "40.0%");
  CHECK(t.detail.find("PTQ 2.0000") != std::string::npos);
  CHECK(t.detail.find("BF16 1.5000") != std::string::npos);
  // Below the BF16 reference: over 100% means it beats BF16.
  runs[at("qat-mxfp4")].summary.lastValLoss = 1.2;
  t = gapRecoveredText(runs, at("qat-mxfp4"));
  CHECK(t.text == "beats BF16");
  CHECK(t.detail.find("160.0%") != std::string::npos);
  // Worse than PTQ: a negative percentage that says so.
  runs[at("qat-mxfp4")].summary.lastValLoss = 2.25;
  t = gapRecoveredText(runs, at("qat-mxfp4"));
  CHECK(t.text == "-50.0%");
  CHECK(t.detail.find("worse than its PTQ run") != std::string::npos);
  // A PTQ gap too small to recover as a percentage.
  runs[at("ptq-mxfp4")].summary.lastValLoss = 1.5004;
  runs[at("qat-mxfp4")].summary.lastValLoss = 1.5010;
  t = gapRecoveredText(runs, at("qat-mxfp4"));
  CHECK(t.text == "PTQ gap < 0.001");
  CHECK(t.detail.find("-150.0%") != std::string::npos);
  // A running run with only its step-0 evaluation: not yet.
  runs = family();
  auto curves = std::make_shared<RunCurves>();
  fp4lab::log::EvalRow row;
  row.step = 0;
  row.values = {2.0};
  curves->evalColumns = {"val_loss"};
  curves->eval.push_back(row);
  runs[at("qat-mxfp4")].curves = curves;
  runs[at("qat-mxfp4")].folder.state = fp4lab::RunState::Running;
  runs[at("qat-mxfp4")].summary.lastValLoss = 2.0;
  CHECK(gapRecoveredText(runs, at("qat-mxfp4")).text == "not yet");
  // No references: nothing.
  CHECK(gapRecoveredText(runs, at("sft")).text.empty());
}

TEST_CASE("seedGroups groups runs that differ only by seed", "[compare]") {
  const std::vector<std::string> qat = {"recipe.name=qat", "quant.format=mxfp4",
                                        model("sft/model")};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> all = qat;
    all.insert(all.end(), extra.begin(), extra.end());
    return all;
  };
  RunSnapshots runs = {
      withLoss("a-qat-seed1240", with({"run.seed=1240"}), 1.8),
      withLoss("b-qat", with({"run.seed=1234"}), 1.8),
      withLoss("c-qat-lr", with({"run.seed=1234", "optim.lr=0.002"}), 1.8),
      withLoss("d-qat-seed1235", with({"run.seed=1235", "train.threads=3"}), 1.8),  // operational
      withLoss("e-qat-lr-seed7", with({"run.seed=7", "optim.lr=0.002"}), 1.8),
      withLoss("f-unreadable", with({"run.seed=1236"}), 1.8),
      withLoss("g-nvfp4", {"recipe.name=qat", "quant.format=nvfp4", model("sft/model")}, 1.8),
  };
  runs[5].folder.hasConfig = false;
  const auto groups = seedGroups(runs);
  const std::vector<std::vector<std::size_t>> expected = {{1, 3, 0}, {4, 2}, {5}, {6}};
  CHECK(groups == expected);
}

TEST_CASE("CompareView lists exactly the differing config keys", "[compare]") {
  RunSnapshots runs = family();
  runs.push_back(withLoss("qad-mxfp4-t2",
                          {"recipe.name=qad", "quant.format=mxfp4", model("sft/model"),
                           "recipe.temperature=2", "optim.lr=0.002", "train.threads=2"},
                          1.6));
  const RunSnapshotsPtr shared = share(runs);
  CompareView view;
  view.resize(1000, 700);
  view.show();
  view.setRuns(shared);
  const std::string idA = kRoot + "/qat-mxfp4", idB = kRoot + "/qad-mxfp4-t2";
  view.setPair(idA, idB);

  // Independently: every flattened key whose text differs (the model paths are the same text).
  const RunConfig& a = (*shared)[size_t(indexOf(*shared, "qat-mxfp4"))].folder.config;
  const RunConfig& b = (*shared)[size_t(indexOf(*shared, "qad-mxfp4-t2"))].folder.config;
  std::vector<std::array<std::string, 3>> expected;
  const auto fa = a.flatten(), fb = b.flatten();
  REQUIRE(fa.size() == fb.size());
  for (size_t i = 0; i < fa.size(); ++i)
    if (fa[i].second != fb[i].second) expected.push_back({fa[i].first, fa[i].second, fb[i].second});
  // What the runs set differently, at least.
  std::set<std::string> keys;
  for (const auto& e : expected) keys.insert(e[0]);
  CHECK(keys == std::set<std::string>{"run.name", "recipe.name", "recipe.temperature", "optim.lr",
                                      "train.threads"});

  auto* table = view.findChild<QTableWidget*>(QStringLiteral("compareConfigTable"));
  REQUIRE(table);
  REQUIRE(table->rowCount() == int(expected.size()));
  for (int r = 0; r < table->rowCount(); ++r) {
    CHECK(table->item(r, 0)->text().toStdString() == expected[size_t(r)][0]);
    CHECK(table->item(r, 1)->text().toStdString() == expected[size_t(r)][1]);
    CHECK(table->item(r, 2)->text().toStdString() == expected[size_t(r)][2]);
  }
  // The same run twice: nothing differs.
  view.setPair(idA, idA);
  CHECK(table->rowCount() == 0);
}

TEST_CASE("CompareView draws B - A as a loop over the common steps computes it", "[compare]") {
  std::mt19937 rng(20240611);
  CompareView view;
  view.resize(1000, 700);
  view.show();
  auto* diffView = view.findChild<QChartView*>(QStringLiteral("compareDifferenceChart"));
  auto* overlayView = view.findChild<QChartView*>(QStringLiteral("compareOverlayChart"));
  REQUIRE(diffView);
  REQUIRE(overlayView);
  int overlapping = 0, disjoint = 0;
  for (int trial = 0; trial < 40; ++trial) {
    // Random step grids: different starts, ends and spacing; some rows NaN (not measured).
    auto grid = [&](int first, int last) {
      std::vector<std::pair<int64_t, double>> rows;
      std::uniform_int_distribution<int> gap(1, 40);
      std::uniform_real_distribution<double> value(1.0, 3.0), coin(0, 1);
      for (int step = first; step <= last; step += gap(rng))
        rows.emplace_back(step, coin(rng) < 0.15 ? kNaN : value(rng));
      return rows;
    };
    std::uniform_int_distribution<int> start(0, 300), length(0, 400);
    const int a0 = start(rng), b0 = trial % 5 == 4 ? a0 + 1000 : start(rng);  // some disjoint
    const auto rowsA = grid(a0, a0 + length(rng)), rowsB = grid(b0, b0 + length(rng));
    const std::vector<std::string> config = {"recipe.name=qat", "quant.format=mxfp4"};
    RunSnapshots runs = {makeRun("run-a", config, rowsA), makeRun("run-b", config, rowsB)};
    const RunSnapshotsPtr shared = share(runs);
    view.setRuns(shared);
    view.setPair(kRoot + "/run-a", kRoot + "/run-b");

    Points pa, pb;
    for (const auto& [s, v] : rowsA) pa.emplace_back(double(s), v);
    for (const auto& [s, v] : rowsB) pb.emplace_back(double(s), v);
    const auto expected = expectedDifference(pa, pb);
    (expected.empty() ? disjoint : overlapping)++;
    QLineSeries* diff = seriesNamed(diffView, QStringLiteral("difference"));
    REQUIRE(diff);
    const QList<QPointF> got = diff->points();
    INFO("trial " << trial);
    REQUIRE(got.size() == qsizetype(expected.size()));
    for (size_t i = 0; i < expected.size(); ++i) {
      CHECK(got[qsizetype(i)].x() == expected[i].first);
      CHECK(got[qsizetype(i)].y() == Approx(expected[i].second).margin(1e-12));
    }
    // The overlaid curves: the finite rows only.
    QLineSeries* lineA = seriesNamed(overlayView, QStringLiteral("runA"));
    REQUIRE(lineA);
    size_t finiteA = 0;
    for (const auto& [s, v] : rowsA) finiteA += std::isfinite(v);
    CHECK(size_t(lineA->count()) == finiteA);
    for (const QPointF& p : lineA->points()) CHECK(std::isfinite(p.y()));
  }
  CHECK(overlapping > 10);
  CHECK(disjoint > 3);

  // The helpers on their own: a point exactly at a step, and outside the range.
  const Points a = {{0, 1.0}, {10, 2.0}};
  CHECK(detail::interpolate(a, 5) == Approx(1.5));
  CHECK(detail::interpolate(a, 10) == 2.0);
  CHECK(std::isnan(detail::interpolate(a, 11)));
  CHECK(detail::difference(a, {{20, 1.0}, {30, 1.0}}).empty());
}

TEST_CASE("CompareView shows gap recovered as the formula gives it", "[compare]") {
  const RunSnapshotsPtr shared = share(family());
  CompareView view;
  view.resize(1000, 700);
  view.show();
  view.setRuns(shared);
  view.setPair(kRoot + "/qat-mxfp4", kRoot + "/qad-nvfp4");
  auto* valueA = view.findChild<QLabel*>(QStringLiteral("compareGapValueA"));
  auto* valueB = view.findChild<QLabel*>(QStringLiteral("compareGapValueB"));
  auto* barA = view.findChild<QProgressBar*>(QStringLiteral("compareGapBarA"));
  REQUIRE(valueA);
  REQUIRE(valueB);
  REQUIRE(barA);
  auto shown = [](double g) { return QString::number(g * 100, 'f', 1) + QStringLiteral("%"); };
  CHECK(valueA->text() == shown((2.0 - 1.8) / (2.0 - 1.5)));   // 40.0%
  CHECK(valueB->text() == shown((1.9 - 1.55) / (1.9 - 1.5)));  // 87.5%
  CHECK(barA->value() == 400);
  CHECK(valueA->accessibleName().isEmpty());
  CHECK_FALSE(valueA->accessibleDescription().isEmpty());

  // Overriding the PTQ reference: both runs measured against it.
  auto* ptq = view.findChild<QComboBox*>(QStringLiteral("comparePtqReference"));
  REQUIRE(ptq);
  const int other = ptq->findData(QString::fromStdString(kRoot + "/ptq-mxfp4-other"));
  REQUIRE(other > 0);
  ptq->setCurrentIndex(other);
  Q_EMIT ptq->activated(other);
  CHECK(valueA->text() == shown((2.5 - 1.8) / (2.5 - 1.5)));
  CHECK(valueB->text() == shown((2.5 - 1.55) / (2.5 - 1.5)));
  // The override survives new snapshots.
  view.setRuns(share(family()));
  CHECK(ptq->currentData().toString().toStdString() == kRoot + "/ptq-mxfp4-other");
  CHECK(valueA->text() == shown((2.5 - 1.8) / (2.5 - 1.5)));
  ptq->setCurrentIndex(0);
  Q_EMIT ptq->activated(0);
  CHECK(valueA->text() == shown(0.4));

  // An SFT run: no gap.
  view.setPair(kRoot + "/sft", kRoot + "/ptq-mxfp4");
  CHECK(valueA->text() == QStringLiteral("\u2014"));
  CHECK(valueB->text() == shown(0));
}

TEST_CASE("CompareView keeps its choices across snapshots and redraws only on change",
          "[compare]") {
  CompareView view;
  view.resize(900, 600);
  view.show();
  QSignalSpy selected(&view, &CompareView::runSelected);
  const RunSnapshotsPtr first = share(family());
  view.setRuns(first);
  auto* boxA = view.findChild<QComboBox*>(QStringLiteral("compareRunA"));
  auto* boxB = view.findChild<QComboBox*>(QStringLiteral("compareRunB"));
  auto* metric = view.findChild<QComboBox*>(QStringLiteral("compareMetric"));
  REQUIRE(boxA);
  REQUIRE(boxB);
  REQUIRE(metric);
  CHECK(metric->currentData().toString() == QStringLiteral("eval/val_loss"));
  const std::string idA = kRoot + "/qat-mxfp4", idB = kRoot + "/ptq-nvfp4";
  view.setPair(idA, idB);
  CHECK(boxA->currentData().toString().toStdString() == idA);
  CHECK(selected.isEmpty());  // picked by the program, not the user

  // The same runs again (the same curves): nothing is replaced.
  auto* overlayView = view.findChild<QChartView*>(QStringLiteral("compareOverlayChart"));
  QLineSeries* lineA = seriesNamed(overlayView, QStringLiteral("runA"));
  REQUIRE(lineA);
  QSignalSpy replaced(lineA, &QXYSeries::pointsReplaced);
  view.setRuns(std::make_shared<const RunSnapshots>(*first));
  CHECK(replaced.isEmpty());

  // New snapshots with runs added before and after, and A's curve grown.
  RunSnapshots more = family();
  more.push_back(withLoss("aaa-first", {"recipe.name=sft"}, 1.0));
  more.push_back(withLoss("zzz-last", {"recipe.name=sft"}, 1.0));
  for (auto& r : more)
    if (r.name == "qat-mxfp4")
      r = makeRun("qat-mxfp4", {"recipe.name=qat", "quant.format=mxfp4", model("sft/model")},
                  {{50, 1.9}, {100, 1.8}});
  view.setRuns(share(more));
  CHECK(view.runA() == idA);
  CHECK(view.runB() == idB);
  CHECK(boxA->currentData().toString().toStdString() == idA);
  CHECK(boxB->currentData().toString().toStdString() == idB);
  CHECK(replaced.count() >= 1);
  CHECK(lineA->count() == 2);

  // The user picks: the view says so; the metric choice stays.
  const int sft = boxB->findData(QString::fromStdString(kRoot + "/sft"));
  REQUIRE(sft >= 0);
  boxB->setCurrentIndex(sft);
  Q_EMIT boxB->activated(sft);
  REQUIRE(selected.count() == 1);
  CHECK(selected.front().front().value<std::string>() == kRoot + "/sft");
  const int kl = metric->findData(QStringLiteral("eval/val_kl"));
  REQUIRE(kl >= 0);
  metric->setCurrentIndex(kl);
  Q_EMIT metric->activated(kl);
  view.setRuns(share(family()));
  CHECK(metric->currentData().toString() == QStringLiteral("eval/val_kl"));
  CHECK(view.runB() == kRoot + "/sft");
  CHECK(lineA->count() == 1);  // back to one evaluation, of val_kl
  CHECK(lineA->points().front().y() == Approx(1.8 / 100));

  // A run that disappears stays chosen and comes back picked.
  RunSnapshots fewer = family();
  fewer.erase(fewer.begin() + indexOf(fewer, "qat-mxfp4"));
  view.setRuns(share(fewer));
  CHECK(boxA->currentIndex() == -1);
  CHECK(view.runA() == idA);
  view.setRuns(share(family()));
  CHECK(boxA->currentData().toString().toStdString() == idA);

  // Hidden: nothing drawn until shown again.
  view.hide();
  QSignalSpy replacedHidden(lineA, &QXYSeries::pointsReplaced);
  view.setRuns(share(more));
  CHECK(replacedHidden.isEmpty());
  view.show();
  CHECK(replacedHidden.count() >= 1);
}

TEST_CASE("CompareView groups seeds into a mean with a band", "[compare]") {
  const std::vector<std::string> qat = {"recipe.name=qat", "quant.format=mxfp4",
                                        model("sft/model")};
  auto with = [&](const std::string& seed) {
    std::vector<std::string> all = qat;
    all.push_back("run.seed=" + seed);
    return all;
  };
  RunSnapshots runs = family();
  runs.erase(runs.begin() + indexOf(runs, "ptq-mxfp4-seed99"));  // one mxfp4 PTQ: seed 1234's
  runs.push_back(makeRun("qat-mxfp4-seed1235", with("1235"), {{50, 2.0}, {100, 1.6}}));
  runs.push_back(makeRun("qat-mxfp4-seed1236", with("1236"), {{50, 2.4}, {100, 1.7}}));
  for (auto& r : runs)
    if (r.name == "qat-mxfp4") r = makeRun("qat-mxfp4", with("1234"), {{50, 2.2}, {100, 1.8}});
  CompareView view;
  view.resize(1000, 700);
  view.show();
  view.setRuns(share(runs));
  view.setPair(kRoot + "/qat-mxfp4", kRoot + "/ptq-mxfp4");
  auto* overlayView = view.findChild<QChartView*>(QStringLiteral("compareOverlayChart"));
  auto* group = view.findChild<QCheckBox*>(QStringLiteral("compareGroupSeeds"));
  REQUIRE(group);
  QAreaSeries* band = nullptr;
  for (QAbstractSeries* s : overlayView->chart()->series())
    if (s->objectName() == QStringLiteral("bandA")) band = qobject_cast<QAreaSeries*>(s);
  REQUIRE(band);
  QLineSeries* lineA = seriesNamed(overlayView, QStringLiteral("runA"));
  CHECK_FALSE(band->isVisible());
  CHECK(lineA->points().back().y() == Approx(1.8));
  group->setChecked(true);
  CHECK(band->isVisible());
  REQUIRE(lineA->count() == 2);
  CHECK(lineA->points()[0].y() == Approx((2.2 + 2.0 + 2.4) / 3));
  CHECK(lineA->points()[1].y() == Approx((1.8 + 1.6 + 1.7) / 3));
  CHECK(band->lowerSeries()->points()[1].y() == Approx(1.6));
  CHECK(band->upperSeries()->points()[0].y() == Approx(2.4));
  CHECK(lineA->name() == QStringLiteral("A: qat-mxfp4 \u00d73"));
  // Gap recovered: the mean of the seeds' (all against ptq-mxfp4: seeds 1235 and 1236 have no PTQ
  // run of their own and fall back to it).
  auto* valueA = view.findChild<QLabel*>(QStringLiteral("compareGapValueA"));
  const double g = ((2.0 - 1.8) + (2.0 - 1.6) + (2.0 - 1.7)) / 3 / (2.0 - 1.5);
  CHECK(valueA->text() == QString::number(g * 100, 'f', 1) + QStringLiteral("%"));

  // Copy CSV: a header and one row per step of A, B or B − A.
  auto* copy = view.findChild<QAction*>(QStringLiteral("compareOverlayChartCopyCsv"));
  REQUIRE(copy);
  copy->trigger();
  const QStringList lines =
      QGuiApplication::clipboard()->text().split(QLatin1Char('\n'), Qt::SkipEmptyParts);
  REQUIRE(lines.size() == 3);  // steps 50 and 100 (PTQ logged at 100)
  CHECK(lines[0] == QStringLiteral("step,A: qat-mxfp4 \u00d73,B: ptq-mxfp4,B - A"));
  CHECK(lines[2].startsWith(QStringLiteral("100,")));
}

TEST_CASE("CompareView names every interactive widget", "[compare]") {
  CompareView view;
  view.setRuns(share(family()));
  view.show();
  int checked = 0;
  for (QWidget* w : view.findChildren<QWidget*>()) {
    const bool interactive = qobject_cast<QComboBox*>(w) || qobject_cast<QAbstractButton*>(w) ||
                             qobject_cast<QTableWidget*>(w) || qobject_cast<QChartView*>(w) ||
                             qobject_cast<QProgressBar*>(w);
    // (The tables' corner buttons and the tab bar's scroll buttons belong to them.)
    if (!interactive || qobject_cast<QTableWidget*>(w->parentWidget()) ||
        qobject_cast<QTabBar*>(w->parentWidget()))
      continue;
    ++checked;
    INFO(w->metaObject()->className() << " " << w->objectName().toStdString());
    CHECK_FALSE(w->objectName().isEmpty());
    CHECK_FALSE(w->accessibleName().isEmpty());
    CHECK_FALSE(w->toolTip().isEmpty());
  }
  CHECK(checked == 5 + 1 + 2 + 2 + 2);  // combos, checkbox, tables, charts, bars
  auto* tabs = view.findChild<QTabWidget*>(QStringLiteral("compareTables"));
  REQUIRE(tabs);
  CHECK_FALSE(tabs->accessibleName().isEmpty());
  // Combo boxes have buddies.
  std::set<QWidget*> buddies;
  for (QLabel* l : view.findChildren<QLabel*>())
    if (l->buddy()) buddies.insert(l->buddy());
  for (QComboBox* box : view.findChildren<QComboBox*>()) {
    INFO(box->objectName().toStdString());
    CHECK(buddies.count(box) == 1);
  }
  // Value labels: a description, no name.
  for (QLabel* l : view.findChildren<QLabel*>()) {
    if (l->accessibleDescription().isEmpty()) continue;
    INFO(l->objectName().toStdString());
    CHECK(l->accessibleName().isEmpty());
  }
}

// ---- A look at it -------------------------------------------------------------------------------

namespace {

// A validation curve that falls from `start` to `end`, with a little noise.
std::vector<std::pair<int64_t, double>> falling(double start, double end, int steps, int every,
                                                std::mt19937& rng, int first = 0) {
  std::normal_distribution<double> noise(0, 0.006);
  std::vector<std::pair<int64_t, double>> rows;
  for (int s = first; s <= steps; s += every)
    rows.emplace_back(s, end + (start - end) * std::exp(-s / (steps / 4.0)) + noise(rng));
  return rows;
}

RunSnapshot realistic(const std::string& name, std::vector<std::string> overrides,
                      std::vector<std::pair<int64_t, double>> val, int trainSteps,
                      std::map<std::string, double> rates) {
  RunSnapshot s = makeRun(name, std::move(overrides), std::move(val), trainSteps);
  auto curves = std::make_shared<RunCurves>(*s.curves);
  for (const auto& [task, rate] : rates) {
    curves->evalColumns.push_back("pass_rate_" + task);
    for (auto& row : curves->eval) row.values.push_back(kNaN);
    if (!curves->eval.empty()) curves->eval.back().values.back() = rate;
  }
  for (auto& row : curves->eval) row.wallSeconds = double(row.step) * 2.1 + 30;
  s.curves = curves;
  s.summary = summarize(s.folder, s.curves.get());
  return s;
}

}  // namespace

TEST_CASE("CompareView screenshots", "[.screenshot]") {
  std::mt19937 rng(7);
  const std::string sft = "model.path=" + kRoot + "/sft/model";
  const std::string tasks = "eval.tasks=reasoning_language,false_refusal";
  RunSnapshots runs = {
      realistic("sft", {"recipe.name=sft", "train.max_steps=400", tasks},
                falling(2.9, 1.52, 400, 25, rng), 400,
                {{"reasoning_language", 0.97}, {"false_refusal", 0.96}}),
      realistic("ptq-mxfp4", {"recipe.name=ptq", "quant.format=mxfp4", sft, tasks}, {{0, 1.71}}, 0,
                {{"reasoning_language", 0.81}, {"false_refusal", 0.88}}),
      realistic("ptq-nvfp4", {"recipe.name=ptq", "quant.format=nvfp4", sft, tasks}, {{0, 1.63}}, 0,
                {{"reasoning_language", 0.88}, {"false_refusal", 0.91}}),
  };
  for (int seed = 0; seed < 3; ++seed) {
    const std::string suffix = seed == 0 ? "" : "-seed" + std::to_string(1234 + seed);
    const std::string s = "run.seed=" + std::to_string(1234 + seed);
    runs.push_back(realistic("qat-mxfp4" + suffix,
                             {"recipe.name=qat", "quant.format=mxfp4", sft, s, tasks,
                              "train.max_steps=300", "optim.lr=0.0001"},
                             falling(1.70, 1.585 + 0.01 * seed, 300, 20, rng), 300,
                             {{"reasoning_language", 0.95}, {"false_refusal", 0.94}}));
    runs.push_back(
        realistic("qad-mxfp4" + suffix,
                  {"recipe.name=qad", "quant.format=mxfp4", sft, s, tasks, "train.max_steps=300",
                   "optim.lr=0.0001", "recipe.teacher=" + kRoot + "/sft/model"},
                  falling(1.70, 1.545 + 0.008 * seed, 300, 20, rng), 300,
                  {{"reasoning_language", 0.96}, {"false_refusal", 0.95}}));
  }
  CompareView view;
  view.setRuns(share(runs));
  view.setPair(kRoot + "/qat-mxfp4", kRoot + "/qad-mxfp4");
  for (const auto& [w, h, grouped] :
       std::vector<std::tuple<int, int, bool>>{{1200, 800, false}, {700, 500, true}}) {
    view.resize(w, h);
    view.show();
    view.findChild<QCheckBox*>(QStringLiteral("compareGroupSeeds"))->setChecked(grouped);
    REQUIRE(QTest::qWaitForWindowExposed(&view));
    QTest::qWait(100);
    const QString path = QStringLiteral("/tmp/compare_%1x%2.png").arg(w).arg(h);
    REQUIRE(view.grab().save(path));
  }
}

TEST_CASE("CompareView's pass-rate overlay spans 0 to 1", "[compare]") {
  CompareView view;
  view.resize(1000, 700);
  view.show();
  RunSnapshots runs;
  for (const char* name : {"run-a", "run-b"}) {
    RunSnapshot s = makeRun(name, {"recipe.name=qat", "quant.format=nvfp4"}, {{0, 1.0}, {10, 0.9}});
    auto curves = std::make_shared<RunCurves>(*s.curves);
    curves->evalColumns.push_back("pass_rate_math");
    for (auto& row : curves->eval) row.values.push_back(1.0);  // 100% throughout: flat
    s.curves = curves;
    runs.push_back(s);
  }
  view.setRuns(share(runs));
  view.setPair(kRoot + "/run-a", kRoot + "/run-b");
  auto* box = view.findChild<QComboBox*>(QStringLiteral("compareMetric"));
  REQUIRE(box);
  const int i = box->findData(QStringLiteral("eval/pass_rate_math"));
  REQUIRE(i >= 0);
  box->setCurrentIndex(i);
  Q_EMIT box->activated(i);
  auto* overlayView = view.findChild<QChartView*>(QStringLiteral("compareOverlayChart"));
  REQUIRE(overlayView);
  auto* y = qobject_cast<QValueAxis*>(overlayView->chart()->axes(Qt::Vertical).value(0));
  REQUIRE(y);
  INFO("axis " << y->min() << " to " << y->max());
  CHECK(y->min() <= 0);
  CHECK(y->max() >= 1);
  CHECK(y->max() < 1.3);
}
