// The Compare tab: two runs (A and B) overlaid on one metric with their difference B − A below,
// the config keys that differ, their final and best metrics side by side, and the validation-loss
// gap each recovers against its PTQ and BF16 references (found from the configs or picked). Runs
// that differ only by seed can be drawn as their mean with a min-max band.
#pragma once

#include <QWidget>

#include <string>
#include <vector>

#include "fp4lab/widgets/run_curves.h"
#include "fp4lab/widgets/run_relations.h"
#include "fp4lab/widgets/run_snapshot.h"

class QAction;
class QAreaSeries;
class QCheckBox;
class QChart;
class QChartView;
class QComboBox;
class QLabel;
class QLineSeries;
class QProgressBar;
class QSplitter;
class QTableWidget;
class QTabWidget;
class QValueAxis;

namespace fp4lab::widgets {

// Helpers of the curves drawn, exposed for tests.
namespace detail {
// The points with finite coordinates, sorted by x (stably), one per x (the last logged).
Points cleanPoints(const Points& points);
// The piecewise-linear value of clean `points` at x; NaN outside [first x, last x].
double interpolate(const Points& points, double x);
// B − A at every x where either has a point, within the range both cover (each interpolated
// linearly between its own points). Empty when the ranges do not overlap.
Points difference(const Points& a, const Points& b);
// Several runs' curves as their mean, min and max at every x where any has a point, within the
// range all of them cover.
struct Band {
  Points mean, lo, hi;
};
Band meanBand(const std::vector<Points>& curves);
}  // namespace detail

class CompareView : public QWidget {
  Q_OBJECT

 public:
  explicit CompareView(QWidget* parent = nullptr);

  // New snapshots (about once a second). The picked runs, metric and references are kept by run
  // id; nothing is redrawn when none of the runs shown changed, or while the view is hidden (it
  // catches up when shown).
  void setRuns(RunSnapshotsPtr runs);
  // Picks runs A and B by id (an id not listed yet is kept and picked when it appears).
  void setPair(const std::string& idA, const std::string& idB);

  const std::string& runA() const { return m_idA; }
  const std::string& runB() const { return m_idB; }

 Q_SIGNALS:
  // The user picked a run in a picker or clicked its curve.
  void runSelected(const std::string& id);

 protected:
  void showEvent(QShowEvent* event) override;

 private:
  struct Curve;  // one side (A or B) of the overlay, as drawn

  void buildUi();
  QChartView* makeChartView(const QString& objectName, const QString& accessibleName);
  void addChartActions(QChartView* view, const QString& what);
  void populateRunCombos();
  void populateMetricCombo();
  void refresh();
  void updateCharts(const Curve& a, const Curve& b);
  void updateConfigTable(int a, int b);
  void updateMetricsTable(const std::vector<std::size_t>& a, const std::vector<std::size_t>& b);
  void updateGap(int side, const std::vector<std::size_t>& members);
  Curve curveOf(int index, bool grouped) const;
  std::vector<std::size_t> membersOf(int index, bool grouped) const;
  int indexOf(const std::string& id) const;
  std::string fingerprint() const;
  QString overlayCsv() const;
  void saveChart(QChartView* view, bool svg);
  void copyChartImage(QChartView* view);
  void alignPlotAreas();

  RunSnapshotsPtr m_runs;
  std::vector<std::string> m_ids;  // of m_runs, as listed in the pickers
  std::vector<std::vector<std::size_t>> m_groups;
  std::vector<int> m_groupOf;                         // run index -> index into m_groups
  std::string m_idA, m_idB, m_ptqRefId, m_bf16RefId;  // "" for the references: automatic
  std::string m_metric = "eval/val_loss";
  std::string m_shown;  // fingerprint of what is drawn
  bool m_dirty = true;
  bool m_sized = false;  // the splitter's first sizes are set

  QComboBox *m_runA = nullptr, *m_runB = nullptr, *m_metricBox = nullptr;
  QComboBox *m_ptqRef = nullptr, *m_bf16Ref = nullptr;
  QCheckBox* m_groupSeeds = nullptr;
  QSplitter* m_split = nullptr;
  QChartView *m_overlayView = nullptr, *m_diffView = nullptr;
  QChart *m_overlay = nullptr, *m_diff = nullptr;
  QValueAxis *m_overlayX = nullptr, *m_overlayY = nullptr, *m_diffX = nullptr, *m_diffY = nullptr;
  QLineSeries *m_lineA = nullptr, *m_lineB = nullptr, *m_diffLine = nullptr, *m_zeroLine = nullptr;
  QAreaSeries *m_bandA = nullptr, *m_bandB = nullptr;
  QTableWidget *m_configTable = nullptr, *m_metricsTable = nullptr;
  QLabel* m_configNote = nullptr;
  QTabWidget* m_tables = nullptr;
  QLabel *m_gapName[2] = {}, *m_gapValue[2] = {}, *m_gapDetail[2] = {};
  QProgressBar* m_gapBar[2] = {};
  // The overlaid data as drawn, for Copy CSV.
  Points m_dataA, m_dataB, m_dataDiff;
  QString m_labelA, m_labelB;
};

}  // namespace fp4lab::widgets
