// Tests for fp4lab_widgets: the experiment's PNG plots drawn from synthetic run logs written with
// the project's own log writer (every file, its size, each run's colour inside the plot area, no
// curve for runs without steps, missing logs, atomic replacement), a chart following a log that
// another process is writing, the curve helpers, and Qt on a machine without a display.
#include <catch2/catch.hpp>

#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <QApplication>
#include <QBarCategoryAxis>
#include <QCategoryAxis>
#include <QImage>
#include <QLegend>
#include <QLegendMarker>
#include <QLineSeries>
#include <QRect>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "../engine/temp_dir.h"
#include "fp4lab/error.h"
#include "fp4lab/log/run_log.h"
#include "fp4lab/widgets/chart_export.h"
#include "fp4lab/widgets/experiment_plots.h"
#include "fp4lab/widgets/qt_application.h"
#include "fp4lab/widgets/run_charts.h"
#include "fp4lab/widgets/run_curves.h"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using fp4lab::log::EvalRow;
using fp4lab::log::RootAttributes;
using fp4lab::log::RunLogSchema;
using fp4lab::log::RunLogWriter;
using fp4lab::log::TrainRow;
using namespace fp4lab::widgets;

namespace {

const std::vector<std::string> kPlotFiles = {"training_loss.png", "val_loss.png",
                                             "val_loss_recovery.png", "val_kl.png",
                                             "layer_error_ptq.png"};

using TempDir = fp4lab::testing::TempDir;

// A run as the experiment writes it, with known curves: the training loss decays from 1 to
// `lossEnd`, an evaluation every 10 steps (one at step 0 for a run without steps), val_kl when
// `kl`, and rel_l2 per layer at every evaluation when `relL2` is not empty.
struct SyntheticRun {
  std::string name, recipe, format;
  int steps = 0;
  double lossEnd = 0.1;
  bool kl = false;
  std::vector<float> relL2;
};

const std::vector<std::string> kLayers = {
    "model.layers.0.self_attn.q_proj", "model.layers.0.mlp.down_proj",
    "model.layers.1.self_attn.q_proj", "model.layers.1.mlp.down_proj"};

std::string writeRun(const TempDir& dir, const SyntheticRun& run) {
  const std::string runDir = dir.file(run.name);
  fs::create_directories(runDir);
  RootAttributes attributes;
  attributes.runId = run.name;
  attributes.recipe = run.recipe;
  attributes.format = run.format;
  RunLogSchema schema;
  schema.evalColumns = {"val_loss", "val_ppl"};
  if (run.kl) schema.evalColumns.push_back("val_kl");
  if (!run.relL2.empty()) {
    schema.quantLayers = kLayers;
    schema.quantMetrics = {"rel_l2", "sqnr_db"};
  }
  RunLogWriter writer = RunLogWriter::create(runDir + "/log.h5", attributes, schema);
  const auto lossAt = [&](int step) {
    return run.steps == 0 ? run.lossEnd
                          : std::exp(std::log(run.lossEnd) * double(step) / run.steps);
  };
  for (int step = 1; step <= run.steps; ++step) {
    TrainRow row;
    row.step = step;
    row.tokens = 1024 * step;
    row.wallSeconds = 0.1 * step;
    row.loss = float(lossAt(step));
    row.lr = 1e-4f;
    writer.appendTrain(row);
  }
  for (int step = run.steps == 0 ? 0 : 10; step <= run.steps; step += 10) {
    EvalRow row;
    row.step = step;
    row.tokens = 1024 * step;
    const double valLoss = 1.2 * lossAt(step);
    row.values = {valLoss, std::exp(valLoss)};
    if (run.kl) row.values.push_back(0.5 * lossAt(step));
    writer.appendEval(row);
    if (!run.relL2.empty()) {
      std::vector<float> sqnr;
      for (float e : run.relL2) sqnr.push_back(-20.0f * std::log10(e));
      writer.appendQuant(step, {run.relL2, sqnr});
    }
  }
  writer.close();
  return runDir;
}

// The experiment's runs, shortened: SFT, QAT and QAD with steps, PTQ in both formats without.
std::vector<SyntheticRun> experimentRuns() {
  return {
      {"sft", "sft", "bf16", 120, 0.05, false, {}},
      {"ptq-mxfp4", "ptq", "MXFP4 W4A4, ceil scales", 0, 0.08, true, {0.12f, 0.11f, 0.13f, 0.12f}},
      {"qat-mxfp4", "qat", "MXFP4 W4A4, ceil scales", 60, 0.06, true, {0.12f, 0.11f, 0.13f, 0.12f}},
      {"ptq-nvfp4", "ptq", "NVFP4 W4A4, 1-D blocks", 0, 0.07, true, {0.09f, 0.10f, 0.09f, 0.1f}},
      {"qad-nvfp4", "qad", "NVFP4 W4A4, 1-D blocks", 60, 0.01, true, {0.09f, 0.10f, 0.09f, 0.1f}},
  };
}

std::vector<PlotRun> writeRuns(const TempDir& dir, const std::vector<SyntheticRun>& runs) {
  std::vector<PlotRun> out;
  // As the experiment says where each run started: SFT from the base model, the rest from SFT.
  for (const auto& r : runs)
    out.push_back({r.name, writeRun(dir, r), "", r.recipe == "sft" ? "base" : "sft"});
  return out;
}

// Pixels of `colour` (each channel within `tolerance`) inside `area`, shrunk by 3 pixels so the
// axis lines on its border do not count.
int countColour(const QImage& image, QRect area, const QColor& colour, int tolerance = 6) {
  area = area.adjusted(3, 3, -3, -3).intersected(image.rect());
  int count = 0;
  for (int y = area.top(); y <= area.bottom(); ++y) {
    for (int x = area.left(); x <= area.right(); ++x) {
      const QColor c = image.pixelColor(x, y);
      if (std::abs(c.red() - colour.red()) <= tolerance &&
          std::abs(c.green() - colour.green()) <= tolerance &&
          std::abs(c.blue() - colour.blue()) <= tolerance)
        ++count;
    }
  }
  return count;
}

const RenderedPlot* findPlot(const ExperimentPlots& plots, const std::string& fileName) {
  for (const auto& p : plots.plots)
    if (p.fileName == fileName) return &p;
  return nullptr;
}

QImage loadPlot(const RenderedPlot& plot) {
  QImage image(QString::fromStdString(plot.path));
  REQUIRE(!image.isNull());
  return image.convertToFormat(QImage::Format_ARGB32);
}

QRect plotArea(const RenderedPlot& plot) {
  return QRect(plot.plotX, plot.plotY, plot.plotWidth, plot.plotHeight);
}

std::string joinedWarnings(const ExperimentPlots& plots) {
  std::string all;
  for (const auto& w : plots.warnings) all += w + "\n";
  return all;
}

std::set<std::string> filesIn(const std::string& folder) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(folder))
    names.insert(entry.path().filename().string());
  return names;
}

