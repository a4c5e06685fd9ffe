// The workbench's main window: the Runs dock (table, filter, facets), a central tab area (Curves,
// Compare, Quantization (the inspector), and reports), the Run details
// dock, a status bar with the selected run's progress, and the menus whose actions the toolbar and
// context menus reuse. It owns the log worker's thread and the run queue; nothing it does on the
// GUI thread reads HDF5.
#pragma once

#include <QMainWindow>
#include <QStringList>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "fp4lab/widgets/run_queue.h"
#include "fp4lab/widgets/run_snapshot.h"

class QAction;
class QComboBox;
class QLabel;
class QLineEdit;
class QTabWidget;
class QTableView;
class QThread;
class QTimer;
class QToolButton;

namespace fp4lab::run {
struct RunConfig;
}

namespace fp4lab::widgets {

class ChartsPage;
class CompareView;
class LogPollWorker;
class QuantInspector;
class RunDetails;
class RunFilterProxy;
class RunTableModel;

struct WorkbenchOptions {
  QStringList roots;  // run roots; empty: the remembered ones, else ./runs
  QString program;    // the fp4lab executable runs are launched with
  int cpuSlots = 1;   // runs at once on the CPU
  int pollMs = 1000;
};

class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  explicit MainWindow(const WorkbenchOptions& options, QWidget* parent = nullptr);
  ~MainWindow() override;

  // The layout version of saveState; a saved state of another version is not restored.
  static constexpr int kLayoutVersion = 1;

  QStringList roots() const { return m_roots; }
  void addRoot(const QString& root);
  void removeRoot(const QString& root);

  // Prepares the run folder (run.yaml, status "queued") under the first root and queues it;
  // returns the folder, or "" with the error shown in the message bar.
  QString launch(const run::RunConfig& config, const QString& root = {});
  // Opens an experiment's report.md in a tab of its own.
  void openReport(const QString& experimentDir);
  // The built-in experiment as one job; its folder becomes a root so its runs appear live, and
  // its report opens in a tab when it ends.
  QString runExperiment(const QStringList& extraArgs = {}, const QString& dir = {});
  // PTQ, QAT and QAD in MXFP4 and NVFP4 from a BF16 run's model (or a model folder), queued as a
  // group with the base run's settings. Returns the queued run folders.
  QStringList compareFormats(const std::string& runOrModel);
  bool stopRun(const std::string& id);
  bool killRun(const std::string& id);
  bool resumeRun(const std::string& id);
  // Deletes the run folder after `confirmed` (the dialog's answer); never a running run.
  bool deleteRun(const std::string& id, bool confirmed);

  void selectRun(const std::string& id);
  std::string selectedRun() const;
  void refresh();
  void setLive(bool live);
  void resetLayout();
  QString messageText() const;

  RunTableModel* runsModel() const { return m_model; }
  RunFilterProxy* runsProxy() const { return m_proxy; }
  ChartsPage* charts() const { return m_charts; }
  CompareView* compare() const { return m_compare; }
  QuantInspector* inspector() const { return m_inspector; }
  RunDetails* details() const { return m_details; }
  RunQueue* queue() const { return m_queue; }
  QTabWidget* centralTabs() const { return m_tabs; }
  // The central tab that shows `view` (a page, or a view inside one); -1 if none does.
  int tabOf(const QWidget* view) const;
  void showView(QWidget* view);
  QAction* action(const QString& objectName) const;
  // Every snapshot received (tests wait on it).
  RunSnapshotsPtr lastSnapshots() const { return m_snapshots; }

 Q_SIGNALS:
  void snapshotsApplied();
  void requestRoots(const QStringList& roots);  // to the worker
  void requestPoll();
  void requestPaused(bool paused);

 protected:
  void closeEvent(QCloseEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;
  void showEvent(QShowEvent* event) override;

 private:
  void buildActions();
  void buildMenus();
  void buildDocks();
  void restoreSettings();
  void fitDefaultLayout();
  void keepMiddleWide();
  void saveSettings();
  void onSnapshots(RunSnapshotsPtr snapshots);
  void onSelectionChanged();
  void onJobFinished(const QString& id, JobState state, const QString& message);
  void updateStatusBar();
  void updateActions();
  void showMessage(const QString& text, bool error = true);
  void newRun(const run::RunConfig* prefill = nullptr, const QString& file = {});
  void runsContextMenu(const QPoint& pos);
  void pushChartRuns();
  void onFilterChanged();
  RunSnapshotsPtr markStarting(RunSnapshotsPtr snapshots) const;
  void fitColumns();
  const RunSnapshot* snapshot(const std::string& id) const;

  WorkbenchOptions m_options;
  QStringList m_roots;
  QThread* m_thread = nullptr;
  LogPollWorker* m_worker = nullptr;
  RunQueue* m_queue = nullptr;
  RunSnapshotsPtr m_snapshots;     // as shown: with "starting" marked
  RunSnapshotsPtr m_rawSnapshots;  // as the worker published them
  bool m_shownOnce = false;
  std::string m_lastSelected;      // the run last selected (kept while a filter hides it)
  QLabel* m_filterHint = nullptr;  // says so when the filter matches no run
  RunTableModel* m_model = nullptr;
  RunFilterProxy* m_proxy = nullptr;
  QTableView* m_table = nullptr;
  QLineEdit* m_filter = nullptr;
  QComboBox* m_recipeFacet = nullptr;
  QComboBox* m_formatFacet = nullptr;
  QTabWidget* m_tabs = nullptr;
  ChartsPage* m_charts = nullptr;
  CompareView* m_compare = nullptr;
  QuantInspector* m_inspector = nullptr;
  RunDetails* m_details = nullptr;
  QLabel* m_message = nullptr;
  QToolButton* m_messageClose = nullptr;
  QWidget* m_messageBar = nullptr;
  QLabel* m_progress = nullptr;
  QLabel* m_pollInfo = nullptr;
  QByteArray m_defaultState;
  std::set<QString> m_experiments;  // experiment jobs, by folder
  std::map<QString, QStringList> m_groups;
  bool m_live = true;
};

}  // namespace fp4lab::widgets
