// The quantization inspector: the heatmap's colour core and pixels, the worst-layers model, and
// the run, layer and model views on synthetic run logs (the project's log writer) and on an
// analysis file written by the analyze library from a small model folder.
#include <catch2/catch.hpp>

#include <QAbstractButton>
#include <QAbstractScrollArea>
#include <QSplitter>
#include <QAbstractItemView>
#include <QComboBox>
#include <QFile>
#include <QHeaderView>
#include <QChartView>
#include <QValueAxis>
#include <QJsonArray>
#include <QLabel>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLineSeries>
#include <QScatterSeries>
#include <QMenu>
#include <QMenuBar>
#include <QScrollBar>
#include <QSignalSpy>
#include <QTabBar>
#include <QTabWidget>

#include <cmath>
#include <memory>
#include <random>

#include "fp4lab/analyze/analyze.h"
#include "fp4lab/io/safetensors.h"
#include "fp4lab/widgets/frontier_chart.h"
#include "fp4lab/widgets/heatmap_colors.h"
#include "fp4lab/widgets/heatmap_widget.h"
#include "fp4lab/widgets/main_window.h"
#include "fp4lab/widgets/quant_inspector.h"
#include "fp4lab/widgets/run_table_model.h"
#include "workbench_fixtures.h"

using namespace fp4lab;
using namespace fp4lab::widgets;
using fp4lab::testing::TempDir;
using fp4lab::testing::waitFor;
namespace hm = fp4lab::widgets::heatmap;

namespace {

QRgb pixelAt(const QImage& image, const QPointF& p) {
  return image.pixel(int(std::floor(p.x())), int(std::floor(p.y()))) | 0xff000000u;
}

// A snapshot of run folders written by writeRun, read with the real follower.
RunSnapshotsPtr snapshotsOf(const std::vector<std::string>& dirs) {
  auto runs = std::make_shared<RunSnapshots>();
  for (const auto& dir : dirs) {
    RunSnapshot s;
    s.id = dir;
    s.name = files::baseName(dir);
    s.folder = run::readRunFolder(dir);
    s.curves = std::make_shared<const RunCurves>(readRunCurves(s.name, files::join(dir, "log.h5")));
    runs->push_back(std::move(s));
  }
  return runs;
}

std::string quantRun(const TempDir& tmp, const std::string& name,
                     std::vector<std::string> layers = {"model.layers.0.self_attn.q_proj",
                                                        "model.layers.0.mlp.down_proj",
                                                        "model.layers.1.mlp.down_proj"},
                     std::function<float(const std::string&, size_t, int)> value = {},
                     int64_t blocks = 0, std::vector<size_t> blockLayers = {}) {
  testing::SyntheticRun r;
  r.dir = tmp.file(name);
  r.overrides = {"recipe.name=qat", "quant.format=nvfp4"};
  r.steps = 20;
  r.evalEvery = 5;
  r.quantLayers = std::move(layers);
  r.quantValue = std::move(value);
  r.blocks = blocks;
  r.blockLayers = std::move(blockLayers);
  r.blockValue = [](size_t layer, int64_t block, int step) {
    return float(1e-3 * double(layer + 1) + 1e-5 * double(block) + 1e-7 * step);
  };
  testing::writeRun(r);
  return r.dir;
}

}  // namespace

TEST_CASE("heatmap colours: the tables' ends, the reserved NaN grey, a diverging map centred on 0",
          "[inspector][heatmap]") {
  const auto& viridis = hm::colorTable(hm::ColorMap::Viridis);
  const auto& rdbu = hm::colorTable(hm::ColorMap::RdBu);
  CHECK(viridis[0] == 0xff440154u);    // matplotlib's viridis(0)
  CHECK(viridis[254] == 0xfffde725u);  // viridis(1)
  CHECK(viridis[127] == 0xff21908du);  // viridis(0.5)
  CHECK(rdbu[0] == 0xff053061u);       // deepest blue: the most negative
  CHECK(rdbu[127] == 0xfff7f7f7u);     // white: zero
  CHECK(rdbu[254] == 0xff67001fu);     // deepest red: the most positive
  CHECK(viridis[255] == hm::kNanColor);
  CHECK(rdbu[255] == hm::kNanColor);
  for (int i = 0; i < hm::kScaleColors; ++i) {
    CHECK(viridis[size_t(i)] != hm::kNanColor);
    CHECK(rdbu[size_t(i)] != hm::kNanColor);
  }
  CHECK(hm::colorIndex(NAN, {0, 1}) == hm::kNanIndex);
  CHECK(hm::colorIndex(INFINITY, {0, 1}) == hm::kNanIndex);
  CHECK(hm::colorIndex(-INFINITY, {0, 1}) == hm::kNanIndex);
  CHECK(hm::colorIndex(-5, {0, 1}) == 0);
  CHECK(hm::colorIndex(5, {0, 1}) == 254);

  const hm::Scale s = hm::autoScale({-1.0f, 3.0f, NAN, 0.5f}, hm::ColorMap::RdBu);
  CHECK(s.lo == -3.0);
  CHECK(s.hi == 3.0);
  CHECK(hm::colorIndex(0.0f, s) == 127);
  CHECK(hm::colorIndex(3.0f, s) == 254);
  CHECK(hm::colorIndex(-3.0f, s) == 0);
  // Symmetric: +v and -v sit at mirrored indices.
  CHECK(int(hm::colorIndex(1.0f, s)) + int(hm::colorIndex(-1.0f, s)) == 254);
  const hm::Scale v = hm::autoScale({2.0f, NAN, 7.0f}, hm::ColorMap::Viridis);
  CHECK(v.lo == 2.0);
  CHECK(v.hi == 7.0);
  const hm::Scale none = hm::autoScale({NAN}, hm::ColorMap::Viridis);
  CHECK(none.lo < none.hi);

  CHECK_FALSE(hm::higherIsWorse("sqnr_db"));
  CHECK_FALSE(hm::higherIsWorse("cosine"));
  CHECK(hm::higherIsWorse("rel_l2"));
  CHECK(hm::higherIsWorse("mse"));
  CHECK(hm::higherIsWorse("clip_frac"));
}

