// Launching runs: each job is a child process of the fp4lab executable (`fp4lab train ...
// --events jsonl`, `fp4lab experiment ...`) under QProcess, so an out-of-memory, an abort or a
// CUDA fault kills the run, never the workbench. A queue runs one job per device at a time
// (configurable); stop sends SIGTERM (the run checkpoints and exits) and kill follows after a
// timeout; progress arrives as JSON lines on the child's stdout; the console output is kept, up
// to a bound, so a flooding child cannot exhaust memory.
#pragma once

#include <QList>
#include <QObject>
#include <QPair>
#include <QProcess>
#include <QString>
#include <QStringList>

#include <deque>
#include <map>
#include <memory>

class QTimer;

namespace fp4lab::widgets {

// One progress event of a child (RunEvent's JSON line, docs/user-guide.md).
struct JobEvent {
  QString kind;  // started, step, eval, checkpoint, warning, finished, failed, cancelled
  qint64 step = 0, maxSteps = 0;
  double loss = 0, tokensPerSecond = 0, etaSeconds = 0;
  QString message, path;
  QList<QPair<QString, double>> metrics;  // an eval's val_loss, val_kl, pass_rate_<task>, ...
};

// The line the run's console shows for an event, as `fp4lab train` prints it on a terminal:
// "step 10/400  loss 2.31  1520 tok/s  ETA 3 min 20 s", "eval at step 10: val_loss 2.05 ...".
QString describeJobEvent(const JobEvent& event);

// Parses one line of `--events jsonl` output; false for a line that is not an event (plain
// console output, a partial or garbled line).
bool parseJobEvent(const QByteArray& line, JobEvent* event);

struct Job {
  QString id;        // the run folder (or the experiment's folder): the key of the job
  QString label;     // shown in the queue ("qat-nvfp4", "built-in experiment")
  QStringList args;  // arguments of the fp4lab executable
  QString device = QStringLiteral("cpu");
  QString workingDir;  // "" : the workbench's
};

// The queue's device for a run's train.device: "cpu", or "cuda:N" ("cuda" is GPU 0, where a run
// of one process trains), so that a CPU run and a GPU run go at once, two runs on one GPU do not.
QString queueDevice(const QString& trainDevice);

enum class JobState { Queued, Running, Finished, Failed, Cancelled, Crashed };
const char* toString(JobState state);

class RunQueue : public QObject {
  Q_OBJECT

 public:
  explicit RunQueue(QObject* parent = nullptr);
  ~RunQueue() override;  // kills what still runs (the caller stops and waits first)

  // The fp4lab executable the jobs run. Checked at every start: a missing or wrong binary
  // fails that job with a message, the queue goes on.
  void setProgram(const QString& program);
  QString program() const { return m_program; }
  // How many jobs may run at once on a device (default 1; "cpu", "cuda:0", ...).
  void setSlots(const QString& device, int n);
  void setStopTimeoutMs(int ms) { m_stopTimeoutMs = ms; }
  // Lines of console output kept per job (older ones are dropped).
  void setMaxConsoleLines(int n) { m_maxConsoleLines = n; }

  // Adds a job (starting it when a slot is free). False if a job with that id is queued or
  // running.
  bool enqueue(const Job& job);
  // Queued: taken off the queue (Cancelled). Running: SIGTERM, then SIGKILL after the timeout.
  bool stop(const QString& id);
  bool kill(const QString& id);  // SIGKILL now
  // Stops every job and waits up to `ms` for them to exit; what is left is killed.
  void shutdown(int ms);

  bool contains(const QString& id) const;  // queued or running here
  bool isRunning(const QString& id) const;
  JobState state(const QString& id) const;  // of a job this queue has seen (Finished if unknown)
  QStringList console(const QString& id) const;
  QString lastError(const QString& id) const;
  const JobEvent* lastEvent(const QString& id) const;  // null before the first event
  QStringList activeIds() const;                       // queued and running, in queue order
  int runningCount() const;

 Q_SIGNALS:
  void jobQueued(const QString& id);
  void jobStarted(const QString& id);
  void jobEvent(const QString& id, const fp4lab::widgets::JobEvent& event);
  void consoleAppended(const QString& id, const QString& text);
  // state: Finished, Failed (non-zero exit, or it could not start), Cancelled, Crashed (killed
  // by a signal it did not ask for: SIGKILL, SIGSEGV, abort, out of memory).
  void jobFinished(const QString& id, fp4lab::widgets::JobState state, const QString& message);

 private:
  struct Entry;
  void startReady();
  void start(Entry& entry);
  void readOutput(Entry& entry, QProcess::ProcessChannel channel);
  void appendConsole(Entry& entry, const QString& text);
  void finish(Entry& entry, JobState state, const QString& message);
  Entry* find(const QString& id);
  const Entry* find(const QString& id) const;

  QString m_program;
  std::map<QString, int> m_slots;
  int m_stopTimeoutMs = 30000;
  int m_maxConsoleLines = 5000;
  std::deque<std::unique_ptr<Entry>> m_entries;  // queued and running, in queue order
  std::map<QString, std::unique_ptr<Entry>> m_done;
};

}  // namespace fp4lab::widgets

Q_DECLARE_METATYPE(fp4lab::widgets::JobEvent)