std::string readBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

ino_t inode(const std::string& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_ino;
}

// The curve runs each plot must show for experimentRuns().
const std::map<std::string, std::vector<std::string>> kExpectedRuns = {
    {"training_loss.png", {"sft", "qat-mxfp4", "qad-nvfp4"}},
    {"val_loss.png", {"sft", "qat-mxfp4", "qad-nvfp4"}},
    // Curves first, then the levels of the SFT model and the PTQ runs.
    {"val_loss_recovery.png", {"qat-mxfp4", "qad-nvfp4", "sft", "ptq-mxfp4", "ptq-nvfp4"}},
    {"val_kl.png", {"qat-mxfp4", "qad-nvfp4"}},
    {"layer_error_ptq.png", {"ptq-mxfp4", "ptq-nvfp4"}},
};

}  // namespace

// ---- The experiment's plots ---------------------------------------------------------------------

TEST_CASE(
    "every experiment plot is a PNG of the right size with each run's colour in its plot area",
    "[widgets][plots]") {
  TempDir dir;
  const std::vector<PlotRun> runs = writeRuns(dir, experimentRuns());
  const std::string out = dir.file("report");
  const ExperimentPlots plots = renderExperimentPlots(out, runs);
  CHECK(plots.warnings.empty());
  REQUIRE(plots.plots.size() == kPlotFiles.size());
  CHECK(filesIn(out) == std::set<std::string>(kPlotFiles.begin(), kPlotFiles.end()));

  const std::vector<std::string> allRuns = {"sft", "ptq-mxfp4", "qat-mxfp4", "ptq-nvfp4",
                                            "qad-nvfp4"};
  for (const auto& fileName : kPlotFiles) {
    INFO(fileName);
    const RenderedPlot* plot = findPlot(plots, fileName);
    REQUIRE(plot);
    CHECK(plot->path == out + "/" + fileName);
    CHECK(!plot->title.empty());
    const QImage image = loadPlot(*plot);
    CHECK(image.width() == kPlotWidth);
    CHECK(image.height() == kPlotHeight);
    CHECK(plot->width == kPlotWidth);
    CHECK(plot->height == kPlotHeight);
    // The plot area is most of the image (axes, title and legend take the rest).
    CHECK(plot->plotWidth > kPlotWidth / 2);
    CHECK(plot->plotHeight > kPlotHeight / 2);
    const std::vector<std::string>& expected = kExpectedRuns.at(fileName);
    CHECK(plot->runs == expected);
    for (const auto& run : allRuns) {
      INFO("run " << run);
      const int pixels = countColour(image, plotArea(*plot), runColour(run));
      const bool drawn = std::find(expected.begin(), expected.end(), run) != expected.end();
      if (drawn)
        CHECK(pixels > 100);  // a curve across the plot, or a column of bars
      else
        CHECK(pixels < 10);  // at most a stray anti-aliased pixel of another colour
    }
  }
}

