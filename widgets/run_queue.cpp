// Child processes of runs: start, parse events, keep console output, stop and kill.
#include "fp4lab/widgets/run_queue.h"

#include <QFileInfo>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTimer>

#include <algorithm>

namespace fp4lab::widgets {

bool parseJobEvent(const QByteArray& line, JobEvent* event) {
  const QByteArray text = line.trimmed();
  if (!text.startsWith('{')) return false;
  QJsonParseError error{};
  const QJsonDocument doc = QJsonDocument::fromJson(text, &error);
  if (error.error != QJsonParseError::NoError || !doc.isObject()) return false;
  const QJsonObject o = doc.object();
  const QJsonValue kind = o.value(QStringLiteral("event"));
  if (!kind.isString()) return false;
  JobEvent e;
  e.kind = kind.toString();
  e.step = o.value(QStringLiteral("step")).toInteger();
  e.maxSteps = o.value(QStringLiteral("max_steps")).toInteger();
  e.loss = o.value(QStringLiteral("loss")).toDouble();
  e.tokensPerSecond = o.value(QStringLiteral("tok_per_s")).toDouble();
  e.etaSeconds = o.value(QStringLiteral("eta_s")).toDouble();
  e.message = o.value(QStringLiteral("message")).toString();
  e.path = o.value(QStringLiteral("path")).toString();
  for (auto it = o.begin(); it != o.end(); ++it)
    if ((it.key().startsWith(QLatin1String("val_")) ||
         it.key().startsWith(QLatin1String("pass_rate_"))) &&
        it.value().isDouble())
      e.metrics.append({it.key(), it.value().toDouble()});
  *event = e;
  return true;
}

QString describeJobEvent(const JobEvent& e) {
  const auto g = [](double v) { return QString::number(v, 'g', 4); };
  if (e.kind == QLatin1String("step")) {
    QString line = QStringLiteral("step %1/%2  loss %3").arg(e.step).arg(e.maxSteps).arg(g(e.loss));
    if (e.tokensPerSecond > 0)
      line += QStringLiteral("  %1 tok/s").arg(e.tokensPerSecond, 0, 'f', 0);
    if (e.etaSeconds > 0) {
      const qint64 s = qint64(e.etaSeconds + 0.5);
      line += s >= 60 ? QStringLiteral("  ETA %1 min %2 s").arg(s / 60).arg(s % 60)
                      : QStringLiteral("  ETA %1 s").arg(s);
    }
    return line;
  }
  if (e.kind == QLatin1String("eval")) {
    QStringList parts;
    for (const auto& [name, value] : e.metrics) parts << name + QLatin1Char(' ') + g(value);
    return QStringLiteral("eval at step %1: %2").arg(e.step).arg(parts.join(QStringLiteral("  ")));
  }
  QString line = e.kind;
  if (!e.message.isEmpty()) line += QStringLiteral(": ") + e.message;
  if (!e.path.isEmpty())
    line += (e.message.isEmpty() ? QStringLiteral(": ") : QStringLiteral(" ")) + e.path;
  return line;
}

const char* toString(JobState state) {
  switch (state) {
    case JobState::Queued:
      return "queued";
    case JobState::Running:
      return "running";
    case JobState::Finished:
      return "finished";
    case JobState::Failed:
      return "failed";
    case JobState::Cancelled:
      return "cancelled";
    case JobState::Crashed:
      return "crashed";
  }
  return "unknown";
}

struct RunQueue::Entry {
  Job job;
  JobState state = JobState::Queued;
  QProcess* process = nullptr;  // owned by the queue (parent), deleted later
  QTimer* killTimer = nullptr;
  bool stopRequested = false, killRequested = false;
  QByteArray stdoutTail, stderrTail;  // a partial last line
  QStringList console;
  qint64 droppedLines = 0;
  QString error;
  bool hasEvent = false;
  JobEvent last;
};

RunQueue::RunQueue(QObject* parent) : QObject(parent) {
  qRegisterMetaType<JobEvent>();
  qRegisterMetaType<JobState>();
}

RunQueue::~RunQueue() {
  for (auto& e : m_entries) {
    if (e->process) {
      e->process->disconnect(this);
      e->process->kill();
      e->process->waitForFinished(2000);
    }
  }
}

void RunQueue::setProgram(const QString& program) {
  m_program = program;
}

QString queueDevice(const QString& trainDevice) {
  return trainDevice == QLatin1String("cuda") ? QStringLiteral("cuda:0") : trainDevice;
}

void RunQueue::setSlots(const QString& device, int n) {
  m_slots[device] = std::max(1, n);
  startReady();
}

RunQueue::Entry* RunQueue::find(const QString& id) {
  for (auto& e : m_entries)
    if (e->job.id == id) return e.get();
  const auto it = m_done.find(id);
  return it == m_done.end() ? nullptr : it->second.get();
}

const RunQueue::Entry* RunQueue::find(const QString& id) const {
  return const_cast<RunQueue*>(this)->find(id);
}

bool RunQueue::enqueue(const Job& job) {
  if (contains(job.id)) return false;
  m_done.erase(job.id);
  auto entry = std::make_unique<Entry>();
  entry->job = job;
  m_entries.push_back(std::move(entry));
  Q_EMIT jobQueued(job.id);
  startReady();
  return true;
}

void RunQueue::startReady() {
  std::map<QString, int> busy;
  for (const auto& e : m_entries)
    if (e->state == JobState::Running) ++busy[e->job.device];
  // In queue order; a job whose device is full waits without holding up other devices.
  for (size_t i = 0; i < m_entries.size(); ++i) {
    Entry& e = *m_entries[i];
    if (e.state != JobState::Queued) continue;
    const auto slots = m_slots.find(e.job.device);
    const int allowed = slots == m_slots.end() ? 1 : slots->second;
    if (busy[e.job.device] >= allowed) continue;
    ++busy[e.job.device];
    start(e);
    if (m_entries.size() <= i || m_entries[i].get() != &e) --i;  // it failed and was removed
  }
}

void RunQueue::start(Entry& e) {
  const QFileInfo program(m_program);
  if (m_program.isEmpty() || !program.isFile() || !program.isExecutable()) {
    finish(e, JobState::Failed,
           QStringLiteral("cannot start the run: the fp4lab program '%1' is %2 (start the "
                          "workbench from the fp4lab executable, or set FP4LAB_BIN)")
               .arg(m_program, m_program.isEmpty() ? QStringLiteral("not set")
                               : program.exists()  ? QStringLiteral("not executable")
                                                   : QStringLiteral("missing")));
    return;
  }
  e.state = JobState::Running;
  e.process = new QProcess(this);
  e.process->setProgram(m_program);
  e.process->setArguments(e.job.args);
  if (!e.job.workingDir.isEmpty()) e.process->setWorkingDirectory(e.job.workingDir);
  const QString id = e.job.id;
  connect(e.process, &QProcess::readyReadStandardOutput, this, [this, id] {
    if (Entry* x = find(id)) readOutput(*x, QProcess::StandardOutput);
  });
  connect(e.process, &QProcess::readyReadStandardError, this, [this, id] {
    if (Entry* x = find(id)) readOutput(*x, QProcess::StandardError);
  });
  connect(e.process, &QProcess::errorOccurred, this, [this, id](QProcess::ProcessError error) {
    Entry* x = find(id);
    if (!x || error != QProcess::FailedToStart) return;  // crashes arrive through finished
    finish(*x, JobState::Failed,
           QStringLiteral("cannot start '%1': %2").arg(m_program, x->process->errorString()));
  });
  connect(e.process, qOverload<int, QProcess::ExitStatus>(&QProcess::finished), this,
          [this, id](int code, QProcess::ExitStatus status) {
            Entry* x = find(id);
            if (!x || x->state != JobState::Running) return;
            readOutput(*x, QProcess::StandardOutput);
            readOutput(*x, QProcess::StandardError);
            for (QByteArray* tail : {&x->stdoutTail, &x->stderrTail})
              if (!tail->isEmpty()) appendConsole(*x, QString::fromUtf8(*tail)), tail->clear();
            if (status == QProcess::CrashExit) {
              finish(*x, JobState::Crashed,
                     x->killRequested ? QStringLiteral("killed from the workbench")
                                      : QStringLiteral("the process died (killed by a signal: "
                                                       "out of memory, kill -9 or a crash)"));
            } else if (code == 0) {
              finish(*x, JobState::Finished, {});
            } else if (code == 130) {
              finish(*x, JobState::Cancelled, QStringLiteral("stopped; resume continues it"));
            } else {
              QString last;
              for (auto it = x->console.crbegin(); it != x->console.crend() && last.isEmpty(); ++it)
                if (!it->trimmed().isEmpty()) last = it->trimmed();
              finish(*x, JobState::Failed,
                     QStringLiteral("exit code %1%2")
                         .arg(code)
                         .arg(last.isEmpty() ? QString() : QStringLiteral(": ") + last));
            }
          });
  Q_EMIT jobStarted(id);
  e.process->start();
}

void RunQueue::readOutput(Entry& e, QProcess::ProcessChannel channel) {
  if (!e.process) return;
  e.process->setReadChannel(channel);
  QByteArray& tail = channel == QProcess::StandardOutput ? e.stdoutTail : e.stderrTail;
  tail += e.process->readAll();
  QString text;
  qsizetype start = 0;
  for (qsizetype nl; (nl = tail.indexOf('\n', start)) >= 0; start = nl + 1) {
    const QByteArray line = tail.mid(start, nl - start);
    JobEvent event;
    if (channel == QProcess::StandardOutput && parseJobEvent(line, &event)) {
      e.last = event, e.hasEvent = true;
      Q_EMIT jobEvent(e.job.id, event);
      // The console reads as the run would on a terminal: its progress too, not only its
      // stray output (a run that succeeds prints nothing else).
      const QString described = describeJobEvent(event);
      appendConsole(e, described);
      text += described + QLatin1Char('\n');
      continue;
    }
    appendConsole(e, QString::fromUtf8(line));
    text += QString::fromUtf8(line) + QLatin1Char('\n');
  }
  tail.remove(0, start);
  // A line without an end that keeps growing is console output, not an event in the making.
  if (tail.size() > (1 << 20)) appendConsole(e, QString::fromUtf8(tail)), tail.clear();
  if (!text.isEmpty()) Q_EMIT consoleAppended(e.job.id, text);
}

void RunQueue::appendConsole(Entry& e, const QString& text) {
  // Progress bars redraw with carriage returns: keep the last state of the line.
  const qsizetype cr = text.lastIndexOf(QLatin1Char('\r'), text.size() - 2);
  e.console.append(cr >= 0 ? text.mid(cr + 1) : text);
  const qsizetype excess = e.console.size() - m_maxConsoleLines;
  if (excess > 0) {
    e.console.erase(e.console.begin(), e.console.begin() + excess);
    e.droppedLines += excess;
  }
}

void RunQueue::finish(Entry& e, JobState state, const QString& message) {
  e.state = state;
  e.error = message;
  if (e.killTimer) e.killTimer->stop();
  if (e.process) e.process->deleteLater(), e.process->disconnect(this), e.process = nullptr;
  const QString id = e.job.id;
  const auto it = std::find_if(m_entries.begin(), m_entries.end(),
                               [&](const auto& p) { return p.get() == &e; });
  if (it != m_entries.end()) {
    m_done[id] = std::move(*it);
    m_entries.erase(it);
  }
  Q_EMIT jobFinished(id, state, message);
  // The next job starts from the event loop, after the views have seen this one finish.
  QTimer::singleShot(0, this, &RunQueue::startReady);
}

bool RunQueue::stop(const QString& id) {
  Entry* e = find(id);
  if (!e) return false;
  if (e->state == JobState::Queued) {
    finish(*e, JobState::Cancelled, QStringLiteral("taken off the queue before it started"));
    return true;
  }
  if (e->state != JobState::Running || !e->process) return false;
  e->stopRequested = true;
  e->process->terminate();
  if (!e->killTimer) {
    e->killTimer = new QTimer(e->process);
    e->killTimer->setSingleShot(true);
    connect(e->killTimer, &QTimer::timeout, this, [this, id] { kill(id); });
  }
  e->killTimer->start(m_stopTimeoutMs);
  return true;
}

bool RunQueue::kill(const QString& id) {
  Entry* e = find(id);
  if (!e || e->state != JobState::Running || !e->process) return stop(id);
  e->killRequested = true;
  e->process->kill();
  return true;
}

void RunQueue::shutdown(int ms) {
  for (const QString& id : activeIds()) stop(id);
  for (auto& e : m_entries) {
    if (!e->process) continue;
    if (!e->process->waitForFinished(ms)) {
      e->killRequested = true;
      e->process->kill();
      e->process->waitForFinished(2000);
    }
  }
}

bool RunQueue::contains(const QString& id) const {
  return std::any_of(m_entries.begin(), m_entries.end(),
                     [&](const auto& e) { return e->job.id == id; });
}

bool RunQueue::isRunning(const QString& id) const {
  const Entry* e = find(id);
  return e && e->state == JobState::Running;
}

JobState RunQueue::state(const QString& id) const {
  const Entry* e = find(id);
  return e ? e->state : JobState::Finished;
}

QStringList RunQueue::console(const QString& id) const {
  const Entry* e = find(id);
  if (!e) return {};
  QStringList out = e->console;
  if (e->droppedLines > 0)
    out.prepend(QStringLiteral("[%1 earlier lines not kept]").arg(e->droppedLines));
  return out;
}

QString RunQueue::lastError(const QString& id) const {
  const Entry* e = find(id);
  return e ? e->error : QString();
}

const JobEvent* RunQueue::lastEvent(const QString& id) const {
  const Entry* e = find(id);
  return e && e->hasEvent ? &e->last : nullptr;
}

QStringList RunQueue::activeIds() const {
  QStringList ids;
  for (const auto& e : m_entries) ids << e->job.id;
  return ids;
}

int RunQueue::runningCount() const {
  return int(std::count_if(m_entries.begin(), m_entries.end(),
                           [](const auto& e) { return e->state == JobState::Running; }));
}

}  // namespace fp4lab::widgets
