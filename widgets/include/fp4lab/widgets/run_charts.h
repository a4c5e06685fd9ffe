// Qt Charts of run logs: one function builds a chart from RunCurves, another brings it up to date
// when the curves grow, so the GUI's live plots and the experiment's PNG plots are the same code.
// Colours are fixed per run name (the same in every chart) and colour-blind safe.
#pragma once

#include <QChart>
#include <QColor>
#include <QString>

#include <memory>
#include <string>
#include <vector>

#include "fp4lab/widgets/run_curves.h"

namespace fp4lab::widgets {

// What a curve chart shows: one series of every run against the optimizer step.
struct CurveChartSpec {
  std::string series;  // as RunLogReader::listSeries names it: "train/loss", "eval/val_kl", ...
  QString title, yTitle;
  QString xTitle = QStringLiteral("optimizer step");
  bool logY = true;      // true log axis (non-positive values are left out), labelled 1-2-5
  double smoothing = 0;  // debiased EMA weight in [0, 1); > 0 also draws the raw curve faintly
  int buckets = 1200;    // at most about this many points per drawn series (about the width)
  // Runs without training steps (PTQ, the base model's evaluation) get no curve: a run's curve
  // starts when it trains. A run with a single point shows it as a dot.
  bool skipRunsWithoutSteps = true;
  // Runs drawn as a level instead of a curve: a dashed horizontal line at the last value of the
  // series across the chart, its legend entry "name: value". The references the curves are read
  // against (the BF16 model and PTQ under QAT and QAD); with or without training steps.
  std::vector<std::string> levels;
};

CurveChartSpec trainLossChartSpec();  // "train/loss", smoothed, log y
CurveChartSpec valLossChartSpec();    // "eval/val_loss", log y
CurveChartSpec valKlChartSpec();      // "eval/val_kl", log y
// "eval/val_loss" on a linear axis, for the runs from the SFT model against the levels of `levels`
// (normally sft and the PTQ runs): how much of PTQ's loss each QAT and QAD run gets back.
CurveChartSpec recoveryChartSpec(std::vector<std::string> levels);

// What a per-layer chart shows: one bar per layer for each run, from its last /quant row.
struct LayerChartSpec {
  std::string metric = "rel_l2";  // a /quant metric (docs/log-schema.md)
  QString title, yTitle;
};
LayerChartSpec layerErrorChartSpec();  // rel_l2, axis from zero

// The run's colour: fixed for the experiment's run names, otherwise picked from the same
// palette by a hash of the name (stable across processes and charts).
QColor runColour(const std::string& runName);

// A new chart with its title, axes and legend, filled with updateCurveChart().
std::unique_ptr<QChart> makeCurveChart(const CurveChartSpec& spec,
                                       const std::vector<RunCurves>& runs);
// Replaces the data of every run's series with one replace() each (adding series for runs that
// now have points), and refits the axes. For live plots: call after each poll(). Repeats of a run
// at other seeds (RunCurves::group) are thin dashed lines in its colour, counted in its legend
// entry ("qat-mxfp4 ×3": three seeds) instead of having their own; the title then says so.
void updateCurveChart(QChart& chart, const CurveChartSpec& spec,
                      const std::vector<RunCurves>& runs);

// Bars per layer, one bar set per run that logged `spec.metric` (layers in the first run's order;
// a layer a run did not quantize has no bar), labelled with the run's mean over its layers. Runs
// without that metric add nothing.
std::unique_ptr<QChart> makeLayerChart(const LayerChartSpec& spec,
                                       const std::vector<RunCurves>& runs);

// Names of the runs drawn in a chart: its curves, then its levels (raw curves not counted), or its
// bar sets.
std::vector<std::string> chartRuns(const QChart& chart);

// Helpers, exposed for tests.
namespace detail {
// TensorBoard's debiased EMA: last = last*w + (1-w)*y; shown = last / (1 - w^n); non-finite y pass
// through unchanged and do not update the average.
std::vector<double> debiasedEma(const std::vector<double>& y, double weight);
// At most `buckets` points: the x range is cut into equal buckets and each keeps its last point.
// Input with at most 2 * buckets points is returned as is.
Points downsampleLast(const Points& points, int buckets);
// Axis label values for a log axis over [lo, hi]: m x 10^k inside the range for the finest of the
// mantissa ladders (1, 1.5, 2, 2.5, 3, 4, ..., 9), (1, ..., 9), (1, 2, 5), (1) that gives at most
// `maxLabels` labels, none closer than 1 / (2 * maxLabels) of the axis to the next. A range too
// narrow for two such labels gets evenly spaced ones at a 1-2-5 step instead.
std::vector<double> logAxisLabels(double lo, double hi, int maxLabels = 12);
// A linear axis' labels over [lo, hi]: at most `maxLabels` (at least 2) values at a 1-2-5 step,
// each written compactly in one unit for the whole axis so that no label is ever elided:
// "0", "50k", "100k", "150k" (tokens), "1.2M", "3.5B"; "0.25", "1500" below ten thousand. The
// step's digits are kept ("100.5k" where ticks are 500 apart). `step` receives the step.
std::vector<std::pair<double, std::string>> linearAxisLabels(double lo, double hi, int maxLabels,
                                                             double* step = nullptr);
}  // namespace detail

}  // namespace fp4lab::widgets