TEST_CASE("a run without training steps adds no series to the curve charts", "[widgets][plots]") {
  TempDir dir;
  const std::string trained = writeRun(dir, {"qat-mxfp4", "qat", "MXFP4", 50, 0.05, true, {}});
  const std::string untrained = writeRun(dir, {"ptq-nvfp4", "ptq", "NVFP4", 0, 0.07, true, {}});
  ensureApplication();
  const std::vector<RunCurves> curves = {readRunCurves("qat-mxfp4", trained + "/log.h5"),
                                         readRunCurves("ptq-nvfp4", untrained + "/log.h5")};
  CHECK(curves[1].lastTrainStep() == 0);
  CHECK(curves[1].series("eval/val_loss").size() == 1);  // PTQ's one evaluation, at step 0
  for (const CurveChartSpec& spec : {trainLossChartSpec(), valLossChartSpec(), valKlChartSpec()}) {
    INFO(spec.series);
    const auto chart = makeCurveChart(spec, curves);
    CHECK(chartRuns(*chart) == std::vector<std::string>{"qat-mxfp4"});
    // The smoothed training loss also has its faint raw curve; nothing else.
    CHECK(chart->series().size() == (spec.smoothing > 0 ? 2 : 1));
  }

  const ExperimentPlots plots =
      renderExperimentPlots(dir.file("report"), {{"qat-mxfp4", trained}, {"ptq-nvfp4", untrained}});
  const RenderedPlot* plot = findPlot(plots, "val_loss.png");
  REQUIRE(plot);
  const QImage image = loadPlot(*plot);
  CHECK(countColour(image, plotArea(*plot), runColour("qat-mxfp4")) > 100);
  CHECK(countColour(image, plotArea(*plot), runColour("ptq-nvfp4")) < 10);
  // Its per-layer data would be plotted in layer_error_ptq.png, but this PTQ run logged none.
  CHECK(!findPlot(plots, "layer_error_ptq.png"));
  CHECK(plots.warnings.size() == 1);
}

TEST_CASE("the recovery chart: QAT and QAD from the SFT model against SFT and PTQ levels",
          "[widgets][plots]") {
  TempDir dir;
  std::vector<PlotRun> runs = writeRuns(dir, experimentRuns());
  // QAT straight from the base model is no recovery from PTQ: it stays out of this chart.
  runs.push_back({"qat-from-base-mxfp4",
                  writeRun(dir, {"qat-from-base-mxfp4", "qat", "MXFP4", 90, 0.02, true, {}}), "",
                  "base"});
  ensureApplication();
  std::vector<RunCurves> curves;
  for (const PlotRun& r : runs) curves.push_back(readRunCurves(r.name, r.runDir + "/log.h5"));
  const auto chart = makeCurveChart(recoveryChartSpec({"sft", "ptq-mxfp4", "ptq-nvfp4"}),
                                    {curves[0], curves[1], curves[2], curves[3], curves[4]});
  CHECK(chartRuns(*chart) ==
        std::vector<std::string>{"qat-mxfp4", "qad-nvfp4", "sft", "ptq-mxfp4", "ptq-nvfp4"});
  // A level is the run's last validation loss across the curves' steps (0 to 60), named with it.
  std::map<std::string, QList<QPointF>> points;
  std::map<std::string, QString> names;
  for (QAbstractSeries* s : chart->series()) {
    auto* line = qobject_cast<QLineSeries*>(s);
    REQUIRE(line);
    points[s->objectName().toStdString()] = line->points();
    names[s->objectName().toStdString()] = line->name();
  }
  // writeRun: val_loss = 1.2 * lossEnd at the last evaluation.
  struct Level {
    std::string run;
    double value;
    std::string legend;
  };
  for (const auto& [run, value, legend] :
       std::vector<Level>{{"sft", 0.06, "sft: 0.06"}, {"ptq-mxfp4", 0.096, "ptq-mxfp4: 0.096"}}) {
    INFO(run);
    const QList<QPointF>& level = points.at("level:" + run);
    REQUIRE(level.size() == 2);
    CHECK(level[0].x() == 0);
    CHECK(level[1].x() == 60);
    CHECK(level[0].y() == Approx(value));
    CHECK(level[1].y() == Approx(value));
    CHECK(names.at("level:" + run).toStdString() == legend);
  }
  CHECK(points.count("run:sft") == 0);  // a level, not a curve

  const ExperimentPlots plots = renderExperimentPlots(dir.file("report"), runs);
  const RenderedPlot* plot = findPlot(plots, "val_loss_recovery.png");
  REQUIRE(plot);
  CHECK(plot->runs == kExpectedRuns.at("val_loss_recovery.png"));
  CHECK(countColour(loadPlot(*plot), plotArea(*plot), runColour("qat-from-base-mxfp4")) < 10);

  // Levels alone compare nothing: without QAT or QAD runs there is no recovery chart.
  const ExperimentPlots levelsOnly =
      renderExperimentPlots(dir.file("levels"), {runs[0], runs[1], runs[3]});
  CHECK(findPlot(levelsOnly, "val_loss_recovery.png") == nullptr);
  CHECK_THAT(joinedWarnings(levelsOnly), Contains("val_loss_recovery.png"));
}