TEST_CASE("heatmap pixels: a known matrix gives the known colours at the known places",
          "[inspector][heatmap]") {
  HeatmapWidget w;
  // Row 0: min, middle, max; row 1: NaN, max, min.
  w.setData(2, 3, {0.0f, 5.0f, 10.0f, NAN, 10.0f, 0.0f}, {"first", "second"}, {"a", "b", "c"});
  const QSize size(600, 400);
  const QImage image = w.render(size);
  CHECK(pixelAt(image, w.cellCentre(0, 0, size)) == 0xff440154u);
  CHECK(pixelAt(image, w.cellCentre(0, 1, size)) == 0xff21908du);
  CHECK(pixelAt(image, w.cellCentre(0, 2, size)) == 0xfffde725u);
  CHECK(pixelAt(image, w.cellCentre(1, 0, size)) == hm::kNanColor);
  CHECK(pixelAt(image, w.cellCentre(1, 1, size)) == 0xfffde725u);
  CHECK(pixelAt(image, w.cellCentre(1, 2, size)) == 0xff440154u);
  // The image is one index per cell, NaN on the reserved index.
  REQUIRE(w.image().format() == QImage::Format_Indexed8);
  CHECK(w.image().size() == QSize(3, 2));
  CHECK(w.image().pixelIndex(0, 1) == hm::kNanIndex);
  CHECK(w.image().pixelIndex(0, 0) == 0);
  CHECK(w.image().pixelIndex(2, 0) == 254);
  // Hover text and hit testing.
  CHECK(w.cellAt(w.cellCentre(1, 2, size), size) == std::make_pair(1, 2));
  CHECK(w.cellAt(QPointF(1, 1), size) == std::make_pair(-1, -1));
  CHECK(w.cellText(0, 2).contains(QStringLiteral("first")));
  CHECK(w.cellText(0, 2).contains(QStringLiteral("c")));
  CHECK(w.cellText(0, 2).contains(QStringLiteral("10")));
  CHECK(w.cellText(1, 0).contains(QStringLiteral("not measured")));
  // CSV of the matrix: NaN left empty.
  const QStringList lines = w.csv().split(QLatin1Char('\n'), Qt::SkipEmptyParts);
  REQUIRE(lines.size() == 3);
  CHECK(lines[0] == QStringLiteral("row,a,b,c"));
  CHECK(lines[1] == QStringLiteral("first,0,5,10"));
  CHECK(lines[2] == QStringLiteral("second,,10,0"));

  SECTION("diverging: zero is white, the ends blue and red, NaN grey") {
    w.setData(1, 4, {-2.0f, 0.0f, 2.0f, NAN}, {"r"}, {"a", "b", "c", "d"}, hm::ColorMap::RdBu);
    const QImage d = w.render(size);
    CHECK(pixelAt(d, w.cellCentre(0, 0, size)) == 0xff053061u);
    CHECK(pixelAt(d, w.cellCentre(0, 1, size)) == 0xfff7f7f7u);
    CHECK(pixelAt(d, w.cellCentre(0, 2, size)) == 0xff67001fu);
    CHECK(pixelAt(d, w.cellCentre(0, 3, size)) == hm::kNanColor);
    CHECK(w.scale().lo == -w.scale().hi);
  }
  SECTION("zoom keeps the cell under the cursor; a click emits the cell") {
    w.resize(size);
    w.show();
    REQUIRE(QTest::qWaitForWindowExposed(&w));
    QSignalSpy spy(&w, &HeatmapWidget::cellActivated);
    QTest::mouseClick(&w, Qt::LeftButton, {}, w.cellCentre(1, 2, w.size()).toPoint());
    REQUIRE(spy.count() == 1);
    CHECK(spy.at(0).at(0).toInt() == 1);
    CHECK(spy.at(0).at(1).toInt() == 2);
    w.zoomAt(QPointF(2.5, 1.5), 0.5);
    CHECK(w.view().width() == Approx(1.5));
    CHECK(w.view().height() == Approx(1.0));
    CHECK(w.view().contains(QPointF(2.5, 1.5)));
    const QImage z = w.render(size);
    CHECK(pixelAt(z, w.cellCentre(1, 2, size)) == 0xff440154u);
    w.resetZoom();
    CHECK(w.view() == QRectF(0, 0, 3, 2));
  }
  SECTION("PNG and SVG exports") {
    TempDir tmp;
    const QString png = QString::fromStdString(tmp.file("map.png"));
    const QString svg = QString::fromStdString(tmp.file("map.svg"));
    REQUIRE(w.savePng(png, size));
    QImage back(png);
    CHECK(back.size() == size);
    CHECK((back.pixel(w.cellCentre(0, 2, size).toPoint()) | 0xff000000u) == 0xfffde725u);
    REQUIRE(w.saveSvg(svg, size));
    QFile f(svg);
    REQUIRE(f.open(QIODevice::ReadOnly));
    CHECK(f.readAll().contains("<svg"));
  }
  SECTION("no data: the reason in text, no cells") {
    w.setEmptyText(QStringLiteral("nothing here"));
    CHECK_FALSE(w.hasData());
    CHECK(w.cellAt(QPointF(300, 200), size) == std::make_pair(-1, -1));
  }
}

