// The workbench window's runs as jobs: New run and launching, the built-in experiment, Compare
// formats, stop, kill, resume and delete, the end of a job, and an experiment's report tab.
#include <signal.h>

#include <QFile>
#include <QFileInfo>
#include <QFontMetricsF>
#include <QTabWidget>
#include <QTextBlock>
#include <QTextBrowser>
#include <QTextDocument>
#include <QTextFrame>
#include <QTextTable>

#include <cerrno>
#include <cstring>
#include <thread>

#include "fp4lab/common/files.h"
#include "fp4lab/common/time.h"
#include "fp4lab/run/run_folder.h"
#include "fp4lab/widgets/export_dialog.h"
#include "fp4lab/widgets/main_window.h"
#include "fp4lab/widgets/new_run_dialog.h"
#include "fp4lab/widgets/run_details.h"
#include "fp4lab/widgets/run_queue.h"
#include "fp4lab/widgets/run_table_model.h"

namespace fp4lab::widgets {

namespace {

QString q(const std::string& s) {
  return QString::fromStdString(s);
}

// A run folder name from a run name: the name, then the UTC time (as the CLI names them).
QString freshRunDir(const QString& root, const QString& name) {
  const QString base = root + QLatin1Char('/') + name + QLatin1Char('-') +
                       QString::fromStdString(utcCompactTimestamp());
  QString dir = base;
  for (int n = 2; QFileInfo::exists(dir); ++n) dir = base + QStringLiteral("-%1").arg(n);
  return dir;
}

}  // namespace

// ---- Launching ----------------------------------------------------------------------------------

void MainWindow::newRun(const run::RunConfig* prefill, const QString& file) {
  NewRunDialog dialog(this);
  dialog.setDryRunProgram(m_queue->program());
  if (prefill) dialog.setConfig(*prefill);
  QString error;
  if (!file.isEmpty() && !dialog.openFile(file, &error)) {
    showMessage(QStringLiteral("Cannot open %1: %2").arg(file, error));
    return;
  }
  if (dialog.exec() != QDialog::Accepted) return;
  launch(dialog.config());
}

QString MainWindow::launch(const run::RunConfig& config, const QString& root) {
  const QString base = !root.isEmpty() ? root
                       : !m_roots.isEmpty()
                           ? m_roots.front()
                           : QDir::current().absoluteFilePath(QStringLiteral("runs"));
  const QString dir = freshRunDir(base, q(config.name));
  try {
    config.validate();
    files::createDirectories(dir.toStdString());
    run::RunConfig c = config;
    c.outputDir = base.toStdString();
    files::writeFileAtomically(files::join(dir.toStdString(), "run.yaml"), c.toYaml());
    run::writeRunStatus(dir.toStdString(), RunState::Queued, 0, c.recipe == "ptq" ? 0 : c.maxSteps,
                        "queued in the workbench");
  } catch (const std::exception& e) {
    showMessage(QStringLiteral("Cannot queue the run: %1").arg(QString::fromUtf8(e.what())));
    return {};
  }
  if (!m_roots.contains(base)) addRoot(base);
  Job job;
  job.id = dir;
  job.label = q(config.name);
  job.device = queueDevice(q(config.device));
  job.args = {QStringLiteral("train"),
              QStringLiteral("--config"),
              dir + QStringLiteral("/run.yaml"),
              QStringLiteral("--output-dir"),
              dir,
              QStringLiteral("--events"),
              QStringLiteral("jsonl")};
  m_queue->enqueue(job);
  Q_EMIT requestPoll();
  return dir;
}

QString MainWindow::runExperiment(const QStringList& extraArgs, const QString& dirIn) {
  const QString base = !m_roots.isEmpty()
                           ? QFileInfo(m_roots.front()).absoluteFilePath()
                           : QDir::current().absoluteFilePath(QStringLiteral("runs"));
  const QString dir = !dirIn.isEmpty() ? QDir::cleanPath(QDir::current().absoluteFilePath(dirIn))
                                       : freshRunDir(base, QStringLiteral("experiment"));
  QDir().mkpath(dir);
  Job job;
  job.id = dir;
  job.label = QStringLiteral("built-in experiment");
  job.args =
      QStringList{QStringLiteral("experiment"), QStringLiteral("--output-dir"), dir} + extraArgs;
  if (!m_queue->enqueue(job)) {
    showMessage(QStringLiteral("The experiment in %1 is already running.").arg(dir));
    return {};
  }
  m_experiments.insert(dir);
  addRoot(dir);
  showMessage(
      QStringLiteral("The built-in experiment runs in %1; its runs appear as they start.").arg(dir),
      false);
  return dir;
}

QStringList MainWindow::compareFormats(const std::string& runOrModel) {
  run::RunConfig base;
  std::string model = runOrModel;
  if (const RunSnapshot* r = snapshot(runOrModel)) {
    if (!r->folder.hasConfig || r->folder.config.quantFormat != "none") {
      showMessage(
          QStringLiteral("Compare formats starts from a BF16 run (SFT) or a model folder."));
      return {};
    }
    base = r->folder.config;
    model = files::join(r->id, "model");
    if (!files::isDirectory(model)) {
      showMessage(QStringLiteral("%1 has no saved model yet (model/): wait for it to finish.")
                      .arg(q(r->id)));
      return {};
    }
  }
  const std::string stem =
      files::baseName(files::parentOf(model).empty() ? model : files::parentOf(model));
  QStringList dirs;
  for (const char* recipe : {"ptq", "qat", "qad"}) {
    for (const char* format : {"mxfp4", "nvfp4"}) {
      run::RunConfig c = base;
      c.recipe = recipe;
      c.quantFormat = format;
      c.modelPath = model;
      c.name = std::string(recipe) + "-" + format;
      c.teacher.clear();
      c.reference = model;
      c.origins.clear();
      const QString dir = launch(c);
      if (dir.isEmpty()) return dirs;
      dirs << dir;
    }
  }
  m_groups[q(stem)] = dirs;
  showMessage(QStringLiteral("Queued PTQ, QAT and QAD in MXFP4 and NVFP4 from %1.").arg(q(model)),
              false);
  return dirs;
}

bool MainWindow::stopRun(const std::string& id) {
  if (id.empty()) return false;
  if (m_queue->contains(q(id))) {
    m_queue->stop(q(id));  // a queued one ends at once: onJobFinished writes its status
    Q_EMIT requestPoll();
    return true;
  }
  // A run started elsewhere (a shell): its pid, which readRunFolder checked is still its writer.
  const RunSnapshot* r = snapshot(id);
  if (r && r->state() == RunState::Running && r->folder.pid > 0) {
    ::kill(r->folder.pid, SIGTERM);
    return true;
  }
  return false;
}

bool MainWindow::killRun(const std::string& id) {
  if (id.empty()) return false;
  if (m_queue->contains(q(id))) return m_queue->kill(q(id));
  const RunSnapshot* r = snapshot(id);
  if (r && r->state() == RunState::Running && r->folder.pid > 0) {
    ::kill(r->folder.pid, SIGKILL);
    return true;
  }
  return false;
}

bool MainWindow::resumeRun(const std::string& id) {
  const RunSnapshot* r = snapshot(id);
  if (!r || m_queue->contains(q(id))) return false;
  if (r->folder.latestCheckpoint.empty()) {
    showMessage(QStringLiteral("%1 has no complete checkpoint to resume from.").arg(q(id)));
    return false;
  }
  Job job;
  job.id = q(id);
  job.label = q(r->name);
  job.args = {QStringLiteral("train"),
              QStringLiteral("--resume-from-checkpoint"),
              QStringLiteral("latest"),
              QStringLiteral("--output-dir"),
              q(id),
              QStringLiteral("--events"),
              QStringLiteral("jsonl")};
  m_queue->enqueue(job);
  Q_EMIT requestPoll();
  return true;
}

bool MainWindow::deleteRun(const std::string& id, bool confirmed) {
  const RunSnapshot* r = snapshot(id);
  if (!r || !confirmed) return false;
  if (m_queue->contains(q(id)) || isActive(r->state())) {
    showMessage(QStringLiteral("%1 is %2: stop it before deleting it.")
                    .arg(q(r->name), QString::fromLatin1(toString(r->state()))));
    return false;
  }
  // Renamed first (instant, and the scan no longer sees a run), removed in the background.
  const std::string trash = files::join(files::parentOf(id), ".deleting-" + files::baseName(id));
  if (::rename(id.c_str(), trash.c_str()) != 0) {
    showMessage(
        QStringLiteral("Cannot delete %1: %2").arg(q(id), QString::fromLocal8Bit(strerror(errno))));
    return false;
  }
  std::thread([trash] { files::removeTree(trash); }).detach();
  Q_EMIT requestPoll();
  return true;
}

void MainWindow::onJobFinished(const QString& id, JobState state, const QString& message) {
  // A run that ended before its process wrote a state (its configuration refused, the program
  // missing, taken off the queue, the window closing) would read "queued" for ever: the
  // workbench wrote that, so it writes the end too.
  if (state != JobState::Finished && state != JobState::Running &&
      run::readRunState(id.toStdString()) == RunState::Queued) {
    try {
      run::writeRunStatus(id.toStdString(),
                          state == JobState::Cancelled ? RunState::Cancelled
                          : state == JobState::Crashed ? RunState::Crashed
                                                       : RunState::Failed,
                          0, 0, message.toStdString());
    } catch (const std::exception& e) {
      showMessage(QString::fromUtf8(e.what()));
    }
  }
  if (state == JobState::Failed || state == JobState::Crashed)
    showMessage(QStringLiteral("%1 %2: %3")
                    .arg(QFileInfo(id).fileName(), QString::fromLatin1(toString(state)), message));
  if (m_experiments.count(id)) {
    m_experiments.erase(id);
    if (state == JobState::Finished) {
      showMessage(
          QStringLiteral("The built-in experiment in %1 finished; its report is open.").arg(id),
          false);
      openReport(id);
    }
  }
  Q_EMIT requestPoll();
  updateActions();
}

// Every column of names and numbers as wide as its widest cell on one line: a wide table (the
// report's 13 columns) scrolls sideways instead of reading "recip e" and "0. 2518" (Qt's line
// breaker breaks a number after its point). Columns of prose and paragraphs still wrap.
static void fitTablesToContents(QTextDocument* document) {
  for (QTextFrame* frame : document->rootFrame()->childFrames()) {
    auto* table = qobject_cast<QTextTable*>(frame);
    if (!table) continue;
    QTextTableFormat format = table->format();
    QList<QTextLength> widths;
    const double padding = 2 * (format.cellPadding() + format.border()) + 6;
    for (int c = 0; c < table->columns(); ++c) {
      double widest = 0;
      bool sentences = false;  // a column of prose wraps as prose does
      for (int r = 0; r < table->rows(); ++r) {
        const QTextTableCell cell = table->cellAt(r, c);
        for (auto it = cell.begin(); !it.atEnd(); ++it) {
          const QTextBlock block = it.currentBlock();
          if (!block.isValid()) continue;
          QFont font = document->defaultFont();
          if (block.charFormat().fontWeight() > QFont::Normal || r == 0) font.setBold(true);
          widest = std::max(widest, QFontMetricsF(font).horizontalAdvance(block.text()));
          sentences = sentences || block.text().size() > 24;
        }
      }
      widths << (sentences ? QTextLength(QTextLength::VariableLength, 0)
                           : QTextLength(QTextLength::FixedLength, widest + padding));
    }
    format.setColumnWidthConstraints(widths);
    table->setFormat(format);
  }
}

void MainWindow::openReport(const QString& dir) {
  const QString path = dir + QStringLiteral("/report.md");
  QFile file(path);
  if (!file.open(QIODevice::ReadOnly)) {
    showMessage(QStringLiteral("The experiment ended without a report (%1).").arg(path));
    return;
  }
  auto* browser = new QTextBrowser;
  browser->setObjectName(QStringLiteral("experiment report"));
  browser->setAccessibleName(QStringLiteral("experiment report"));
  browser->setToolTip(path);
  browser->setSearchPaths({dir});
  browser->setOpenExternalLinks(true);
  browser->setMarkdown(QString::fromUtf8(file.readAll()));
  fitTablesToContents(browser->document());
  m_tabs->setCurrentIndex(
      m_tabs->addTab(browser, QStringLiteral("Report: %1").arg(QFileInfo(dir).fileName())));
}

}  // namespace fp4lab::widgets
