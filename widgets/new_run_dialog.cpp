// NewRunDialog: a run config form from the engine's key table, validated by the engine.
#include "fp4lab/widgets/new_run_dialog.h"

#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QGuiApplication>
#include <QHBoxLayout>
#include <QLabel>
#include <QProcess>
#include <QPushButton>
#include <QSaveFile>
#include <QScreen>
#include <QTemporaryDir>
#include <QThread>
#include <QTimer>
#include <QVBoxLayout>

#include <algorithm>
#include <exception>
#include <memory>
#include <optional>

#include "fp4lab/error.h"
#include "fp4lab/run/config_keys.h"
#include "fp4lab/run/input_check.h"
#include "fp4lab/widgets/config_form.h"
#include "fp4lab/widgets/run_queue.h"

namespace fp4lab::widgets {

namespace {

QString qs(const std::string& s) {
  return QString::fromStdString(s);
}

const QString kRecipeKey = QStringLiteral("recipe.name");
const QString kFormatKey = QStringLiteral("quant.format");

}  // namespace

bool NewRunDialog::keyApplies(const QString& key, const QString& recipe, const QString& format) {
  if (key.startsWith(QLatin1String("quant."))) {
    if (recipe == QLatin1String("sft")) return false;
    if (key == QLatin1String("quant.scale_rule")) return format == QLatin1String("mxfp4");
    if (key == QLatin1String("quant.blocks_2d")) return format == QLatin1String("nvfp4");
    return true;
  }
  if (key == QLatin1String("recipe.teacher") || key == QLatin1String("recipe.temperature") ||
      key == QLatin1String("recipe.ce_weight"))
    return recipe == QLatin1String("qad");
  return true;
}

NewRunDialog::NewRunDialog(QWidget* parent) : QDialog(parent) {
  setObjectName(QStringLiteral("new run dialog"));
  setAccessibleName(QStringLiteral("new run"));
  setWindowTitle(tr("New run"));
  setSizeGripEnabled(true);

  auto* layout = new QVBoxLayout(this);
  auto* intro = new QLabel(
      tr("Every key of the run configuration. Bold names differ from their defaults; hover a "
         "name for its help. Fields that do not apply to the recipe or format are hidden."),
      this);
  intro->setObjectName(QStringLiteral("intro"));
  intro->setWordWrap(true);
  layout->addWidget(intro);

  m_form = new ConfigForm(run::runConfigKeys(), this);
  layout->addWidget(m_form, 1);

  m_message = new QLabel(this);
  m_message->setObjectName(QStringLiteral("message"));
  m_message->setAccessibleDescription(QStringLiteral("message"));
  m_message->setWordWrap(true);
  m_message->setTextFormat(Qt::PlainText);
  m_message->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_message->setMinimumHeight(fontMetrics().lineSpacing() * 2);
  m_message->setAlignment(Qt::AlignLeft | Qt::AlignTop);
  layout->addWidget(m_message);

  // Open… and Save as… on the left, Cancel and the default Queue run on the right.
  auto* buttons = new QHBoxLayout;
  auto makeButton = [&](const QString& text, const QString& name) {
    auto* b = new QPushButton(text, this);
    b->setObjectName(name);
    b->setAccessibleName(name);
    b->setAutoDefault(false);
    return b;
  };
  m_open = makeButton(tr("&Open…"), QStringLiteral("open config"));
  m_save = makeButton(tr("&Save as…"), QStringLiteral("save config"));
  m_cancel = makeButton(tr("Cancel"), QStringLiteral("cancel"));
  m_queue = makeButton(tr("&Queue run"), QStringLiteral("queue run"));
  m_open->setToolTip(tr("Read a run.yaml into the form"));
  m_save->setToolTip(tr("Write the form as a run.yaml"));
  m_queue->setToolTip(tr("Add the run to the queue (once the configuration is valid)"));
  m_queue->setAutoDefault(true);
  m_queue->setDefault(true);
  buttons->addWidget(m_open);
  buttons->addWidget(m_save);
  buttons->addStretch(1);
  buttons->addWidget(m_cancel);
  buttons->addWidget(m_queue);
  layout->addLayout(buttons);
  connect(m_open, &QPushButton::clicked, this, &NewRunDialog::chooseOpenFile);
  connect(m_save, &QPushButton::clicked, this, &NewRunDialog::chooseSaveFile);
  connect(m_cancel, &QPushButton::clicked, this, &NewRunDialog::reject);
  connect(m_queue, &QPushButton::clicked, this, &NewRunDialog::accept);

  m_debounce = new QTimer(this);
  m_debounce->setSingleShot(true);
  m_debounce->setInterval(kValidateDelayMs);
  connect(m_debounce, &QTimer::timeout, this, &NewRunDialog::validateNow);
  connect(m_form, &ConfigForm::edited, this, &NewRunDialog::onEdited);

  QSize size(1080, 780);
  if (const QScreen* screen = QGuiApplication::primaryScreen())
    size = size.boundedTo(screen->availableGeometry().size() * 0.9);
  resize(size);

  updateVisibility();
  validateNow();
}

NewRunDialog::~NewRunDialog() {
  if (m_dryRun) {
    m_dryRun->disconnect(this);
    m_dryRun->kill();
    m_dryRun->waitForFinished(2000);
  }
}

std::vector<std::string> NewRunDialog::overrides() const {
  std::vector<std::string> out;
  for (const auto& key : m_form->keys()) {
    const QString name = qs(key.name);
    if (!m_form->isKeyVisible(name) || !m_form->isChanged(name)) continue;
    // Quoted, so the engine reads exactly the field's text (its check then judges it).
    out.push_back(key.name + "=" + ConfigForm::quotedScalar(m_form->value(name)).toStdString());
  }
  return out;
}

run::RunConfig NewRunDialog::config() const {
  const std::vector<std::string> assignments = overrides();
  run::RunConfig c = run::RunConfig::fromYamlText("", assignments);
  for (const auto& a : assignments) c.origins[a.substr(0, a.find('='))] = "New run dialog";
  return c;
}

QString NewRunDialog::keyNamedBy(const std::string& where, const std::string& problem) const {
  if (m_form->key(qs(where))) return qs(where);
  // The engine's messages start with the key they are about: "'optim.lr' must be a number...".
  if (problem.size() > 2 && problem[0] == '\'') {
    const size_t end = problem.find('\'', 1);
    if (end != std::string::npos) {
      const QString name = qs(problem.substr(1, end - 1));
      if (m_form->key(name)) return name;
    }
  }
  // Else the first key the message mentions (the longest at a place, so "data.seed" does not
  // stand for "data.seed_x").
  size_t bestAt = std::string::npos, bestLength = 0;
  QString best;
  for (const auto& key : m_form->keys()) {
    const size_t at = problem.find(key.name);
    if (at == std::string::npos) continue;
    if (at < bestAt || (at == bestAt && key.name.size() > bestLength))
      bestAt = at, bestLength = key.name.size(), best = qs(key.name);
  }
  return best;
}

void NewRunDialog::showMessage(const QString& text, bool isError) {
  m_message->setText(text);
  QPalette p = palette();
  if (isError) p.setColor(QPalette::WindowText, QColor(0xc0, 0x10, 0x10));
  m_message->setPalette(p);
}

void NewRunDialog::setValid(bool valid) {
  m_valid = valid;
  m_queue->setEnabled(valid && !m_checking && !m_dryRun);
}

void NewRunDialog::showProblem(const std::string& where, const std::string& problem,
                               const std::string& hint) {
  m_errorKey = keyNamedBy(where, problem);
  const run::ConfigKey* key = m_form->key(m_errorKey);
  // Under the field: what is wrong, and what to do unless that is just the key's help (which its
  // tooltip shows).
  QString inField = qs(problem);
  if (!hint.empty() && !(key && key->help == hint)) inField += "\n" + qs(hint);
  m_errorText = qs(problem) + (hint.empty() ? QString() : " (" + qs(hint) + ")");
  if (!m_errorKey.isEmpty() && where == m_errorKey.toStdString())
    m_errorText = m_errorKey + ": " + m_errorText;
  if (key) {
    m_form->setError(m_errorKey, inField);
    m_form->ensureKeyVisible(m_errorKey);
  }
}

void NewRunDialog::validateNow() {
  m_debounce->stop();
  m_form->clearErrors();
  m_errorKey.clear();
  m_errorText.clear();
  ++m_generation;
  m_checking = false;
  std::optional<run::RunConfig> c;
  try {
    c = config();
  } catch (const Error& e) {
    showProblem(e.where(), e.problem(), e.hint());
  } catch (const std::exception& e) {
    m_errorText = qs(e.what());
  }
  // The folders and files it names, off this thread (only when there is something on disk).
  if (c && m_errorText.isEmpty() && run::hasInputsOnDisk(*c)) startInputCheck(*c);
  finishValidation();
}

void NewRunDialog::finishValidation() {
  if (!m_errorText.isEmpty())
    showMessage(m_errorText, true);
  else if (m_checking)
    showMessage(tr("Checking the model folders and data files…"), false);
  else
    showMessage(m_status, false);
  setValid(m_errorText.isEmpty());
  if (!m_checking) Q_EMIT validated(m_valid);
}

void NewRunDialog::startInputCheck(const run::RunConfig& config) {
  m_checking = true;
  auto problem = std::make_shared<std::optional<Error>>();
  QThread* thread = QThread::create([config, problem] {
    try {
      run::checkInputs(config);
    } catch (const Error& e) {
      *problem = e;
    } catch (const std::exception& e) {
      *problem = Error(e.what());
    }
  });
  const quint64 generation = m_generation;
  // The thread object is not the dialog's child: a dialog closed mid-check leaves it to finish
  // and delete itself; its result then goes nowhere.
  connect(thread, &QThread::finished, thread, &QObject::deleteLater);
  connect(thread, &QThread::finished, this, [this, problem, generation] {
    if (generation != m_generation) return;  // the form changed since: a newer check runs
    m_checking = false;
    if (*problem) showProblem((*problem)->where(), (*problem)->problem(), (*problem)->hint());
    finishValidation();
  });
  thread->start();
}

void NewRunDialog::startDryRun() {
  m_dryRunDir = std::make_unique<QTemporaryDir>();
  const QString yaml = m_dryRunDir->filePath(QStringLiteral("run.yaml"));
  QSaveFile file(yaml);
  if (!m_dryRunDir->isValid() || !file.open(QIODevice::WriteOnly) ||
      file.write(QByteArray::fromStdString(config().toYaml())) < 0 || !file.commit()) {
    // Nothing to check it with: the run's own process will say what is wrong.
    QDialog::accept();
    return;
  }
  m_dryRun = new QProcess(this);
  m_dryRun->setProgram(m_program);
  m_dryRun->setArguments({QStringLiteral("train"), QStringLiteral("--config"), yaml,
                          QStringLiteral("--output-dir"), m_dryRunDir->filePath("run"),
                          QStringLiteral("--dry-run"), QStringLiteral("--events"),
                          QStringLiteral("jsonl")});
  connect(m_dryRun, &QProcess::finished, this, [this](int code, QProcess::ExitStatus status) {
    dryRunFinished(code, status == QProcess::CrashExit);
  });
  connect(m_dryRun, &QProcess::errorOccurred, this, [this](QProcess::ProcessError error) {
    if (error == QProcess::FailedToStart) dryRunFinished(-1, false);
  });
  m_form->setEnabled(false);
  m_queue->setText(tr("Checking…"));
  setValid(m_valid);
  showMessage(tr("Loading the model and data as the run will (fp4lab train --dry-run)…"), false);
  m_dryRun->start();
}

void NewRunDialog::dryRunFinished(int exitCode, bool crashed) {
  if (!m_dryRun) return;
  QProcess* process = m_dryRun;
  m_dryRun = nullptr;
  process->deleteLater();
  m_form->setEnabled(true);
  m_queue->setText(tr("&Queue run"));
  if (exitCode == 0 && !crashed) {
    QDialog::accept();
    return;
  }
  // The refusal as the run would print it: its failed event, else its last words on stderr.
  QString message;
  for (const QByteArray& line : process->readAllStandardOutput().split('\n')) {
    JobEvent event;
    if (parseJobEvent(line, &event) && event.kind == QLatin1String("failed"))
      message = event.message;
  }
  if (message.isEmpty()) {
    const QStringList lines = QString::fromUtf8(process->readAllStandardError())
                                  .split(QLatin1Char('\n'), Qt::SkipEmptyParts);
    message = lines.isEmpty() ? process->errorString() : lines.back().trimmed();
  }
  if (crashed) message = tr("the check crashed: %1").arg(message);
  m_form->clearErrors();
  m_errorKey.clear();
  m_errorText.clear();
  // The engine's message starts with the key at fault where it knows it ("model.path: ...").
  showProblem("", message.toStdString(), "");
  m_errorText = tr("Not queued: %1").arg(m_errorText);
  finishValidation();
  if (!m_errorKey.isEmpty())
    if (QWidget* field = m_form->field(m_errorKey)) field->setFocus(Qt::OtherFocusReason);
}

void NewRunDialog::onEdited(const QString& name) {
  m_status.clear();
  if (name == kRecipeKey || name == kFormatKey) updateVisibility();
  // Immediate feedback on the field itself (the key's own check); the whole configuration is
  // validated by the engine once the typing pauses.
  if (const run::ConfigKey* key = m_form->key(name)) {
    const std::string problem = key->check(m_form->value(name).toStdString());
    if (!problem.empty()) {
      m_errorKey = name;
      m_errorText = "'" + name + "' " + qs(problem);
      m_form->setError(name, m_errorText);
      showMessage(m_errorText, true);
      setValid(false);
    } else if (m_errorKey == name) {
      m_form->setError(name, {});
    }
  }
  m_debounce->start();
}

void NewRunDialog::updateVisibility() {
  const QString recipe = m_form->value(kRecipeKey), format = m_form->value(kFormatKey);
  for (const auto& key : m_form->keys()) {
    const QString name = qs(key.name);
    m_form->setKeyVisible(name, keyApplies(name, recipe, format));
  }
}

void NewRunDialog::setConfig(const run::RunConfig& config) {
  m_debounce->stop();
  for (const auto& [key, value] : config.flatten())
    m_form->setValue(qs(key), ConfigForm::plainScalar(value));
  updateVisibility();
  m_status.clear();
  validateNow();
  if (!m_valid) return;
  // Values of keys that do not apply (a scale rule on an NVFP4 run) are not part of config().
  QStringList dropped;
  for (const auto& key : run::differingKeys(config, this->config(), true)) dropped << qs(key);
  if (!dropped.isEmpty()) {
    m_status = tr("Left at their defaults, as they do not apply to this recipe and format: %1")
                   .arg(dropped.join(QStringLiteral(", ")));
    showMessage(m_status, false);
  }
}

bool NewRunDialog::openFile(const QString& path, QString* error) {
  QString problem;
  run::RunConfig loaded;
  try {
    loaded = run::RunConfig::fromYamlFile(path.toStdString());
  } catch (const std::exception& e) {  // fp4lab::Error: file:line, what, what to do
    problem = qs(e.what());
  }
  if (!problem.isEmpty()) {
    m_errorText = problem;
    showMessage(problem, true);
    if (error) *error = problem;
    return false;
  }
  setConfig(loaded);
  m_path = path;
  if (m_status.isEmpty()) {
    m_status = tr("Opened %1").arg(QDir::toNativeSeparators(path));
    if (m_valid) showMessage(m_status, false);
  }
  updateTitle();
  return true;
}

bool NewRunDialog::saveFile(const QString& path, QString* error) {
  QString problem;
  QByteArray yaml;
  try {
    yaml = QByteArray::fromStdString(config().toYaml());
  } catch (const Error& e) {
    problem = tr("Not saved: %1").arg(qs(e.problem()));
  } catch (const std::exception& e) {
    problem = tr("Not saved: %1").arg(qs(e.what()));
  }
  if (problem.isEmpty()) {
    // A temporary file in the same folder, renamed over `path` on commit: `path` keeps its old
    // content unless the new one is complete.
    QSaveFile file(path);
    if (!file.open(QIODevice::WriteOnly)) {
      problem = tr("Cannot write %1: %2").arg(QDir::toNativeSeparators(path), file.errorString());
    } else if (file.write(yaml) != yaml.size()) {
      problem = tr("Cannot write %1: %2").arg(QDir::toNativeSeparators(path), file.errorString());
      file.cancelWriting();
    } else if (!file.commit()) {
      problem = tr("Cannot save %1: %2").arg(QDir::toNativeSeparators(path), file.errorString());
    }
  }
  if (!problem.isEmpty()) {
    m_errorText = problem;
    showMessage(problem, true);
    if (error) *error = problem;
    return false;
  }
  m_path = path;
  m_status = tr("Saved %1").arg(QDir::toNativeSeparators(path));
  m_errorText.clear();
  showMessage(m_status, false);
  updateTitle();
  return true;
}

void NewRunDialog::updateTitle() {
  setWindowTitle(m_path.isEmpty() ? tr("New run")
                                  : tr("New run — %1").arg(QFileInfo(m_path).fileName()));
}

void NewRunDialog::chooseOpenFile() {
  const QString start = m_path.isEmpty() ? QDir::currentPath() : QFileInfo(m_path).absolutePath();
  const QString path = QFileDialog::getOpenFileName(
      this, tr("Open run config"), start, tr("Run configs (*.yaml *.yml);;All files (*)"));
  if (!path.isEmpty()) openFile(path);
}

void NewRunDialog::chooseSaveFile() {
  const QString start = m_path.isEmpty() ? QDir(QDir::currentPath()).filePath("run.yaml") : m_path;
  QString path = QFileDialog::getSaveFileName(this, tr("Save run config"), start,
                                              tr("Run configs (*.yaml *.yml);;All files (*)"));
  if (path.isEmpty()) return;
  if (QFileInfo(path).suffix().isEmpty()) path += QStringLiteral(".yaml");
  saveFile(path);
}

void NewRunDialog::accept() {
  if (m_dryRun) return;  // one check at a time
  validateNow();
  if (m_checking) {
    // Queue pressed before the background check answered: check here, it is quick.
    m_checking = false;
    ++m_generation;
    try {
      run::checkInputs(config());
    } catch (const Error& e) {
      showProblem(e.where(), e.problem(), e.hint());
    }
    finishValidation();
  }
  if (!m_valid) {
    if (!m_errorKey.isEmpty()) {
      m_form->ensureKeyVisible(m_errorKey);
      if (QWidget* field = m_form->field(m_errorKey)) field->setFocus(Qt::OtherFocusReason);
    }
    return;
  }
  if (m_program.isEmpty()) {
    QDialog::accept();
    return;
  }
  startDryRun();
}

}  // namespace fp4lab::widgets
