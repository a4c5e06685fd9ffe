// The Quantization tab of the workbench: where 4-bit hurts, layer by layer.
// - Run view: for the selected run (A), and optionally a second run (B), a heatmap of layers (rows,
//   in /quant/layers order: model order, grouped by block) x evaluations (columns, /quant/step) of
//   one /quant metric; A − B on RdBu when B is set (aligned by layer name and step; a layer or a
//   step missing in B is NaN, drawn grey). Beside it the worst layers at the last evaluation
//   (WorstLayersModel).
// - Layer view (click a row of the run view): that layer's per-block error map at the clicked
//   evaluation (a step picker, or a click on the chart, picks another), read from
//   /quant/blocks/<l> off the GUI thread, laid out at the weight's shape (the log's `rows`); with
//   a run B, B's map of the same layer beside it at the same step (or B's nearest), on one
//   colour scale; the weight and scale-code histograms of the layer's weights at that step (the
//   run's checkpoint of that step, or its final model, analysed with fp4lab_analyze in the run's
//   format, off the GUI thread; for B too); and the layer's metric against the step.
// - Model view: an analysis file of `fp4lab analyze --output` (read off the GUI thread): layers x
//   formats of a metric; for a clicked cell the layer's block map in that format, its weight
//   histogram and its scale-code histogram; with a second format chosen ("Beside"), that
//   format's block map and scale codes beside them, the maps on one colour scale.
// Wherever data cannot be shown, the view says why in text instead of drawing zeros.
//
// Reading: the per-block rows are read on demand by a QThreadPool task with its own
// log::RunLogReader (one short read of one dataset row, which the fp4lab_log library's
// process-wide HDF5 lock makes safe beside the LogPollWorker's readers), rather than by a tagged
// request to the LogPollWorker: the worker's snapshots stay free of per-block data (they are
// copied to every view each second), and a click is not queued behind a poll of every run.
// Requests carry a serial number; only the latest one's answer is shown.
#pragma once

#include <QAbstractTableModel>
#include <QStringList>
#include <QWidget>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fp4lab/widgets/heatmap_colors.h"
#include "fp4lab/widgets/run_curves.h"
#include "fp4lab/widgets/run_snapshot.h"

class QChart;
class QChartView;
class QComboBox;
class QLabel;
class QPushButton;
class QTableView;
class QSplitter;
class QTabWidget;

namespace fp4lab::analyze {
struct Analysis;
struct Entry;
}  // namespace fp4lab::analyze

namespace fp4lab::widgets {

class HeatmapWidget;
class FrontierChart;
class BarChartWidget;

namespace detail {
// A matrix for a heatmap, row-major, NaN = not measured.
struct QuantMatrix {
  int rows = 0, cols = 0;
  std::vector<float> values;
  QStringList rowLabels, colLabels;
  std::vector<int64_t> steps;  // per column
  int missingLayers = 0;       // A − B: rows of A that B does not have
  int missingSteps = 0;        // A − B: columns of A whose step B did not measure
};
// Layers x evaluations of one metric of one run; empty (rows 0) without /quant rows or metric.
QuantMatrix runMatrix(const RunCurves& run, const std::string& metric);
// A − B, on A's layers and steps: B's value of the same layer name at the same step; NaN where B
// has no such layer, step or metric, or either value is NaN.
QuantMatrix differenceMatrix(const RunCurves& a, const RunCurves& b, const std::string& metric);
// "model.layers.3.mlp.down_proj" -> "3.mlp.down_proj" (row labels; tooltips keep the full name).
QString shortLayerName(const std::string& module);
// The columns of the block grid of a weight with `blocks` blocks: blocks / rows when the weight's
// row count is known and divides it, else the divisor of `blocks` nearest its square root
// (the run log does not record the weight's shape).
int blockGridColumns(int64_t blocks, int64_t rows = 0);
// The index of the step nearest `step` (the earlier one on a tie); -1 for no steps.
int nearestColumn(const std::vector<int64_t>& steps, int64_t step);
// One row of a run's /quant/blocks/<l>: the values (empty when `error` says why), the weight's
// row count (0: the log does not record it), and the step.
struct BlockRow {
  std::vector<float> values;
  int64_t rows = 0, step = -1;
  QString error;
};
// Draws per-block errors at the weight's own layout (`weightRows` rows of blocks, when known and
// dividing the count; else near-square, blockGridColumns) with the automatic colour scale. True
// when the layout is the weight's.
bool showBlockMap(HeatmapWidget* map, std::vector<float> values, int64_t weightRows,
                  const QString& title);
// Gives two maps shown side by side one colour scale, the union of their automatic ones; each its
// own when either has no data (false).
bool shareScale(HeatmapWidget* a, HeatmapWidget* b);
// The scale-code histogram of one analysed layer in `format` (E8M0 exponents, E4M3 values), or
// why there is none; `who` names it in the title.
void drawScaleHistogram(BarChartWidget* chart, const analyze::Entry* entry,
                        const std::string& format, const QString& who);
// The |w| histogram (log2 bins, both signs) of layer `layer` of an analysis.
void drawWeightHistogram(BarChartWidget* chart, const analyze::Analysis& a, size_t layer,
                         const QString& suffix = {});
// The analyze format name of a run's quantization ("mxfp4", "mxfp4-floor", "nvfp4",
// "nvfp4-2d"); "" for a run that does not quantize.
std::string analysisFormatOf(const run::RunConfig& config);
// The folder holding a run's weights at `step`: checkpoints/step-<step>, or, for the run's last
// evaluation (`last`), its final model/; "" when the run kept neither.
std::string weightsAtStep(const std::string& runDir, int64_t step, bool last);
// One run's weights of the layer shown, analysed in its format (or why not).
struct LayerWeights {
  std::shared_ptr<const analyze::Analysis> analysis;  // one layer, one format
  std::string folder, format;
  QString error;
};
}  // namespace detail

// The worst layers of one metric, worst first: for sqnr_db, act_sqnr_db and cosine the lowest
// value, for the errors (rel_l2, mse, max_abs, clip_frac, ...) the highest
// (heatmap::higherIsWorse). For a difference A − B the same rule applies to the difference: the
// layers where A is worse than B by the most come first. NaN layers are left out (see
// notMeasured()). Columns: layer, value. Qt::UserRole gives the value as a double and, on the
// layer column, the layer's index in the input.
class WorstLayersModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  explicit WorstLayersModel(QObject* parent = nullptr);