TEST_CASE("a missing or unreadable log skips that run with a warning, and no partial PNG is left",
          "[widgets][plots]") {
  TempDir dir;
  std::vector<PlotRun> runs = writeRuns(dir, experimentRuns());
  // qat-mxfp4's folder without its log, and a log that is not HDF5.
  fs::remove(runs[2].runDir + "/log.h5");
  fs::create_directories(dir.file("garbage"));
  std::ofstream(dir.file("garbage/log.h5")) << "not an HDF5 file";
  runs.push_back({"garbage", dir.file("garbage")});

  const std::string out = dir.file("report");
  const ExperimentPlots plots = renderExperimentPlots(out, runs);
  REQUIRE(plots.warnings.size() == 2);
  CHECK_THAT(plots.warnings[0], Contains("qat-mxfp4") && Contains(runs[2].runDir + "/log.h5"));
  CHECK_THAT(plots.warnings[1], Contains("garbage") && Contains("not an HDF5 file"));
  // Everything else is plotted, and the folder holds the finished PNGs only.
  CHECK(filesIn(out) == std::set<std::string>(kPlotFiles.begin(), kPlotFiles.end()));
  const RenderedPlot* loss = findPlot(plots, "training_loss.png");
  REQUIRE(loss);
  CHECK(loss->runs == std::vector<std::string>{"sft", "qad-nvfp4"});
  const QImage image = loadPlot(*loss);
  CHECK(countColour(image, plotArea(*loss), runColour("qat-mxfp4")) < 10);
}

TEST_CASE("no readable log at all is an error naming the file, and nothing is written",
          "[widgets][plots]") {
  TempDir dir;
  fs::create_directories(dir.file("sft"));
  const std::string out = dir.file("report");
  try {
    renderExperimentPlots(out, {{"sft", dir.file("sft")}, {"qat", dir.file("qat")}});
    FAIL("no error");
  } catch (const fp4lab::Error& e) {
    CHECK(e.where() == dir.file("sft") + "/log.h5");
    CHECK_THAT(std::string(e.what()), Contains("no run log could be read") &&
                                          Contains(dir.file("qat") + "/log.h5") &&
                                          Contains("fp4lab inspect"));
  }
  CHECK(!fs::exists(out));
  CHECK_THROWS_AS(renderExperimentPlots(out, {}), fp4lab::Error);
}

TEST_CASE("rendering again replaces every PNG by a rename; a failed rendering keeps them",
          "[widgets][plots]") {
  TempDir dir;
  std::vector<SyntheticRun> first = experimentRuns();
  first.erase(first.begin() + 4);  // without qad-nvfp4
  const std::vector<PlotRun> runs = writeRuns(dir, first);
  const std::string out = dir.file("report");
  renderExperimentPlots(out, runs);
  std::map<std::string, ino_t> inodes;
  for (const auto& f : kPlotFiles) inodes[f] = inode(out + "/" + f);

  // With qad-nvfp4 added, every file is a new one (a rename, not a rewrite in place) that shows it.
  std::vector<PlotRun> more = runs;
  more.push_back({"qad-nvfp4", writeRun(dir, experimentRuns()[4])});
  const ExperimentPlots plots = renderExperimentPlots(out, more);
  CHECK(filesIn(out) == std::set<std::string>(kPlotFiles.begin(), kPlotFiles.end()));
  std::map<std::string, std::string> bytes;
  for (const auto& f : kPlotFiles) {
    INFO(f);
    CHECK(inode(out + "/" + f) != inodes[f]);
    inodes[f] = inode(out + "/" + f);
    bytes[f] = readBytes(out + "/" + f);
  }
  const RenderedPlot* loss = findPlot(plots, "training_loss.png");
  REQUIRE(loss);
  CHECK(countColour(loadPlot(*loss), plotArea(*loss), runColour("qad-nvfp4")) > 100);

  // A rendering that fails (no log readable) leaves every file as it was.
  CHECK_THROWS_AS(renderExperimentPlots(out, {{"sft", dir.file("nowhere")}}), fp4lab::Error);
  for (const auto& f : kPlotFiles) {
    INFO(f);
    CHECK(inode(out + "/" + f) == inodes[f]);
    CHECK(readBytes(out + "/" + f) == bytes[f]);
  }
  CHECK(filesIn(out) == std::set<std::string>(kPlotFiles.begin(), kPlotFiles.end()));
}