TEST_CASE("heatmap labels: the layer index is never cut, every column and the last one named",
          "[inspector][heatmap]") {
  const QFontMetricsF fm(QApplication::font());
  const QString label = QStringLiteral("model.layers.13.self_attn.q_proj");
  CHECK(HeatmapWidget::fitRowLabel(label, fm, 1000) == label);
  const double shortWidth = fm.horizontalAdvance(QStringLiteral("13.attn.q"));
  CHECK(HeatmapWidget::fitRowLabel(label, fm, shortWidth + 1) == QStringLiteral("13.attn.q"));
  // Narrower still: cut in the middle, the index kept.
  const QString cut =
      HeatmapWidget::fitRowLabel(QStringLiteral("13.mlp.experts.gate_up_proj"), fm, shortWidth);
  CHECK(cut.startsWith(QStringLiteral("13.")));
  CHECK(fm.horizontalAdvance(cut) <= shortWidth);

  // Four format columns in a narrow map: each named (upright), the last one included.
  HeatmapWidget w;
  std::vector<float> values(8 * 4, 1.0f);
  w.setData(8, 4, values, {}, {"mxfp4", "mxfp4-floor", "nvfp4", "nvfp4-2d"});
  const QSize narrow(320, 400);
  CHECK(w.uprightColumnLabels(narrow));
  CHECK_FALSE(w.uprightColumnLabels(QSize(900, 400)));
  // Upright labels take their room below the cells.
  CHECK(w.plotArea(narrow).bottom() < narrow.height() - fm.horizontalAdvance("nvfp4-2d"));
  // Many evaluation columns: the last (newest) is among those labelled, drawn ink under it.
  HeatmapWidget steps;
  QStringList names;
  for (int s = 0; s <= 40; s += 5) names << QStringLiteral("step %1").arg(s);
  steps.setData(3, int(names.size()), std::vector<float>(3 * names.size(), 1.0f), {}, names);
  const QSize size(420, 300);
  const QImage image = steps.render(size);
  const QRectF plot = steps.plotArea(size);
  const QPointF last = steps.cellCentre(0, int(names.size()) - 1, size);
  int ink = 0;
  for (int y = int(plot.bottom()) + 3; y < size.height(); ++y)
    for (int x = int(last.x()) - 3; x <= int(last.x()) + 3; ++x)
      if (qGray(image.pixel(x, y)) < 128) ++ink;
  CHECK(ink > 5);
}

TEST_CASE("worst layers: sorted by the metric's direction, NaN left out, a sound model",
          "[inspector][worst]") {
  testing::FailOnQtWarnings failOnWarnings;
  WorstLayersModel model;
  QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::Warning);
  const std::vector<std::string> layers = {"l0", "l1", "l2", "l3"};
  const std::vector<float> values = {3.0f, NAN, 1.0f, 2.0f};
  const auto order = [&] {
    std::vector<int> out;
    for (int r = 0; r < model.rowCount(); ++r) out.push_back(model.layerOf(r));
    return out;
  };
  model.setValues(layers, values, /*higherIsWorse=*/true, QStringLiteral("rel_l2"));
  CHECK(order() == std::vector<int>{0, 3, 2});
  CHECK(model.notMeasured() == 1);
  CHECK(model.data(model.index(0, 0)).toString() == QStringLiteral("l0"));
  CHECK(model.data(model.index(0, 1), Qt::UserRole).toDouble() == 3.0);
  CHECK(model.headerData(1, Qt::Horizontal).toString() == QStringLiteral("rel_l2"));
  model.setValues(layers, values, /*higherIsWorse=*/false, QStringLiteral("sqnr_db"));
  CHECK(order() == std::vector<int>{2, 3, 0});
  CHECK(model.headerData(0, Qt::Vertical).toInt() == 1);
  model.clear();
  CHECK(model.rowCount() == 0);
  CHECK(failOnWarnings.seen.empty());
}

TEST_CASE("inspector: a run without /quant, a metric not logged, a metric never measured",
          "[inspector]") {
  TempDir tmp;
  testing::SyntheticRun plain;
  plain.dir = tmp.file("bf16-run");
  plain.overrides = {"recipe.name=sft"};
  testing::writeRun(plain);
  const std::string nanMse =
      quantRun(tmp, "w4a16", {"model.layers.0.mlp.down_proj"},
               [](const std::string& m, size_t, int) { return m == "mse" ? NAN : 1.0f; });
  QuantInspector inspector;
  inspector.setRuns(snapshotsOf({plain.dir, nanMse}));
  inspector.setSelectedRun(plain.dir);
  inspector.refreshNow();
  CHECK_FALSE(inspector.runHeatmap()->hasData());
  CHECK(inspector.runHeatmap()->emptyText().contains(QStringLiteral("no /quant")));
  CHECK(inspector.runNote().contains(QStringLiteral("no /quant")));
  CHECK(inspector.worstLayers()->rowCount() == 0);

  inspector.setSelectedRun(nanMse);
  inspector.setMetric("sqnr_db");
  CHECK(inspector.runHeatmap()->hasData());
  inspector.setMetric("act_sqnr_db");
  CHECK_FALSE(inspector.runHeatmap()->hasData());
  CHECK(inspector.runNote().contains(QStringLiteral("does not log act_sqnr_db")));
  inspector.setMetric("mse");
  CHECK_FALSE(inspector.runHeatmap()->hasData());
  CHECK(inspector.runNote().contains(QStringLiteral("not measured")));
  // B without /quant: A − B is not drawn as zeros.
  inspector.setMetric("sqnr_db");
  inspector.setRunB(plain.dir);
  CHECK_FALSE(inspector.runHeatmap()->hasData());
  CHECK(inspector.runNote().contains(QStringLiteral("Run B")));
}