  void setValues(const std::vector<std::string>& layers, const std::vector<float>& values,
                 bool higherIsWorse, const QString& valueHeader);
  void clear();
  int notMeasured() const { return m_notMeasured; }
  // The layer index (into the input) of a row.
  int layerOf(int row) const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;

 private:
  struct Row {
    int layer;
    std::string name;
    float value;
  };
  std::vector<Row> m_rows;
  QString m_header = QStringLiteral("value");
  int m_notMeasured = 0;
};

// A plain bar chart (histograms): one bar per value, sparse labels below, the largest count on
// the left. Shows `emptyText` when there are no bars.
class BarChartWidget : public QWidget {
  Q_OBJECT

 public:
  explicit BarChartWidget(QWidget* parent = nullptr);
  void setBars(std::vector<double> values, QStringList labels, const QString& title);
  void setEmptyText(const QString& text);
  const std::vector<double>& values() const { return m_values; }
  QString emptyText() const { return m_empty; }
  void paint(QPainter& painter, const QSize& size) const;

 protected:
  void paintEvent(QPaintEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;

 private:
  std::vector<double> m_values;
  QStringList m_labels;
  QString m_title, m_empty;
};

class QuantInspector : public QWidget {
  Q_OBJECT

 public:
  explicit QuantInspector(QWidget* parent = nullptr);
  ~QuantInspector() override;
  // Below this width the run and model views stack their halves (map above, details below).
  static constexpr int kStackBelowWidth = 760;
  int heightForWidth(int width) const override;

  // New snapshots; nothing is redrawn while hidden or when the runs shown did not change.
  void setRuns(RunSnapshotsPtr runs);
  // The run table's selection becomes run A.
  void setSelectedRun(const std::string& id);
  void setRunB(const std::string& id);  // "" for none
  void setMetric(const std::string& metric);
  // The layer view of one layer (index into A's /quant/layers) at evaluation `column` (-1: last).
  void showLayer(int layer, int column = -1);
  // Opens an analysis file in the model view (read on a worker thread; analysisLoaded follows).
  void openAnalysis(const QString& path);
  void openAnalysisDialog();
  // The model view's second format ("Beside"), "" for none; redraws the clicked cell.
  void setModelCompareFormat(const std::string& format);
  // A file of `fp4lab sensitivity --output FILE.json`: its size/accuracy frontier under the
  // model view's heatmap. False (the chart says why) for a file that cannot be read.
  bool openSensitivity(const QString& path, QString* error = nullptr);
  void openSensitivityDialog();
  FrontierChart* frontier() const { return m_frontier; }
  void showView(int index);  // 0 run, 1 layer, 2 model

