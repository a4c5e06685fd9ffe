// The Curves tab: a grid of CurvePanels (validation loss, training loss, KL to the reference,
// learning rate, gradient norm, tokens/s, one per graded task's pass rate) over the checked runs,
// with the settings every panel shares: x as step, tokens or wall time, log y, smoothing (debiased
// EMA) and a moving average.
#pragma once

#include <QWidget>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "fp4lab/widgets/curve_panel.h"

class QCheckBox;
class QComboBox;
class QGridLayout;
class QSlider;
class QSpinBox;
class QLabel;

namespace fp4lab::widgets {

class ChartsPage : public QWidget {
  Q_OBJECT

 public:
  explicit ChartsPage(QWidget* parent = nullptr);

  void setRuns(RunSnapshotsPtr runs, const std::set<std::string>& shown);
  void setSelectedRun(const std::string& id);
  void resetZoom();
  CurveSettings settings() const;
  void setSettings(const CurveSettings& settings);
  const std::vector<CurvePanel*>& panels() const { return m_panels; }
  CurvePanel* panel(const std::string& series) const;

 Q_SIGNALS:
  void runSelected(const std::string& id);
  void settingsChanged();

 protected:
  void resizeEvent(QResizeEvent* event) override;

 private:
  CurvePanel* addPanel(const std::string& series, const QString& title, bool logAllowed);
  void applySettings();
  void relayout();

  QComboBox* m_x = nullptr;
  QCheckBox* m_logY = nullptr;
  QSlider* m_smoothing = nullptr;
  QLabel* m_smoothingValue = nullptr;
  QSpinBox* m_average = nullptr;
  QGridLayout* m_grid = nullptr;
  int m_columns = 2;                      // of the chart grid: 2, or 1 when the page is narrow
  std::shared_ptr<CurveWorker> m_worker;  // one thread buckets for every panel
  std::vector<CurvePanel*> m_panels;
  std::set<std::string> m_linearOnly;
  std::string m_selected;
};

}  // namespace fp4lab::widgets