TEST_CASE("inspector run view: layers x evaluations, A − B with a layer missing in B is grey",
          "[inspector]") {
  TempDir tmp;
  const std::vector<std::string> layersA = {"model.layers.0.self_attn.q_proj",
                                            "model.layers.0.mlp.down_proj",
                                            "model.layers.1.mlp.down_proj"};
  // B lacks layer 1 of A and lists its layers in another order.
  const std::vector<std::string> layersB = {"model.layers.1.mlp.down_proj",
                                            "model.layers.0.self_attn.q_proj"};
  const auto valueA = [](const std::string&, size_t l, int step) {
    return float(10.0 * double(l + 1) + step);
  };
  const auto valueB = [](const std::string&, size_t l, int step) {
    return float(l == 0 ? 5.0 + 2.0 * step : 1.0);  // B's layer 0 is A's layer 2
  };
  const std::string a = quantRun(tmp, "qat-mxfp4", layersA, valueA);
  const std::string b = quantRun(tmp, "qat-nvfp4", layersB, valueB);
  QuantInspector inspector;
  inspector.setRuns(snapshotsOf({a, b}));
  inspector.setSelectedRun(a);
  inspector.setMetric("sqnr_db");
  inspector.refreshNow();
  HeatmapWidget* map = inspector.runHeatmap();
  REQUIRE(map->hasData());
  CHECK(map->rows() == 3);
  CHECK(map->cols() == 4);  // evaluations at steps 5, 10, 15, 20
  CHECK(map->colorMap() == hm::ColorMap::Viridis);
  CHECK(map->value(2, 3) == 30.0f + 20.0f);
  CHECK(map->value(0, 0) == 10.0f + 5.0f);
  // Worst by sqnr_db (lower is worse) at the last evaluation: layer 0, 1, 2.
  REQUIRE(inspector.worstLayers()->rowCount() == 3);
  CHECK(inspector.worstLayers()->layerOf(0) == 0);
  CHECK(inspector.worstLayers()->layerOf(2) == 2);
  inspector.setMetric("rel_l2");  // higher is worse: reversed
  CHECK(inspector.worstLayers()->layerOf(0) == 2);

  inspector.setMetric("sqnr_db");
  inspector.setRunB(b);
  REQUIRE(map->hasData());
  CHECK(map->colorMap() == hm::ColorMap::RdBu);
  CHECK(map->scale().lo == -map->scale().hi);
  for (int k = 0; k < 4; ++k) {
    const int step = 5 * (k + 1);
    CHECK(map->value(0, k) == Approx((10.0 + step) - 1.0));
    CHECK(std::isnan(map->value(1, k)));  // missing in B
    CHECK(map->image().pixelIndex(k, 1) == hm::kNanIndex);
    CHECK(map->value(2, k) == Approx((30.0 + step) - (5.0 + 2.0 * step)));
  }
  CHECK(
      inspector.runNote().contains(QStringLiteral("1 of qat-mxfp4's layers are not in qat-nvfp4")));
  // The missing layer is not a worst layer; A − B of sqnr_db, lowest first: layer 2 (10) before
  // layer 0 (10 + 20 - 1 = 29 at step 20).
  CHECK(inspector.worstLayers()->rowCount() == 2);
  CHECK(inspector.worstLayers()->notMeasured() == 1);
  CHECK(inspector.worstLayers()->layerOf(0) == 2);

  SECTION("a step B did not measure is NaN") {
    RunCurves ca = readRunCurves("a", files::join(a, "log.h5"));
    RunCurves cb = readRunCurves("b", files::join(b, "log.h5"));
    cb.quantSteps[1] = 11;  // B measured step 11, not 10
    const detail::QuantMatrix m = detail::differenceMatrix(ca, cb, "sqnr_db");
    CHECK(m.missingSteps == 1);
    CHECK(m.missingLayers == 1);
    CHECK(std::isnan(m.values[0 * 4 + 1]));
    CHECK(std::isfinite(m.values[0 * 4 + 2]));
  }
}

TEST_CASE("inspector layer view: the block map read off the GUI thread, or why there is none",
          "[inspector][layer]") {
  TempDir tmp;
  const std::string withBlocks =
      quantRun(tmp, "blocks", {"model.layers.0.mlp.up_proj", "model.layers.0.mlp.down_proj"}, {},
               /*blocks=*/12, /*blockLayers=*/{0});
  const std::string noBlocks = quantRun(tmp, "no-blocks");
  QuantInspector inspector;
  inspector.setRuns(snapshotsOf({withBlocks, noBlocks}));
  inspector.setSelectedRun(withBlocks);
  inspector.refreshNow();
  QSignalSpy loaded(&inspector, &QuantInspector::layerBlocksLoaded);
  inspector.showLayer(0, 1);  // step 10
  REQUIRE(waitFor([&] { return loaded.count() == 1; }));
  // The metric against the step: ticks on whole steps, not at the padded range's ends.
  auto* metricView = inspector.findChild<QChartView*>(QStringLiteral("layer metric chart"));
  REQUIRE(metricView);
  const auto stepAxes = metricView->chart()->axes(Qt::Horizontal);
  REQUIRE(stepAxes.size() == 1);
  auto* steps = qobject_cast<QValueAxis*>(stepAxes.front());
  REQUIRE(steps);
  CHECK(steps->min() == std::floor(steps->min()));
  CHECK(steps->max() == std::floor(steps->max()));
  CHECK(steps->min() < steps->max());
  HeatmapWidget* blocks = inspector.layerBlocks();
  REQUIRE(blocks->hasData());
  REQUIRE(blocks->rows() * blocks->cols() == 12);
  for (int i = 0; i < 12; ++i)
    CHECK(blocks->value(i / blocks->cols(), i % blocks->cols()) ==
          float(1e-3 * 1 + 1e-5 * i + 1e-7 * 10));
  // Layer 1 was declared with blocks but none were logged: said, not drawn as zeros.
  inspector.showLayer(1);
  REQUIRE(waitFor([&] { return loaded.count() == 2; }));
  CHECK_FALSE(blocks->hasData());
  CHECK(inspector.layerNote().contains(QStringLiteral("not measured")));
  // A log without /quant/blocks.
  inspector.setSelectedRun(noBlocks);
  inspector.showLayer(0);
  REQUIRE(waitFor([&] { return loaded.count() == 3; }));
  CHECK_FALSE(blocks->hasData());
  CHECK(inspector.layerNote().contains(QStringLiteral("no /quant/blocks")));
  CHECK(detail::blockGridColumns(12, 3) == 4);
  CHECK(detail::blockGridColumns(12) == 4);
  CHECK(detail::blockGridColumns(7) == 7);
  CHECK(detail::nearestColumn({5, 10, 15}, 11) == 1);
  CHECK(detail::nearestColumn({5, 10, 15}, 100) == 2);
  CHECK(detail::nearestColumn({}, 3) == -1);
}