TEST_CASE("a PNG that cannot be written is an error naming it, and the old file stays",
          "[widgets][plots]") {
  TempDir dir;
  ensureApplication();
  const std::string path = dir.file("chart.png");
  QImage image(20, 10, QImage::Format_ARGB32);
  image.fill(Qt::red);
  savePngAtomically(image, path);
  const std::string before = readBytes(path);
  CHECK(QImage(QString::fromStdString(path)).size() == QSize(20, 10));
  try {
    savePngAtomically(image, dir.file("missing-folder/chart.png"));
    FAIL("no error");
  } catch (const fp4lab::Error& e) {
    CHECK(e.where() == dir.file("missing-folder/chart.png"));
  }
  CHECK_THROWS_AS(savePngAtomically(QImage(), path), fp4lab::Error);
  CHECK(readBytes(path) == before);
  CHECK(filesIn(dir.file("")) == std::set<std::string>{"chart.png"});
}

TEST_CASE("repeats at other seeds are dashed in their run's colour and counted in its legend entry",
          "[widgets][plots]") {
  TempDir dir;
  const std::vector<float> error = {0.12f, 0.11f, 0.13f, 0.12f};
  const std::vector<PlotRun> runs = {
      {"ptq-mxfp4", writeRun(dir, {"ptq-mxfp4", "ptq", "MXFP4", 0, 0.08, true, error})},
      {"qat-mxfp4", writeRun(dir, {"qat-mxfp4", "qat", "MXFP4", 60, 0.06, true, error})},
      {"ptq-mxfp4-seed1235",
       writeRun(dir, {"ptq-mxfp4-seed1235", "ptq", "MXFP4", 0, 0.08, true, error}), "ptq-mxfp4"},
      {"qat-mxfp4-seed1235",
       writeRun(dir, {"qat-mxfp4-seed1235", "qat", "MXFP4", 60, 0.05, true, error}), "qat-mxfp4"},
  };
  ensureApplication();
  std::vector<RunCurves> curves;
  for (const auto& r : runs) {
    curves.push_back(readRunCurves(r.name, r.runDir + "/log.h5"));
    curves.back().group = r.group;
  }
  const auto chart = makeCurveChart(valLossChartSpec(), curves);
  renderChart(*chart);  // legend markers are visible only once laid out
  CHECK(chartRuns(*chart) == std::vector<std::string>{"qat-mxfp4", "qat-mxfp4-seed1235"});
  CHECK(chart->title() == "Validation loss (dashed: other run seeds)");
  for (QAbstractSeries* s : chart->series()) {
    auto* line = qobject_cast<QLineSeries*>(s);
    REQUIRE(line);
    CHECK(line->pen().color() == runColour("qat-mxfp4"));
    const bool repeat = s->objectName() == "run:qat-mxfp4-seed1235";
    CHECK((line->pen().style() == Qt::DashLine) == repeat);
    if (!repeat) CHECK(line->name() == QStringLiteral("qat-mxfp4 \u00d72"));  // two seeds
    const auto markers = chart->legend()->markers(s);
    REQUIRE(markers.size() == 1);
    CHECK(markers[0]->isVisible() == !repeat);
  }

  const ExperimentPlots plots = renderExperimentPlots(dir.file("report"), runs);
  const RenderedPlot* layers = findPlot(plots, "layer_error_ptq.png");
  REQUIRE(layers);
  CHECK(layers->runs == std::vector<std::string>{"ptq-mxfp4"});  // PTQ's repeats add nothing
  const RenderedPlot* loss = findPlot(plots, "training_loss.png");
  REQUIRE(loss);
  CHECK(loss->runs == std::vector<std::string>{"qat-mxfp4", "qat-mxfp4-seed1235"});
}

// ---- Live: the same chart code follows a log that grows -----------------------------------------

