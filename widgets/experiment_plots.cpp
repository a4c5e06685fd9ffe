// The built-in experiment's PNG plots, drawn by the same chart code as the GUI's live plots.
#include "fp4lab/widgets/experiment_plots.h"

#include <QDir>
#include <QFileInfo>
#include <QImage>
#include <QString>

#include <algorithm>
#include <memory>
#include <set>
#include <utility>

#include "fp4lab/error.h"
#include "fp4lab/widgets/chart_export.h"
#include "fp4lab/widgets/qt_application.h"
#include "fp4lab/widgets/run_charts.h"
#include "fp4lab/widgets/run_curves.h"

namespace fp4lab::widgets {

namespace {

// "MXFP4 W4A4, ceil scales, ..." -> "MXFP4"; "bf16" stays.
std::string formatName(const std::string& format) {
  return format.substr(0, format.find(' '));
}

std::string joined(const std::vector<std::string>& parts, const std::string& separator) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : separator) + p;
  return out;
}

}  // namespace

ExperimentPlots renderExperimentPlots(const std::string& outDir, const std::vector<PlotRun>& runs) {
  ExperimentPlots result;
  std::vector<RunCurves> curves;
  std::vector<std::string> failures;
  std::string firstFailure;
  std::set<std::string> fromBase;
  for (const PlotRun& run : runs) {
    const std::string path =
        QDir(QString::fromStdString(run.runDir)).filePath(QStringLiteral("log.h5")).toStdString();
    std::string problem;
    if (!QFileInfo::exists(QString::fromStdString(path))) {
      problem = path + ": no run log";
    } else {
      try {
        curves.push_back(readRunCurves(run.name, path));
        curves.back().group = run.group;
        if (run.from == "base") fromBase.insert(run.name);
        continue;
      } catch (const Error& e) {
        problem = e.what();
      }
    }
    if (firstFailure.empty()) firstFailure = path;
    failures.push_back(problem);
    result.warnings.push_back("run " + run.name + " is not plotted: " + problem);
  }
  if (curves.empty()) {
    if (runs.empty()) throw Error("no runs to plot", outDir, "give the experiment's run folders");
    throw Error("no run log could be read (" + joined(failures, "; ") + ")", firstFailure,
                "the plots are drawn from each run folder's log.h5: check the folders, or run "
                "fp4lab inspect on one");
  }
  const QString dir = QString::fromStdString(outDir);
  if (!QDir().mkpath(dir))
    throw Error("cannot create the plot folder", outDir, "check that it is writable");

  ensureApplication(QtPlatform::Offscreen);

  std::vector<RunCurves> ptqRuns;
  std::vector<std::string> ptqFormats;
  for (const RunCurves& c : curves) {
    // PTQ's weight error does not depend on the run seed: the repeats would only repeat it.
    if (c.recipe != "ptq" || c.quantLayers.empty() || c.isRepeat()) continue;
    ptqRuns.push_back(c);
    ptqFormats.push_back(formatName(c.format));
  }
  // The recovery chart: QAT and QAD from the SFT model (and their repeats) as curves, the SFT
  // model and each PTQ run (not its repeats) as levels.
  std::vector<RunCurves> recoveryRuns;
  std::vector<std::string> levels;
  for (const RunCurves& c : curves) {
    if ((c.recipe == "qat" || c.recipe == "qad") && !fromBase.count(c.name))
      recoveryRuns.push_back(c);
    if ((c.recipe == "sft" && c.lastTrainStep() > 0) || (c.recipe == "ptq" && !c.isRepeat())) {
      recoveryRuns.push_back(c);
      levels.push_back(c.name);
    }
  }
  if (std::none_of(recoveryRuns.begin(), recoveryRuns.end(),
                   [](const RunCurves& c) { return c.recipe == "qat" || c.recipe == "qad"; }))
    recoveryRuns.clear();  // levels alone compare nothing: no chart
  LayerChartSpec layerSpec = layerErrorChartSpec();
  layerSpec.title = QStringLiteral("Weight quantization error per layer after PTQ") +
                    (ptqFormats.empty() ? QString()
                                        : QStringLiteral(": ") +
                                              QString::fromStdString(joined(ptqFormats, " vs ")));

  struct Chart {
    std::string fileName, missing;
    std::unique_ptr<QChart> chart;
  };
  std::vector<Chart> charts;
  charts.push_back({"training_loss.png", "no run has training steps",
                    makeCurveChart(trainLossChartSpec(), curves)});
  charts.push_back({"val_loss.png", "no run with training steps logged val_loss",
                    makeCurveChart(valLossChartSpec(), curves)});
  charts.push_back({"val_loss_recovery.png", "no QAT or QAD run from the SFT model logged val_loss",
                    makeCurveChart(recoveryChartSpec(levels), recoveryRuns)});
  charts.push_back({"val_kl.png", "no run with training steps logged val_kl (KL to the SFT model)",
                    makeCurveChart(valKlChartSpec(), curves)});
  charts.push_back({"layer_error_ptq.png", "no PTQ run logged per-layer rel_l2",
                    makeLayerChart(layerSpec, ptqRuns)});

  // Every image is drawn before any file is replaced: a failure to draw leaves the old files as
  // they were. Each file is then replaced whole (savePngAtomically).
  std::vector<std::pair<RenderedPlot, QImage>> rendered;
  for (Chart& c : charts) {
    RenderedPlot plot;
    plot.fileName = c.fileName;
    plot.title = c.chart->title().toStdString();
    plot.runs = chartRuns(*c.chart);
    if (plot.runs.empty()) {
      result.warnings.push_back("no plot " + c.fileName + ": " + c.missing);
      continue;
    }
    plot.path = QDir(dir).filePath(QString::fromStdString(c.fileName)).toStdString();
    QImage image = renderChart(*c.chart);
    const QRect area = c.chart->plotArea().toAlignedRect();
    plot.width = image.width(), plot.height = image.height();
    plot.plotX = area.x(), plot.plotY = area.y();
    plot.plotWidth = area.width(), plot.plotHeight = area.height();
    rendered.emplace_back(std::move(plot), std::move(image));
  }
  for (auto& [plot, image] : rendered) {
    savePngAtomically(image, plot.path);
    result.plots.push_back(std::move(plot));
  }
  return result;
}

}  // namespace fp4lab::widgets