TEST_CASE("inspector layer view: the weight's shape from the log, a step picker, run B beside A",
          "[inspector][layer]") {
  TempDir tmp;
  const std::vector<std::string> layers = {"model.layers.0.mlp.up_proj",
                                           "model.layers.0.mlp.down_proj"};
  // A: 24 blocks of a 6-row weight, every 5 steps; B: another format's 48 blocks of the same
  // 6 rows, larger errors, every 10 steps (so A's step 5 is not one of B's).
  const auto blockRun = [&](const std::string& name, int64_t blocks, int evalEvery, float scale) {
    testing::SyntheticRun r;
    r.dir = tmp.file(name);
    r.overrides = {"recipe.name=qat",
                   "quant.format=" + std::string(blocks == 24 ? "nvfp4" : "mxfp4")};
    r.steps = 20;
    r.evalEvery = evalEvery;
    r.quantLayers = layers;
    r.blocks = blocks;
    r.blockRows = 6;
    r.blockValue = [scale](size_t layer, int64_t block, int step) {
      return scale * float(1e-3 * double(layer + 1) + 1e-5 * double(block) + 1e-7 * step);
    };
    testing::writeRun(r);
    return r.dir;
  };
  const std::string a = blockRun("qat-nvfp4", 24, 5, 1.0f);
  const std::string b = blockRun("qat-mxfp4", 48, 10, 3.0f);
  // The weights the histograms analyse: A's checkpoint of step 5 (6 x 64: 24 NVFP4 blocks), B's
  // of step 10 (6 x 256: 48 MXFP4 blocks); neither kept a final model.
  const auto weights = [&](const std::string& dir, int64_t cols) {
    files::createDirectories(dir);
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    io::SafetensorsWriter writer;
    for (const auto& name : layers) {
      std::vector<float> w(size_t(6 * cols));
      for (float& v : w) v = normal(rng);
      writer.addFloat32(name + ".weight", {6, cols}, w);
    }
    writer.write(files::join(dir, "model.safetensors"));
    files::writeFileAtomically(files::join(dir, "config.json"), "{\"model_type\": \"llama\"}");
  };
  weights(files::join(a, "checkpoints/step-5"), 64);
  weights(files::join(b, "checkpoints/step-10"), 256);
  QuantInspector inspector;
  QSignalSpy histograms(&inspector, &QuantInspector::layerHistogramsLoaded);
  inspector.setRuns(snapshotsOf({a, b}));
  inspector.setSelectedRun(a);
  inspector.refreshNow();
  QSignalSpy loaded(&inspector, &QuantInspector::layerBlocksLoaded);
  inspector.showLayer(1);  // the last evaluation, step 20
  REQUIRE(waitFor([&] { return loaded.count() == 1; }));
  HeatmapWidget* mapA = inspector.layerBlocks();
  REQUIRE(mapA->hasData());
  CHECK(mapA->rows() == 6);  // the log's `rows`, not a near-square guess (4 x 6)
  CHECK(mapA->cols() == 4);
  CHECK(inspector.layerNote().contains(QStringLiteral("6 weight rows of 4 blocks")));
  CHECK(inspector.layerBlocksB()->isHidden());
  // No weights kept at step 20: said, not drawn.
  REQUIRE(waitFor([&] { return histograms.count() == 1; }));
  CHECK(inspector.layerWeightHistogram()->values().empty());
  CHECK(inspector.layerWeightHistogram()->emptyText().contains(QStringLiteral("no weights")));

  // The step picker lists A's evaluations; picking step 5 shows step 5's blocks.
  QComboBox* steps = inspector.layerStepBox();
  REQUIRE(steps->count() == 4);
  CHECK(steps->currentText() == QStringLiteral("step 20"));
  steps->setCurrentIndex(0);
  steps->activated(0);
  REQUIRE(waitFor([&] { return loaded.count() == 2; }));
  CHECK(mapA->value(0, 1) == float(1e-3 * 2 + 1e-5 * 1 + 1e-7 * 5));
  CHECK(mapA->title().contains(QStringLiteral("step 5")));
  // Step 5's checkpoint: every weight in the |w| histogram, every NVFP4 block in the scale codes.
  REQUIRE(waitFor([&] { return histograms.count() == 2; }));
  const auto sum = [](const BarChartWidget* h) {
    double t = 0;
    for (double v : h->values()) t += v;
    return t;
  };
  CHECK(sum(inspector.layerWeightHistogram()) == 6 * 64);
  CHECK(sum(inspector.layerScaleHistogram()) == 24);

  // Run B: its map beside A's, B's nearest evaluation to step 5 (step 10), one colour scale.
  inspector.setRunB(b);
  REQUIRE(waitFor([&] { return loaded.count() == 3; }));
  HeatmapWidget* mapB = inspector.layerBlocksB();
  REQUIRE_FALSE(mapB->isHidden());
  REQUIRE(mapB->hasData());
  CHECK(mapB->rows() == 6);
  CHECK(mapB->cols() == 8);
  CHECK(mapB->value(0, 1) == 3.0f * float(1e-3 * 2 + 1e-5 * 1 + 1e-7 * 10));
  CHECK(mapB->title().contains(QStringLiteral("qat-mxfp4")));
  CHECK(inspector.layerNote().contains(QStringLiteral("nearest evaluation, step 10")));
  CHECK(inspector.layerNote().contains(QStringLiteral("one colour scale")));
  CHECK(mapA->scale().lo == mapB->scale().lo);
  CHECK(mapA->scale().hi == mapB->scale().hi);
  CHECK(mapA->scale().lo == Approx(1e-3 * 2 + 1e-7 * 5));
  CHECK(mapB->scale().hi == Approx(3 * (1e-3 * 2 + 1e-5 * 47 + 1e-7 * 10)));
  // B's scale codes from its step-10 checkpoint, in MXFP4 (E8M0): 48 blocks.
  REQUIRE(waitFor([&] { return histograms.count() == 3; }));
  CHECK_FALSE(inspector.layerScaleHistogramB()->isHidden());
  CHECK(sum(inspector.layerScaleHistogramB()) == 48);
  CHECK(sum(inspector.layerScaleHistogram()) == 24);
  // A step B measured: the same step on both.
  steps->setCurrentIndex(1);
  steps->activated(1);
  REQUIRE(waitFor([&] { return loaded.count() == 4; }));
  CHECK(mapB->title().contains(QStringLiteral("step 10")));
  CHECK_FALSE(inspector.layerNote().contains(QStringLiteral("nearest")));
  // A run B without this layer: said beside A's map.
  const std::string other = quantRun(tmp, "other", {"model.layers.5.mlp.up_proj"}, {}, 4);
  inspector.setRuns(snapshotsOf({a, b, other}));
  inspector.setRunB(other);
  REQUIRE(waitFor([&] { return loaded.count() == 5; }));
  CHECK_FALSE(mapB->hasData());
  CHECK(mapB->emptyText().contains(QStringLiteral("has no layer")));
  CHECK(mapA->hasData());
  // No run B: one map again.
  inspector.setRunB("");
  REQUIRE(waitFor([&] { return loaded.count() == 6; }));
  CHECK(mapB->isHidden());
}