namespace {

struct Pipe {
  int fds[2] = {-1, -1};
  Pipe() { REQUIRE(::pipe(fds) == 0); }
  ~Pipe() {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  }
};

void sendByte(int fd, char c) {
  if (::write(fd, &c, 1) != 1) ::_exit(92);
}

// The next byte from a pipe, or 0 after `timeoutMs` (a stuck peer must not hang the suite).
char receiveByte(int fd, int timeoutMs) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, timeoutMs) != 1) return 0;
  char c = 0;
  return ::read(fd, &c, 1) == 1 ? c : 0;
}

int lineSeriesPoints(QChart& chart, const std::string& run) {
  for (QAbstractSeries* s : chart.series())
    if (s->objectName() == QString::fromStdString("run:" + run))
      return int(qobject_cast<QLineSeries*>(s)->count());
  return -1;
}

}  // namespace

TEST_CASE("a chart follows a log that another process is writing", "[widgets][live]") {
  TempDir dir;
  const std::string path = dir.file("log.h5");
  Pipe toParent, toChild;
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // The training process: 30 steps, then 30 more once the parent has drawn the first ones.
    int code = 0;
    try {
      RootAttributes attributes;
      attributes.runId = "qat-live";
      attributes.recipe = "qat";
      attributes.format = "MXFP4";
      RunLogSchema schema;
      schema.evalColumns = {"val_loss"};
      RunLogWriter writer = RunLogWriter::create(path, attributes, schema);
      const auto append = [&](int from, int to) {
        for (int step = from; step <= to; ++step) {
          TrainRow row;
          row.step = step;
          row.loss = float(1.0 / step);
          writer.appendTrain(row);
        }
        writer.flush();
      };
      append(1, 30);
      sendByte(toParent.fds[1], 'a');
      if (receiveByte(toChild.fds[0], 20000) != 'b') ::_exit(93);
      append(31, 60);
      sendByte(toParent.fds[1], 'c');
      if (receiveByte(toChild.fds[0], 20000) != 'd') ::_exit(94);
      writer.close();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
      code = 90;
    }
    ::_exit(code);
  }
  struct Reaper {
    pid_t pid;
    int wait() {
      int status = 0;
      for (int i = 0; i < 5000 && ::waitpid(pid, &status, WNOHANG) != pid; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    ~Reaper() {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, WNOHANG);
    }
  } child{pid};

  REQUIRE(receiveByte(toParent.fds[0], 20000) == 'a');
  ensureApplication();
  CurveChartSpec spec = trainLossChartSpec();
  spec.smoothing = 0;
  RunLogFollower follower("qat-live", path);
  CHECK(follower.curves().train.size() == 30);
  auto chart = makeCurveChart(spec, {follower.curves()});
  CHECK(lineSeriesPoints(*chart, "qat-live") == 30);
  CHECK(!follower.poll());  // nothing new yet

  sendByte(toChild.fds[1], 'b');
  REQUIRE(receiveByte(toParent.fds[0], 20000) == 'c');
  CHECK(follower.poll());
  CHECK(follower.curves().train.size() == 60);
  CHECK(follower.curves().train.back().step == 60);
  updateCurveChart(*chart, spec, {follower.curves()});
  CHECK(lineSeriesPoints(*chart, "qat-live") == 60);
  CHECK(chart->series().size() == 1);  // the same series, given new data
  const QImage image = renderChart(*chart);
  CHECK(countColour(image, chart->plotArea().toAlignedRect(), runColour("qat-live")) > 100);
  sendByte(toChild.fds[1], 'd');
  CHECK(child.wait() == 0);
}

// ---- Helpers ------------------------------------------------------------------------------------

TEST_CASE("curves: NaN rows are left out; EMA, downsampling and log labels", "[widgets][charts]") {
  RunCurves run;
  run.evalColumns = {"val_loss", "val_kl"};
  for (int i = 0; i < 4; ++i) {
    EvalRow row;
    row.step = 10 * i;
    row.values = {1.0 + i, i == 2 ? NAN : 0.5};
    run.eval.push_back(row);
  }
  CHECK(run.series("eval/val_loss").size() == 4);
  CHECK(run.series("eval/val_kl") == Points{{0, 0.5}, {10, 0.5}, {30, 0.5}});
  CHECK(run.series("eval/nope").empty());
  CHECK(run.series("train/loss").empty());

  using detail::debiasedEma;
  CHECK(debiasedEma({2, 2, 2}, 0.9) == std::vector<double>{2, 2, 2});  // no bias towards 0
  const std::vector<double> ema = debiasedEma({1, 3, NAN, 3}, 0.5);
  CHECK(ema[0] == Approx(1.0));
  CHECK(ema[1] == Approx(1.75 / 0.75));
  CHECK(std::isnan(ema[2]));
  CHECK(ema[3] == Approx((1.75 * 0.5 + 1.5) / 0.875));

  Points many;
  for (int i = 0; i < 10000; ++i) many.emplace_back(i, i % 7);
  const Points few = detail::downsampleLast(many, 100);
  CHECK(few.size() <= 101);
  CHECK(few.size() >= 99);
  CHECK(few.front() == many.front());
  CHECK(few.back() == many.back());
  CHECK(detail::downsampleLast(Points(many.begin(), many.begin() + 200), 100).size() == 200);

  CHECK(detail::logAxisLabels(0.048, 0.17) ==
        std::vector<double>{0.05, 0.06, 0.07, 0.08, 0.09, 0.1, 0.15});
  CHECK(detail::logAxisLabels(0.0004, 0.45) ==
        std::vector<double>{0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2});
  CHECK(detail::logAxisLabels(1e-6, 1e3) ==
        std::vector<double>{1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 0.1, 1, 10, 100, 1000});
  CHECK(detail::logAxisLabels(0.0516, 0.0547) ==
        std::vector<double>{0.052, 0.0525, 0.053, 0.0535, 0.054, 0.0545});
  CHECK(detail::logAxisLabels(0, 1).empty());
}

