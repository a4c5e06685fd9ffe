// Finding runs under the roots and following their logs, in the worker thread.
#include "fp4lab/widgets/log_poll_worker.h"

#include <sys/stat.h>

#include <QElapsedTimer>
#include <QFileInfo>
#include <QFileSystemWatcher>
#include <QTimer>

#include <algorithm>
#include <exception>
#include <set>

#include "fp4lab/common/files.h"
#include "fp4lab/widgets/run_curves.h"
#include "fp4lab/widgets/vector_state.h"

namespace fp4lab::widgets {

namespace {

// What changed in a file since the last look: modification time and size (0, 0: absent).
struct Stamp {
  int64_t mtimeNs = 0, size = -1;
  bool operator==(const Stamp& o) const { return mtimeNs == o.mtimeNs && size == o.size; }
  bool operator!=(const Stamp& o) const { return !(*this == o); }
  bool exists() const { return size >= 0; }
};

Stamp stampOf(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return {};
  return {int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec, int64_t(st.st_size)};
}

bool terminal(RunState s) {
  return s == RunState::Finished || s == RunState::Failed || s == RunState::Cancelled ||
         s == RunState::Crashed;
}

}  // namespace

struct LogPollWorker::Tracked {
  RunSnapshot snapshot;
  Stamp status, yaml, log;
  bool folderRead = false;
  std::unique_ptr<RunLogFollower> follower;
};

LogPollWorker::LogPollWorker(QObject* parent) : QObject(parent) {
  qRegisterMetaType<RunSnapshotsPtr>();
}

LogPollWorker::~LogPollWorker() = default;

bool LogPollWorker::isRunFolder(const std::string& dir) {
  return files::isRegularFile(files::join(dir, "run.yaml")) ||
         files::isRegularFile(files::join(dir, "status.json")) ||
         files::isRegularFile(files::join(dir, "log.h5"));
}

void LogPollWorker::ensureTimers() {
  if (m_timer) return;
  // Created on first use, in the thread the worker was moved to.
  m_timer = new QTimer(this);
  m_timer->setInterval(m_intervalMs);
  connect(m_timer, &QTimer::timeout, this, &LogPollWorker::poll);
  m_soon = new QTimer(this);
  m_soon->setSingleShot(true);
  // A live log changes at every flush: polls come at most this often, whatever the watcher says.
  m_soon->setInterval(200);
  connect(m_soon, &QTimer::timeout, this, &LogPollWorker::poll);
  m_watcher = new QFileSystemWatcher(this);
  connect(m_watcher, &QFileSystemWatcher::directoryChanged, this, &LogPollWorker::pollSoon);
  connect(m_watcher, &QFileSystemWatcher::fileChanged, this, &LogPollWorker::pollSoon);
  if (!m_paused) m_timer->start();
}

void LogPollWorker::setRoots(const QStringList& roots) {
  ensureTimers();
  m_roots = roots;
  m_forceEmit = true;
  poll();
}

void LogPollWorker::setIntervalMs(int ms) {
  m_intervalMs = std::max(50, ms);
  if (m_timer) m_timer->setInterval(m_intervalMs);
}

void LogPollWorker::setPaused(bool paused) {
  ensureTimers();
  m_paused = paused;
  if (paused)
    m_timer->stop();
  else
    m_timer->start(), poll();
}

void LogPollWorker::pollSoon() {
  ensureTimers();
  if (!m_paused && !m_soon->isActive()) m_soon->start();
}

bool LogPollWorker::update(Tracked& run) {
  RunSnapshot& s = run.snapshot;
  bool changed = false;
  const Stamp status = stampOf(files::join(s.id, "status.json"));
  const Stamp yaml = stampOf(files::join(s.id, "run.yaml"));
  // A running run's writer may die without touching its files: its state is re-derived (a dead
  // pid reads as crashed) at every poll while it says running or queued.
  const RunState before = s.folder.state;
  if (!run.folderRead || status != run.status || yaml != run.yaml || before == RunState::Running ||
      before == RunState::Queued) {
    run::RunFolder folder = run::readRunFolder(s.id);
    changed = !run.folderRead || status != run.status || yaml != run.yaml ||
              folder.state != before || folder.step != s.folder.step;
    s.folder = std::move(folder);
    run.status = status, run.yaml = yaml, run.folderRead = true;
  }
  const std::string logPath = files::join(s.id, "log.h5");
  const Stamp log = stampOf(logPath);
  if (!log.exists()) {
    if (s.curves || !s.logError.empty()) changed = true;
    run.follower.reset();
    s.curves.reset();
    s.logError.clear();
    run.log = log;
  } else if (log != run.log || (run.follower && s.state() == RunState::Running)) {
    // A log is opened once it has something to read (the writer declares every dataset before
    // it starts SWMR writing and says "running"), and followed while it grows.
    try {
      bool grew = false;
      if (!run.follower) {
        run.follower = std::make_unique<RunLogFollower>(s.name, logPath);
        grew = true;
      } else {
        grew = run.follower->poll();
      }
      if (grew || !s.curves) {
        s.curves = std::make_shared<const RunCurves>(run.follower->curves());
        changed = true;
      }
      if (!s.logError.empty()) changed = true;
      s.logError.clear();
      run.log = log;
    } catch (const std::exception& e) {
      run.follower.reset();
      // A log being created reads as damaged for a moment: only a run that is not writing it
      // shows the error (and it is retried when the file changes).
      const std::string error = s.state() == RunState::Running ? "" : e.what();
      if (error != s.logError) changed = true;
      s.logError = error;
      if (!error.empty()) run.log = log;
    }
    // A finished log is closed (its curves stay): HDF5 handles are not held for every old run.
    if (terminal(s.state()) && run.follower && s.logError.empty()) run.follower.reset();
  }
  if (changed) s.summary = summarize(s.folder, s.curves.get());
  return changed;
}

void LogPollWorker::poll() {
  clearUpperVectorState();  // this thread was started from the GUI thread
  ensureTimers();
  QElapsedTimer clock;
  clock.start();
  bool changed = m_forceEmit;
  m_forceEmit = false;
  std::set<std::string> seen;
  QStringList watched, watchedFiles;
  for (const QString& rootText : m_roots) {
    const std::string root = files::withoutTrailingSlash(rootText.toStdString());
    QString problem;
    std::vector<std::string> dirs;
    if (!files::isDirectory(root)) {
      // A root that never existed is waited for quietly (./runs before the first run); one that
      // went away, or is a file, is a problem to show.
      if (files::exists(root))
        problem = QStringLiteral("not a folder");
      else if (m_seenRoots.count(root))
        problem = QStringLiteral("the folder was removed or renamed");
    } else if (isRunFolder(root)) {
      m_seenRoots.insert(root);
      dirs.push_back(root);
    } else {
      m_seenRoots.insert(root);
      try {
        for (const std::string& name : files::listDirectory(root)) {
          const std::string dir = files::join(root, name);
          if (files::isDirectory(dir) && isRunFolder(dir)) dirs.push_back(dir);
        }
        watched << rootText;
      } catch (const std::exception& e) {
        problem = QString::fromStdString(e.what());
      }
    }
    const auto previous = m_rootProblems.find(root);
    const QString before = previous == m_rootProblems.end() ? QString() : previous->second;
    if (before != problem) {
      m_rootProblems[root] = problem;
      Q_EMIT rootProblem(rootText, problem);
    }
    for (const std::string& dir : dirs) {
      if (!seen.insert(dir).second) continue;  // under two roots: shown once
      auto& tracked = m_runs[dir];
      if (!tracked) {
        tracked = std::make_unique<Tracked>();
        tracked->snapshot.id = dir;
        tracked->snapshot.name = files::baseName(dir);
        tracked->snapshot.root = root;
        changed = true;
      }
      watched << QString::fromStdString(dir);
      changed |= update(*tracked);
      // A running run's log grows without its folder changing: watch the file itself.
      if (tracked->snapshot.state() == RunState::Running)
        watchedFiles << QString::fromStdString(files::join(dir, "log.h5"));
    }
  }
  for (auto it = m_runs.begin(); it != m_runs.end();) {
    if (!seen.count(it->first)) {
      it = m_runs.erase(it);
      changed = true;
    } else {
      ++it;
    }
  }
  // The watcher follows the roots (new run folders) and each run folder (status.json is
  // replaced by rename at every state change).
  const QStringList current = m_watcher->directories();
  for (const QString& dir : current)
    if (!watched.contains(dir)) m_watcher->removePath(dir);
  for (const QString& dir : watched)
    if (!current.contains(dir)) m_watcher->addPath(dir);
  const QStringList currentFiles = m_watcher->files();
  for (const QString& file : currentFiles)
    if (!watchedFiles.contains(file)) m_watcher->removePath(file);
  for (const QString& file : watchedFiles)
    if (!currentFiles.contains(file) && QFileInfo::exists(file)) m_watcher->addPath(file);
  if (changed) {
    auto snapshots = std::make_shared<RunSnapshots>();
    snapshots->reserve(m_runs.size());
    for (const auto& [dir, tracked] : m_runs) snapshots->push_back(tracked->snapshot);
    Q_EMIT snapshotsReady(std::move(snapshots));
  }
  Q_EMIT polled(double(clock.nsecsElapsed()) / 1e6);
}

}  // namespace fp4lab::widgets