TEST_CASE("inspector model view: an analysis file written by the analyze library opens",
          "[inspector][model]") {
  TempDir tmp;
  // A tiny model: two layers, one whose 48 columns MXFP4's 32-blocks cannot measure.
  const std::string model = tmp.file("model");
  files::createDirectories(model);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  const std::vector<std::tuple<std::string, int64_t, int64_t>> shapes = {
      {"model.layers.0.mlp.down_proj", 32, 64}, {"model.layers.0.mlp.up_proj", 16, 48}};
  io::SafetensorsWriter writer;
  for (const auto& [name, rows, cols] : shapes) {
    std::vector<float> w(size_t(rows * cols));
    for (float& v : w) v = normal(rng);
    writer.addFloat32(name + ".weight", {rows, cols}, w);
  }
  writer.write(files::join(model, "model.safetensors"));
  files::writeFileAtomically(files::join(model, "config.json"), "{\"model_type\": \"llama\"}");
  analyze::Options options;
  options.modelDir = model;
  options.formats = {"mxfp4", "nvfp4"};
  options.threads = 1;
  const analyze::Analysis analysis = analyze::analyzeModel(options);
  const std::string file = tmp.file("analysis.h5");
  analyze::writeAnalysisFile(analysis, file);

  QuantInspector inspector;
  QSignalSpy loaded(&inspector, &QuantInspector::analysisLoaded);
  inspector.openAnalysis(QString::fromStdString(file));
  REQUIRE(waitFor([&] { return loaded.count() == 1; }));
  REQUIRE(loaded.at(0).at(0).toBool());
  // The file's label: its name first, cut in the middle when short of room, whole in the tooltip.
  QLabel* fileLabel = nullptr;
  for (QLabel* l : inspector.findChildren<QLabel*>())
    if (l->accessibleDescription() == QStringLiteral("analysis file")) fileLabel = l;
  REQUIRE(fileLabel);
  CHECK(fileLabel->toolTip().startsWith(QStringLiteral("analysis.h5 in ")));
  fileLabel->resize(160, fileLabel->height());
  QTest::qWait(10);
  CHECK(fileLabel->text().startsWith(QStringLiteral("analysis.h5")));
  CHECK(fileLabel->text().contains(QChar(0x2026)));
  HeatmapWidget* map = inspector.modelHeatmap();
  REQUIRE(map->hasData());
  REQUIRE(map->rows() == int(analysis.layers.size()));
  REQUIRE(map->cols() == 2);
  const auto& names = analyze::metricNames();
  const size_t sqnr = size_t(std::find(names.begin(), names.end(), "sqnr_db") - names.begin());
  for (const auto& e : analysis.entries) {
    const int col = e.format == "mxfp4" ? 0 : 1;
    const float shown = map->value(int(e.layer), col);
    if (e.measured)
      CHECK(shown == Approx(analyze::metricValues(e.stats)[sqnr]));
    else
      CHECK(std::isnan(shown));
  }
  // The up_proj (48 columns) is not measured in MXFP4: grey, and said.
  int upRow = -1;
  for (size_t l = 0; l < analysis.layers.size(); ++l)
    if (analysis.layers[l].module == "model.layers.0.mlp.up_proj") upRow = int(l);
  REQUIRE(upRow >= 0);
  CHECK(map->image().pixelIndex(0, upRow) == hm::kNanIndex);
  CHECK(inspector.modelNote().contains(QStringLiteral("not measured")));

  // A click on the down_proj in NVFP4: its 32 x 4 block map, its histograms.
  const int downRow = 1 - upRow;
  map->cellActivated(downRow, 1);
  REQUIRE(inspector.modelBlocks()->hasData());
  CHECK(inspector.modelBlocks()->rows() == 32);
  CHECK(inspector.modelBlocks()->cols() == 64 / 16);
  double weights = 0, scales = 0;
  for (double v : inspector.weightHistogram()->values()) weights += v;
  for (double v : inspector.scaleHistogram()->values()) scales += v;
  CHECK(weights == 32 * 64);
  CHECK(scales == 32 * 64 / 16);
  // The up_proj in MXFP4: says so instead of drawing.
  map->cellActivated(upRow, 0);
  CHECK_FALSE(inspector.modelBlocks()->hasData());
  CHECK(inspector.modelBlocks()->emptyText().contains(QStringLiteral("not measured")));
  CHECK(inspector.scaleHistogram()->values().empty());

  // Beside: MXFP4's block map and scale codes next to NVFP4's, on one colour scale.
  QComboBox* beside = inspector.modelCompareBox();
  REQUIRE(beside->isEnabled());
  REQUIRE(beside->count() == 3);  // (none), mxfp4, nvfp4
  CHECK(inspector.modelBlocksB()->isHidden());
  beside->setCurrentIndex(beside->findText(QStringLiteral("mxfp4")));
  beside->activated(beside->currentIndex());
  map->cellActivated(downRow, 1);
  HeatmapWidget* a = inspector.modelBlocks();
  HeatmapWidget* b = inspector.modelBlocksB();
  REQUIRE_FALSE(b->isHidden());
  REQUIRE(a->hasData());
  REQUIRE(b->hasData());
  CHECK(a->cols() == 64 / 16);
  CHECK(b->rows() == 32);
  CHECK(b->cols() == 64 / 32);
  const analyze::Entry* mx = nullptr;
  for (const auto& e : analysis.entries)
    if (int(e.layer) == downRow && e.format == "mxfp4") mx = &e;
  REQUIRE(mx);
  for (int i = 0; i < 32 * 2; ++i) CHECK(b->value(i / 2, i % 2) == mx->blockMse[size_t(i)]);
  CHECK(a->scale().lo == b->scale().lo);
  CHECK(a->scale().hi == b->scale().hi);
  double lo = INFINITY, hi = -INFINITY;
  for (const HeatmapWidget* m : {a, b})
    for (int r = 0; r < m->rows(); ++r)
      for (int c = 0; c < m->cols(); ++c)
        lo = std::min(lo, double(m->value(r, c))), hi = std::max(hi, double(m->value(r, c)));
  CHECK(a->scale().lo == Approx(lo));
  CHECK(a->scale().hi == Approx(hi));
  double mxScales = 0;
  for (double v : inspector.scaleHistogramB()->values()) mxScales += v;
  CHECK(mxScales == 32 * 64 / 32);
  // The same format beside itself shows one map; (none) hides the second again.
  map->cellActivated(downRow, 0);
  CHECK(b->isHidden());
  beside->setCurrentIndex(0);
  beside->activated(0);
  map->cellActivated(downRow, 1);
  CHECK(b->isHidden());
  CHECK(inspector.scaleHistogramB()->isHidden());

  // Not an analysis file.
  inspector.openAnalysis(QString::fromStdString(tmp.file("missing.h5")));
  REQUIRE(waitFor([&] { return loaded.count() == 2; }));
  CHECK_FALSE(loaded.at(1).at(0).toBool());
  CHECK(inspector.modelNote().contains(QStringLiteral("Cannot open")));
}