TEST_CASE("linear axis labels are compact, whole and never need eliding", "[widgets][charts]") {
  using Labels = std::vector<std::pair<double, std::string>>;
  // Tokens: one unit for the axis, digits only where the step needs them.
  CHECK(detail::linearAxisLabels(0, 200000, 5) ==
        Labels{{0, "0"}, {50000, "50k"}, {100000, "100k"}, {150000, "150k"}, {200000, "200k"}});
  CHECK(detail::linearAxisLabels(100000, 102000, 4) ==
        Labels{{100000, "100.0k"}, {100500, "100.5k"}, {101000, "101.0k"}, {101500, "101.5k"},
               {102000, "102.0k"}});
  CHECK(detail::linearAxisLabels(0, 3.6e6, 4) ==
        Labels{{0, "0"}, {1e6, "1M"}, {2e6, "2M"}, {3e6, "3M"}});
  CHECK(detail::linearAxisLabels(1.1e6, 1.4e6, 3) ==
        Labels{{1.1e6, "1.1M"}, {1.2e6, "1.2M"}, {1.3e6, "1.3M"}, {1.4e6, "1.4M"}});
  CHECK(detail::linearAxisLabels(0, 4e9, 4).back() == std::pair<double, std::string>{4e9, "4B"});
  // Steps and small numbers: plain, no unit below ten thousand.
  CHECK(detail::linearAxisLabels(0, 40, 4) ==
        Labels{{0, "0"}, {10, "10"}, {20, "20"}, {30, "30"}, {40, "40"}});
  CHECK(detail::linearAxisLabels(0, 1, 4) == Labels{{0, "0.0"}, {0.5, "0.5"}, {1, "1.0"}});
  CHECK(detail::linearAxisLabels(-0.4, 0.4, 4) ==
        Labels{{-0.4, "-0.4"}, {-0.2, "-0.2"}, {0, "0.0"}, {0.2, "0.2"}, {0.4, "0.4"}});
  double step = 0;
  CHECK(detail::linearAxisLabels(0, 9000, 8, &step).size() <= 9);
  CHECK(step == 2000);
  // Never more labels than asked (plus the end), over many ranges.
  for (double hi : {1.0, 7.0, 33.0, 480.0, 12345.0, 9.9e5, 2.5e7, 3e10})
    for (int n = 2; n <= 8; ++n) CHECK(detail::linearAxisLabels(0, hi, n).size() <= size_t(n) + 1);
  CHECK(detail::linearAxisLabels(1, 0, 4).empty());
}

TEST_CASE("QAD's distillation loss and the cross-entropies are separate series",
          "[widgets][charts]") {
  RunCurves qad, qat;
  qad.recipe = "qad", qat.recipe = "qat";
  for (RunCurves* r : {&qad, &qat}) {
    TrainRow row;
    row.step = 1;
    row.loss = r == &qad ? 0.05f : 1.5f;
    r->train.push_back(row);
  }
  CHECK(qat.series("train/ce_loss") == Points{{1, 1.5}});
  CHECK(qat.series("train/distill_loss").empty());
  CHECK(qad.series("train/distill_loss") == Points{{1, double(0.05f)}});
  CHECK(qad.series("train/ce_loss").empty());
  CHECK(qad.series("train/loss").size() == 1);  // the log's own series stays whole
}

