// The workbench's only reader of run folders and HDF5 logs: a QObject that lives in its own
// QThread, finds the runs under every run root (a file watcher plus a poll, so runs started from a
// shell show up too), follows each log incrementally (RunLogFollower) and publishes immutable
// snapshots of every run to the GUI thread by queued signal. Nothing in the GUI thread touches
// HDF5 or parses a run folder.
#pragma once

#include <QObject>
#include <QString>
#include <QStringList>

#include <map>
#include <memory>
#include <set>
#include <string>

#include "fp4lab/widgets/run_snapshot.h"

class QFileSystemWatcher;
class QTimer;

Q_DECLARE_METATYPE(fp4lab::widgets::RunSnapshotsPtr)

namespace fp4lab::widgets {

class LogPollWorker : public QObject {
  Q_OBJECT

 public:
  explicit LogPollWorker(QObject* parent = nullptr);
  ~LogPollWorker() override;

  // True for a folder that holds a run: run.yaml, status.json or log.h5.
  static bool isRunFolder(const std::string& dir);

 public Q_SLOTS:
  // The folders whose subfolders are runs (a folder that is itself a run counts as its own
  // root). Polls at once.
  void setRoots(const QStringList& roots);
  void setIntervalMs(int ms);  // default 1000
  void setPaused(bool paused);
  // A poll soon (coalesced): after a launch, a stop, or a file-watcher notice.
  void pollSoon();
  // One poll now, then snapshotsReady if anything changed (always after setRoots).
  void poll();

 Q_SIGNALS:
  void snapshotsReady(fp4lab::widgets::RunSnapshotsPtr snapshots);
  // A root that cannot be read (gone, not a folder, no permission); an empty message clears it.
  void rootProblem(const QString& root, const QString& message);
  // How long the last poll took, for the status bar and the benchmark.
  void polled(double milliseconds);

 private:
  struct Tracked;
  void ensureTimers();
  bool update(Tracked& run);

  QStringList m_roots;
  std::map<std::string, QString> m_rootProblems;
  std::set<std::string> m_seenRoots;                       // roots that existed at some poll
  std::map<std::string, std::unique_ptr<Tracked>> m_runs;  // by run folder
  QTimer* m_timer = nullptr;
  QTimer* m_soon = nullptr;
  QFileSystemWatcher* m_watcher = nullptr;
  int m_intervalMs = 1000;
  bool m_paused = false;
  bool m_forceEmit = true;
};

}  // namespace fp4lab::widgets