TEST_CASE("inspector in the window: a Quantization tab, File > Open analysis, named widgets",
          "[inspector][a11y]") {
  TempDir tmp;
  const std::string run = quantRun(tmp, "runs/qat-nvfp4");
  WorkbenchOptions options;
  options.roots = {QString::fromStdString(tmp.file("runs"))};
  options.program = QStringLiteral("/bin/false");
  MainWindow w(options);
  w.resize(1200, 800);
  w.show();
  REQUIRE(QTest::qWaitForWindowExposed(&w));
  REQUIRE(w.inspector());
  const int tab = w.tabOf(w.inspector());
  REQUIRE(tab >= 0);
  CHECK(w.centralTabs()->tabText(tab) == QStringLiteral("&Quantization"));
  QAction* open = w.action(QStringLiteral("open analysis"));
  REQUIRE(open);
  bool inFileMenu = false;
  for (QAction* m : w.menuBar()->actions())
    if (m->menu() && m->text() == QStringLiteral("&File"))
      inFileMenu = m->menu()->actions().contains(open);
  CHECK(inFileMenu);
  // The selected run reaches the inspector through the same snapshots as the charts.
  REQUIRE(waitFor(
      [&] {
        return w.runsModel()->rowCount() == 1 && w.lastSnapshots() && !w.lastSnapshots()->empty() &&
               w.lastSnapshots()->front().curves;
      },
      10000));
  w.selectRun(run);
  w.centralTabs()->setCurrentIndex(tab);
  REQUIRE(waitFor([&] { return w.inspector()->runHeatmap()->hasData(); }));
  CHECK(w.inspector()->runA() == run);
  // Every interactive widget of the three views has a name and a tooltip.
  int checked = 0;
  for (int view = 0; view < 3; ++view) {
    w.inspector()->showView(view);
    QTest::qWait(50);
    for (QWidget* widget : w.inspector()->findChildren<QWidget*>()) {
      const bool interactive =
          qobject_cast<QAbstractButton*>(widget) || qobject_cast<QComboBox*>(widget) ||
          qobject_cast<QAbstractItemView*>(widget) || qobject_cast<HeatmapWidget*>(widget) ||
          qobject_cast<BarChartWidget*>(widget);
      if (!interactive || !widget->isVisibleTo(&w)) continue;
      const QWidget* parent = widget->parentWidget();
      if (widget->objectName().startsWith(QLatin1String("qt_")) ||
          qobject_cast<QScrollBar*>(widget) || qobject_cast<QHeaderView*>(widget) ||
          qobject_cast<const QTabBar*>(parent) || qobject_cast<const QComboBox*>(parent))
        continue;
      ++checked;
      INFO(widget->metaObject()->className() << " '" << widget->objectName().toStdString() << "'");
      CHECK_FALSE(widget->accessibleName().isEmpty());
      CHECK_FALSE(widget->objectName().isEmpty());
      CHECK_FALSE(widget->toolTip().isEmpty());
    }
  }
  CHECK(checked >= 12);
}