TEST_CASE("a per-layer chart labels layers, or transformer blocks when there are many",
          "[widgets][charts]") {
  ensureApplication();
  auto ptqRun = [](int blocks) {
    RunCurves run;
    run.name = "ptq-nvfp4";
    run.quantMetrics = {"rel_l2"};
    run.quantSteps = {0};
    for (int b = 0; b < blocks; ++b)
      for (const char* proj : {"self_attn.q_proj", "self_attn.o_proj", "mlp.down_proj"})
        run.quantLayers.push_back("model.layers." + std::to_string(b) + "." + proj);
    for (size_t i = 0; i < run.quantLayers.size(); ++i)
      run.quant["rel_l2"].push_back(0.1f + 0.001f * float(i));
    return run;
  };
  auto bottomAxis = [](QChart& chart) {
    const auto axes = chart.axes(Qt::Horizontal);
    REQUIRE(axes.size() == 1);
    return axes[0];
  };
  // 4 blocks x 3 projections: every layer is labelled.
  auto few = makeLayerChart(layerErrorChartSpec(), {ptqRun(4)});
  auto* names = qobject_cast<QBarCategoryAxis*>(bottomAxis(*few));
  REQUIRE(names);
  CHECK(names->count() == 12);
  CHECK(names->at(4) == "1.o_proj");
  // 30 blocks x 3 projections (90 bars) would be a smear of labels: one per block instead,
  // spanning its three bars.
  auto many = makeLayerChart(layerErrorChartSpec(), {ptqRun(30)});
  auto* blocks = qobject_cast<QCategoryAxis*>(bottomAxis(*many));
  REQUIRE(blocks);
  CHECK(blocks->count() == 30);
  CHECK(blocks->categoriesLabels().front() == "0");
  CHECK(blocks->categoriesLabels().back() == "29");
  CHECK(blocks->startValue("0") == -0.5);
  CHECK(blocks->endValue("0") == 2.5);
  CHECK(blocks->endValue("29") == 89.5);
  const QImage image = renderChart(*many);
  CHECK(countColour(image, many->plotArea().toAlignedRect(), runColour("ptq-nvfp4")) > 1000);
  // Names without a block index keep one label per layer, however many.
  RunCurves flat = ptqRun(30);
  for (size_t i = 0; i < flat.quantLayers.size(); ++i)
    flat.quantLayers[i] = "proj" + std::to_string(i);
  auto plain = makeLayerChart(layerErrorChartSpec(), {flat});
  CHECK(qobject_cast<QBarCategoryAxis*>(bottomAxis(*plain)));
}

TEST_CASE("run colours: fixed and distinct for the experiment's runs, stable for others",
          "[widgets][charts]") {
  const std::vector<std::string> names = {
      "sft",       "base",      "ptq-mxfp4", "qat-mxfp4",           "qad-mxfp4",
      "ptq-nvfp4", "qat-nvfp4", "qad-nvfp4", "qat-from-base-mxfp4", "qat-from-base-nvfp4"};
  std::set<QRgb> colours;
  for (const auto& n : names) colours.insert(runColour(n).rgb());
  CHECK(colours.size() == names.size());
  CHECK(runColour("sft") == QColor(0, 0, 0));
  CHECK(runColour("my-run") == runColour("my-run"));
  CHECK(runColour("my-run").isValid());
}

// ---- No display ---------------------------------------------------------------------------------

// Run by CTest with DISPLAY, WAYLAND_DISPLAY and QT_QPA_PLATFORM unset (widgets_headless).
TEST_CASE("without a display, the application runs offscreen", "[.headless]") {
  REQUIRE(!std::getenv("DISPLAY"));
  REQUIRE(!std::getenv("WAYLAND_DISPLAY"));
  REQUIRE(!std::getenv("QT_QPA_PLATFORM"));
  CHECK(qtPlatformName().empty());
  ensureApplication(QtPlatform::Auto);
  CHECK(qtPlatformName() == "offscreen");
  CHECK(!std::getenv("QT_QPA_PLATFORM"));  // chosen on the command line, not for child processes
  TempDir dir;
  const ExperimentPlots plots =
      renderExperimentPlots(dir.file("report"), writeRuns(dir, experimentRuns()));
  CHECK(plots.plots.size() == kPlotFiles.size());
}

// Run by CTest with DISPLAY naming a display that does not exist (widgets_stale_display): an ssh
// session without X forwarding must still get its plots (Qt's xcb platform would abort).
TEST_CASE("with an unreachable display, plots are still drawn offscreen", "[.stale-display]") {
  REQUIRE(std::getenv("DISPLAY"));
  REQUIRE(!std::getenv("QT_QPA_PLATFORM"));
  TempDir dir;
  const ExperimentPlots plots =
      renderExperimentPlots(dir.file("report"), writeRuns(dir, experimentRuns()));
  CHECK(qtPlatformName() == "offscreen");
  CHECK(plots.plots.size() == kPlotFiles.size());
}
