// One live chart of one series ("eval/val_loss", "train/loss", ...) for every shown run. The
// curves stay at full resolution in the snapshots; for each frame the chart worker (its own
// thread) buckets the visible x-range at the plot's width in pixels (the last value as the line,
// min/max as a faint band; smoothing first, on the whole series) and the panel hands Qt Charts one
// replace() per series that changed. New data or a zoom marks the panel dirty; one 33 ms timer
// coalesces them into one tagged request to the worker, and a hidden panel does no work.
// Rubber-band and wheel zoom (x), reset; the range follows a live run until the user zooms;
// hover reads every shown run's value at that x; a click selects the run under the cursor.
#pragma once

#include <QString>

#include <cmath>
#include <QWidget>

#include <map>
#include <memory>
#include <set>
#include <string>

#include "fp4lab/widgets/curve_worker.h"
#include "fp4lab/widgets/run_snapshot.h"

class QChart;
class QLabel;
class QTimer;

namespace fp4lab::widgets {

class CurveChartView;

class CurvePanel : public QWidget {
  Q_OBJECT

 public:
  // Panels of one page share `worker`; without one the panel starts its own.
  CurvePanel(const std::string& series, const QString& title,
             std::shared_ptr<CurveWorker> worker = nullptr, QWidget* parent = nullptr);
  ~CurvePanel() override;

  const std::string& series() const { return m_series; }
  void setRuns(RunSnapshotsPtr runs, const std::set<std::string>& shown);
  void setSettings(const CurveSettings& settings);
  const CurveSettings& settings() const { return m_settings; }
  void setSelectedRun(const std::string& id);

  // Values that live in [lo, hi] (pass rates: 0 and 1): the y axis always spans that range, so a
  // flat 0% or 100% reads as such instead of a hair-thin range around it.
  void setValueBounds(double lo, double hi) { m_boundLo = lo, m_boundHi = hi; }
  std::pair<double, double> yAxisRange() const { return {m_yLo, m_yHi}; }

  // The x-range shown (in the x axis's units); resetZoom() goes back to following the data.
  void setXRange(double x0, double x1);
  void resetZoom();
  bool isZoomed() const { return m_zoomed; }
  std::pair<double, double> xRange() const { return {m_x0, m_x1}; }

  // Draws now instead of at the next frame (tests, benchmark): the same request to the worker,
  // waited for. Returns the points handed to the chart.
  int redrawNow();
  // Asks for a frame (coalesced; none while the panel is hidden or scrolled out of view).
  void markDirty();
  // The delay of a frame after new data: panels of one page draw one after another instead of
  // all in one long paint.
  void setFrameDelayMs(int ms);
  int drawnPoints() const { return m_drawnPoints; }
  bool hasData() const;
  // What the plot says when the checked runs have nothing to draw in it (why, and what to do);
  // the default says the runs have no values of it yet. The message shown now ("" while it draws).
  void setEmptyText(const QString& text);
  const QString& emptyText() const { return m_emptyText; }
  QString emptyMessage() const;
  // The value read-out at x, one "run: value" line per shown run with a value there (a run that
  // ended well before x has none).
  QString readoutAt(double x) const;
  // The run whose drawn line passes nearest to (x, y in data units) within `tolerance` of the y
  // axis span, or "".
  std::string runNear(double x, double y, double tolerance) const;

  QChart* chart() const;
  CurveChartView* view() const { return m_view; }
  // Exports: the chart as shown, and every shown run's full data in the current x units.
  // The chart without the hover read-out, at `scale` times its on-screen size (chart_export.h).
  bool savePng(const QString& path, QString* error, double scale = 2.0) const;
  // "validation-loss-qat-nvfp4.png": the chart's title and the run it draws (or how many).
  QString suggestedName(const QString& extension) const;
  bool saveSvg(const QString& path, QString* error) const;
  QString csv() const;

 Q_SIGNALS:
  void runSelected(const std::string& id);
  void zoomChanged();

 protected:
  void showEvent(QShowEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;

 private:
  friend class CurveChartView;
  struct RunCurve;
  bool onScreen() const;
  uint64_t requestFrame();
  void applyFrame(const std::shared_ptr<const CurveFrame>& frame);
  double valueOf(const RunCurve& c, double x) const;
  void updateReadout(double x);
  void placeEmptyMessage();
  void contextMenu(const QPoint& global);

  std::string m_series;
  QString m_title;
  CurveSettings m_settings;
  RunSnapshotsPtr m_runs;
  std::set<std::string> m_shown;
  std::string m_selected;
  std::shared_ptr<CurveWorker> m_worker;
  uint64_t m_applied = 0;                                     // the last frame drawn
  std::map<std::string, std::unique_ptr<RunCurve>> m_curves;  // drawn runs, by id
  CurveChartView* m_view = nullptr;
  QLabel* m_readout = nullptr;
  QLabel* m_empty = nullptr;  // centred over the plot while nothing is drawn
  QString m_emptyText;
  QTimer* m_frame = nullptr;
  bool m_dirty = true, m_zoomed = false;
  double m_x0 = 0, m_x1 = 1;
  int m_drawnPoints = 0;
  int m_labelChars = -1;  // the widest y label at the last layout
  double m_yLo = NAN, m_yHi = NAN;
  double m_boundLo = NAN, m_boundHi = NAN;  // setValueBounds
  int m_yLabels = 0;
  double m_xLo = NAN, m_xHi = NAN;  // the x axis' range and label count at the last frame
  int m_xLabels = 0;
  bool m_yLog = true;
};

}  // namespace fp4lab::widgets