  const std::string& runA() const { return m_idA; }
  const std::string& runB() const { return m_idB; }
  const std::string& metric() const { return m_metric; }
  HeatmapWidget* runHeatmap() const { return m_runMap; }
  HeatmapWidget* layerBlocks() const { return m_layerBlocks; }
  HeatmapWidget* layerBlocksB() const { return m_layerBlocksB; }  // hidden without a run B
  QComboBox* layerStepBox() const { return m_layerStep; }
  BarChartWidget* layerWeightHistogram() const { return m_layerWeights; }
  BarChartWidget* layerScaleHistogram() const { return m_layerScales; }
  BarChartWidget* layerScaleHistogramB() const { return m_layerScalesB; }
  HeatmapWidget* modelHeatmap() const { return m_modelMap; }
  HeatmapWidget* modelBlocks() const { return m_modelBlocks; }
  HeatmapWidget* modelBlocksB() const { return m_modelBlocksB; }  // hidden unless "Beside" is set
  BarChartWidget* scaleHistogramB() const { return m_scaleHistB; }
  QComboBox* modelCompareBox() const { return m_modelCompare; }
  BarChartWidget* weightHistogram() const { return m_weightHist; }
  BarChartWidget* scaleHistogram() const { return m_scaleHist; }
  WorstLayersModel* worstLayers() const { return m_worst; }
  QString runNote() const;
  QString layerNote() const;
  QString modelNote() const;
  int layerShown() const { return m_layer; }
  // Refreshes now even when hidden (tests, screenshots).
  void refreshNow();

 Q_SIGNALS:
  void layerBlocksLoaded();      // the block map of the layer view is drawn (or its absence said)
  void layerHistogramsLoaded();  // the layer view's weight and scale-code histograms too
  void analysisLoaded(bool ok);
  void runSelected(const std::string& id);

 protected:
  void showEvent(QShowEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  void fitToWidth();
  void setModelFileText(const QString& text);
  void elideModelFile();
  void buildRunView(QWidget* page);
  void buildLayerView(QWidget* page);
  void buildModelView(QWidget* page);
  void populateRunCombos();
  void populateMetricCombo();
  void refreshRunView();
  void refreshLayerChart();
  void requestBlocks();
  void requestHistograms(const RunSnapshot& a, int column, const RunSnapshot* b, int columnB);
  void applyHistograms(const detail::LayerWeights& a, const std::optional<detail::LayerWeights>& b);
  void applyBlocks(detail::BlockRow a, std::optional<detail::BlockRow> b, const QString& aName,
                   const QString& bName, const QString& bWhy);
  void applyAnalysis(std::shared_ptr<const analyze::Analysis> analysis, const QString& path,
                     const QString& error);
  void refreshModelView();
  void showModelCell(int layer, int format);
  const RunSnapshot* find(const std::string& id) const;
  std::string fingerprint() const;

  RunSnapshotsPtr m_runs;
  std::string m_idA, m_idB, m_metric = "sqnr_db", m_shown, m_comboKey;
  bool m_dirty = true;
  int m_layer = -1, m_column = -1;
  std::string m_layerName;
  uint64_t m_blockRequest = 0;
  uint64_t m_histogramRequest = 0;
  uint64_t m_analysisRequest = 0;
  std::shared_ptr<const analyze::Analysis> m_analysis;
  QString m_analysisPath;
  std::string m_modelMetric = "sqnr_db";
  std::string m_modelCompareFormat;  // "" for none
  int m_modelLayer = -1, m_modelFormat = -1;

  QTabWidget* m_views = nullptr;
  QComboBox *m_runA = nullptr, *m_runB = nullptr, *m_metricBox = nullptr;
  HeatmapWidget* m_runMap = nullptr;
  QLabel* m_runNote = nullptr;
  WorstLayersModel* m_worst = nullptr;
  QLabel* m_worstLabel = nullptr;
  QTableView* m_worstView = nullptr;
  QLabel* m_layerTitle = nullptr;
  QLabel* m_layerNote = nullptr;
  QComboBox* m_layerStep = nullptr;
  HeatmapWidget* m_layerBlocks = nullptr;
  HeatmapWidget* m_layerBlocksB = nullptr;
  QSplitter *m_layerMaps = nullptr, *m_layerHistograms = nullptr;
  QSplitter *m_runSplit = nullptr, *m_modelSplit = nullptr;  // stacked when narrow
  bool m_watchingParent = false;
  QString m_modelFileText;  // the analysis file's label in full (shown cut in the middle)
  BarChartWidget *m_layerWeights = nullptr, *m_layerScales = nullptr;
  BarChartWidget *m_layerWeightsB = nullptr, *m_layerScalesB = nullptr;
  QChartView* m_layerChartView = nullptr;
  QChart* m_layerChart = nullptr;
  QPushButton* m_openAnalysis = nullptr;
  QPushButton* m_openSensitivity = nullptr;
  FrontierChart* m_frontier = nullptr;
  QLabel* m_modelFile = nullptr;
  QLabel* m_modelNote = nullptr;
  QComboBox* m_modelMetricBox = nullptr;
  HeatmapWidget* m_modelMap = nullptr;
  QComboBox* m_modelCompare = nullptr;
  HeatmapWidget *m_modelBlocks = nullptr, *m_modelBlocksB = nullptr;
  BarChartWidget *m_weightHist = nullptr, *m_scaleHist = nullptr, *m_scaleHistB = nullptr;
};

}  // namespace fp4lab::widgets