TEST_CASE("inspector model view: a sensitivity file's frontier, the chosen plan highlighted",
          "[inspector][frontier]") {
  TempDir tmp;
  // What `fp4lab sensitivity --output` writes (docs/user-guide.md): plans by keep with their
  // bytes and measured loss, one loss not measured (null), the chosen plan.
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<double> jitter(0, 0.01);
  const int n = 6, chosen = std::uniform_int_distribution<int>(1, n - 1)(rng);
  const double bf16 = 0.38;
  QJsonArray plans;
  std::vector<std::pair<double, double>> expected;  // (MiB, loss) of the measured plans
  for (int k = 0; k <= n; ++k) {
    const qint64 bytes = 1800000 + k * 700000;
    const bool measured = k != 3;
    const double loss = bf16 + 0.02 / (1 + k) + jitter(rng);
    QJsonObject p{{"keep", k},
                  {"bytes", bytes},
                  {"loss", measured ? QJsonValue(loss) : QJsonValue()},
                  {"kl", 0.001},
                  {"kept", QJsonArray{QStringLiteral("model.layers.%1.mlp.down_proj").arg(k)}}};
    plans.append(p);
    if (measured) expected.emplace_back(bytes / (1024.0 * 1024.0), loss);
  }
  const QJsonObject root{{"model", "tiny"},
                         {"format", "NVFP4 W4A16"},
                         {"bf16", QJsonObject{{"loss", bf16}, {"bytes", 6000000}}},
                         {"ptq", QJsonObject{{"loss", 0.4}, {"kl", 0.002}, {"bytes", 1800000}}},
                         {"plans", plans},
                         {"chosen_keep", chosen}};
  const QString good = QString::fromStdString(tmp.file("sens.json"));
  {
    QFile f(good);
    REQUIRE(f.open(QIODevice::WriteOnly));
    f.write(QJsonDocument(root).toJson());
  }
  QuantInspector inspector;
  inspector.resize(1200, 800);
  inspector.show();
  QString error;
  REQUIRE(inspector.openSensitivity(good, &error));
  FrontierChart* chart = inspector.frontier();
  REQUIRE(chart->isVisibleTo(&inspector));
  REQUIRE(chart->hasData());
  // The plans' line and markers hold the measured plans, in order of size; the unmeasured one is
  // left out; BF16 is a flat line at its loss; the chosen plan is its own marker.
  QLineSeries* line = nullptr;
  QLineSeries* bf16Line = nullptr;
  QScatterSeries* chosenSeries = nullptr;
  for (QAbstractSeries* s : chart->view()->chart()->series()) {
    if (s->name() == QStringLiteral("keep k layers in BF16")) line = qobject_cast<QLineSeries*>(s);
    if (s->name() == QStringLiteral("BF16 loss")) bf16Line = qobject_cast<QLineSeries*>(s);
    if (s->name() == QStringLiteral("chosen plan")) chosenSeries = qobject_cast<QScatterSeries*>(s);
  }
  REQUIRE(line);
  REQUIRE(bf16Line);
  REQUIRE(chosenSeries);
  REQUIRE(line->count() == int(expected.size()));
  for (int i = 0; i < line->count(); ++i) {
    CHECK(line->at(i).x() == Approx(expected[size_t(i)].first));
    CHECK(line->at(i).y() == expected[size_t(i)].second);
  }
  REQUIRE(bf16Line->count() == 2);
  CHECK(bf16Line->at(0).y() == bf16);
  CHECK(bf16Line->at(1).y() == bf16);
  const bool chosenMeasured = chosen != 3;
  CHECK(chosenSeries->count() == (chosenMeasured ? 1 : 0));
  if (chosenMeasured) {
    const QJsonObject c = plans.at(chosen).toObject();
    CHECK(chosenSeries->at(0).x() == Approx(c.value("bytes").toDouble() / (1024.0 * 1024.0)));
    CHECK(chosenSeries->at(0).y() == c.value("loss").toDouble());
    CHECK(inspector.modelNote().contains(QStringLiteral("chosen: keep %1").arg(chosen)));
  }
  // Anything else says what is wrong and where; the chart is emptied.
  const QString notJson = QString::fromStdString(tmp.file("bad.json"));
  const QString foreign = QString::fromStdString(tmp.file("foreign.json"));
  {
    QFile f(notJson);
    REQUIRE(f.open(QIODevice::WriteOnly));
    f.write("{\"plans\": [");
    QFile g(foreign);
    REQUIRE(g.open(QIODevice::WriteOnly));
    g.write("{\"layers\": [], \"format\": \"nvfp4\"}");
  }
  for (const QString& bad : {notJson, foreign, QString::fromStdString(tmp.file("missing.json"))}) {
    INFO(bad.toStdString());
    error.clear();
    CHECK_FALSE(inspector.openSensitivity(bad, &error));
    CHECK(error.contains(bad));
    CHECK_FALSE(chart->hasData());
    CHECK(inspector.modelNote().startsWith(QStringLiteral("Cannot open the sensitivity file")));
  }
}

TEST_CASE(
    "inspector in a narrow window: halves stacked, nothing scrolls sideways; wide: side by "
    "side, nothing scrolls at all",
    "[inspector][layout]") {
  TempDir tmp;
  quantRun(tmp, "runs/qat-nvfp4");
  WorkbenchOptions options;
  options.roots = {QString::fromStdString(tmp.file("runs"))};
  options.program = QStringLiteral("/bin/false");
  MainWindow w(options);
  w.resize(1600, 1000);
  w.show();
  REQUIRE(QTest::qWaitForWindowExposed(&w));
  QuantInspector* inspector = w.inspector();
  w.showView(inspector);
  auto* area = w.findChild<QAbstractScrollArea*>(QStringLiteral("quantization inspector scroll"));
  REQUIRE(area);
  auto* modelSplit = inspector->findChild<QSplitter*>(QStringLiteral("inspector model split"));
  REQUIRE(modelSplit);
  for (int view : {0, 1, 2}) {
    inspector->showView(view);
    QTest::qWait(50);
    INFO("view " << view << " at 1600: inspector " << inspector->width() << "x"
                 << inspector->height() << " in " << area->viewport()->width() << "x"
                 << area->viewport()->height());
    CHECK(area->horizontalScrollBar()->maximum() == 0);
    CHECK(area->verticalScrollBar()->maximum() == 0);
  }
  CHECK(modelSplit->orientation() == Qt::Horizontal);
  // The window made small by hand (the middle keeps about 40% of it).
  w.resize(1000, 650);
  for (int view : {0, 1, 2}) {
    inspector->showView(view);
    QTest::qWait(50);
    INFO("view " << view << " at 1000: inspector " << inspector->width() << " in "
                 << area->viewport()->width());
    CHECK(area->horizontalScrollBar()->maximum() == 0);
  }
  CHECK(modelSplit->orientation() == Qt::Vertical);
}
