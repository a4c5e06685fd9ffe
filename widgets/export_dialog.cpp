// ExportDialog: fields, validation, and `fp4lab export --events jsonl` as a child process.
#include "fp4lab/widgets/export_dialog.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDesktopServices>
#include <QDir>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QProgressBar>
#include <QPushButton>
#include <QTimer>
#include <QToolButton>
#include <QUrl>
#include <QVBoxLayout>

#include <algorithm>
#include <cstring>
#include <set>

#include "fp4lab/export/gpt_oss_layout.h"
#include "fp4lab/run/run_config.h"

namespace fp4lab::widgets {

namespace {

QString qs(const std::string& s) {
  return QString::fromStdString(s);
}

// "a.b.10.c" after "a.b.2.c": digit runs compare as numbers, so the list is in model order.
bool naturalLess(const QString& a, const QString& b) {
  qsizetype i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i].isDigit() && b[j].isDigit()) {
      qsizetype ie = i, je = j;
      while (ie < a.size() && a[ie].isDigit()) ++ie;
      while (je < b.size() && b[je].isDigit()) ++je;
      const qulonglong x = a.mid(i, ie - i).toULongLong(), y = b.mid(j, je - j).toULongLong();
      if (x != y) return x < y;
      i = ie, j = je;
      continue;
    }
    if (a[i] != b[j]) return a[i] < b[j];
    ++i, ++j;
  }
  return a.size() - i < b.size() - j;
}

// The tensor names and shapes of one safetensors file, from its JSON header only.
bool readSafetensorsHeader(const QString& path, QJsonObject* header, QString* error) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) {
    *error = QStringLiteral("cannot read %1: %2").arg(path, f.errorString());
    return false;
  }
  unsigned char size[8];
  if (f.read(reinterpret_cast<char*>(size), 8) != 8) {
    *error = QStringLiteral("%1 is not a safetensors file (too short)").arg(path);
    return false;
  }
  quint64 n = 0;
  for (int k = 7; k >= 0; --k) n = (n << 8) | size[k];
  if (n == 0 || n > (100u << 20) || qint64(n) > f.size() - 8) {
    *error = QStringLiteral("%1 is not a safetensors file (header size %2)").arg(path).arg(n);
    return false;
  }
  QJsonParseError parse{};
  const QJsonDocument doc = QJsonDocument::fromJson(f.read(qint64(n)), &parse);
  if (parse.error != QJsonParseError::NoError || !doc.isObject()) {
    *error = QStringLiteral("%1: malformed safetensors header (%2)").arg(path, parse.errorString());
    return false;
  }
  *header = doc.object();
  return true;
}

bool readJson(const QString& path, QJsonObject* object, QString* error) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) {
    *error = QStringLiteral("cannot read %1: %2").arg(path, f.errorString());
    return false;
  }
  QJsonParseError parse{};
  const QJsonDocument doc = QJsonDocument::fromJson(f.readAll(), &parse);
  if (parse.error != QJsonParseError::NoError || !doc.isObject()) {
    *error = QStringLiteral("%1: malformed JSON (%2)").arg(path, parse.errorString());
    return false;
  }
  *object = doc.object();
  return true;
}

QStringList splitGlobs(const QString& text) {
  QStringList out;
  for (const QString& part : text.split(QLatin1Char(','), Qt::SkipEmptyParts))
    if (!part.trimmed().isEmpty()) out << part.trimmed();
  return out;
}

QString formatKind(const QString& format) {
  if (format.contains(QLatin1String("mxfp4"))) return QStringLiteral("mxfp4");
  if (format.contains(QLatin1String("nvfp4"))) return QStringLiteral("nvfp4");
  return {};
}

QString megabytes(double bytes) {
  return QStringLiteral("%1 MB").arg(bytes / 1e6, 0, 'f', 2);
}

bool isEmptyDir(const QString& dir) {
  return QDir(dir).isEmpty(QDir::AllEntries | QDir::NoDotAndDotDot | QDir::Hidden | QDir::System);
}

// Where a stage's events fall on the one progress bar (0..1000): measuring the amaxes is quick,
// writing and verifying take the time.
int overallProgress(const QString& stage, qint64 done, qint64 total) {
  const double f = total > 0 ? double(done) / double(total) : 0.0;
  if (stage == QLatin1String("measure")) return int(100 * f);
  if (stage == QLatin1String("write")) return 100 + int(600 * f);
  if (stage == QLatin1String("verify")) return 700 + int(300 * f);
  return 0;
}

constexpr int kValidateDelayMs = 150;
constexpr int kKillTimeoutMs = 15000;

}  // namespace

// ---- Reading a model folder ---------------------------------------------------------------------

bool ExportDialog::globMatch(const QString& pattern, const QString& name) {
  // Iterative matcher with one backtrack point per '*', as fnmatch without FNM_PATHNAME.
  qsizetype p = 0, n = 0, starP = -1, starN = 0;
  auto classMatch = [&](qsizetype& pp, QChar c) {
    // pattern[pp] == '['; on return pp is past ']' (or -1: no closing bracket).
    qsizetype k = pp + 1;
    bool negate = false;
    if (k < pattern.size() && (pattern[k] == QLatin1Char('!') || pattern[k] == QLatin1Char('^')))
      negate = true, ++k;
    bool hit = false, first = true;
    for (; k < pattern.size() && (first || pattern[k] != QLatin1Char(']')); ++k, first = false) {
      if (k + 2 < pattern.size() && pattern[k + 1] == QLatin1Char('-') &&
          pattern[k + 2] != QLatin1Char(']')) {
        if (c >= pattern[k] && c <= pattern[k + 2]) hit = true;
        k += 2;
      } else if (pattern[k] == c) {
        hit = true;
      }
    }
    if (k >= pattern.size()) {
      pp = -1;
      return false;
    }
    pp = k + 1;
    return hit != negate;
  };
  while (n < name.size()) {
    if (p < pattern.size() && pattern[p] == QLatin1Char('*')) {
      starP = p++, starN = n;
      continue;
    }
    if (p < pattern.size()) {
      if (pattern[p] == QLatin1Char('?')) {
        ++p, ++n;
        continue;
      }
      if (pattern[p] == QLatin1Char('[')) {
        qsizetype pp = p;
        const bool hit = classMatch(pp, name[n]);
        if (pp >= 0 && hit) {
          p = pp, ++n;
          continue;
        }
        if (pp < 0 && name[n] == QLatin1Char('[')) {  // an unclosed '[' is a literal
          ++p, ++n;
          continue;
        }
      } else if (pattern[p] == name[n]) {
        ++p, ++n;
        continue;
      }
    }
    if (starP < 0) return false;
    p = starP + 1, n = ++starN;
  }
  while (p < pattern.size() && pattern[p] == QLatin1Char('*')) ++p;
  return p == pattern.size();
}

ExportDialog::ModelInfo ExportDialog::inspectModel(const QString& dir) {
  ModelInfo info;
  const QDir d(dir);
  info.exists = !dir.isEmpty() && QFileInfo(dir).isDir();
  if (!info.exists) return info;
  info.hasConfig = QFileInfo(d.filePath(QStringLiteral("config.json"))).isFile();
  if (info.hasConfig) {
    QJsonObject config;
    QString error;
    if (readJson(d.filePath(QStringLiteral("config.json")), &config, &error)) {
      info.gptOss =
          config.value(QStringLiteral("model_type")).toString() == QLatin1String("gpt_oss");
      for (const QJsonValue a : config.value(QStringLiteral("architectures")).toArray())
        if (a.toString() == QLatin1String("GptOssForCausalLM")) info.gptOss = true;
    } else {
      info.error = error;
    }
  }

  // The safetensors files: the index's shards, or model.safetensors.
  QStringList files;
  const QString index = d.filePath(QStringLiteral("model.safetensors.index.json"));
  if (QFileInfo(index).isFile()) {
    QJsonObject o;
    QString error;
    if (!readJson(index, &o, &error)) {
      info.error = error;
      return info;
    }
    std::set<QString> shards;
    const QJsonObject map = o.value(QStringLiteral("weight_map")).toObject();
    for (auto it = map.begin(); it != map.end(); ++it) shards.insert(it.value().toString());
    for (const QString& s : shards) files << d.filePath(s);
  } else if (QFileInfo(d.filePath(QStringLiteral("model.safetensors"))).isFile()) {
    files << d.filePath(QStringLiteral("model.safetensors"));
  }
  info.hasWeights = !files.isEmpty();
  QStringList modules;
  for (const QString& file : files) {
    QJsonObject header;
    QString error;
    if (!readSafetensorsHeader(file, &header, &error)) {
      info.error = error;
      return info;
    }
    for (auto it = header.begin(); it != header.end(); ++it) {
      const QString& name = it.key();
      const qsizetype dims = it.value().toObject().value(QStringLiteral("shape")).toArray().size();
      // As the exporter: 2-D <module>.weight tensors, and gpt-oss's 3-D experts tensors (each
      // its own module).
      const bool experts = exporter::isExpertsTensor(name.toStdString(), size_t(dims));
      if (!experts && (!name.endsWith(QLatin1String(".weight")) || dims != 2)) continue;
      const QString module = experts ? name : name.left(name.size() - 7);
      // As the exporter: embeddings are never linear layers to quantize.
      if (module.contains(QLatin1String("embed")) || module.contains(QLatin1String("wte")))
        continue;
      modules << module;
    }
  }
  std::sort(modules.begin(), modules.end(), [](const QString& a, const QString& b) {
    const bool ha = a == QLatin1String("lm_head"), hb = b == QLatin1String("lm_head");
    if (ha != hb) return ha;
    return naturalLess(a, b);
  });
  modules.removeDuplicates();
  info.linearModules = modules;

  // What is quantized by default: the layers quant_state.json names, else quant.include minus
  // quant.exclude of the engine's defaults.
  std::set<QString> quantized;
  const QString statePath = d.filePath(QStringLiteral("quant_state.json"));
  if (QFileInfo(statePath).isFile()) {
    QJsonObject state;
    QString error;
    if (!readJson(statePath, &state, &error)) {
      info.error = error;
      return info;
    }
    info.quantDescription = state.value(QStringLiteral("format")).toString();
    const QJsonObject options = state.value(QStringLiteral("options")).toObject();
    QString format = options.value(QStringLiteral("format")).toString();
    if (format.isEmpty())
      format = info.quantDescription.contains(QLatin1String("MXFP4"))   ? QStringLiteral("mxfp4")
               : info.quantDescription.contains(QLatin1String("NVFP4")) ? QStringLiteral("nvfp4")
                                                                        : QString();
    if (format != QLatin1String("mxfp4") && format != QLatin1String("nvfp4")) {
      info.error =
          QStringLiteral("%1: the quantizer state's format '%2' is neither MXFP4 nor NVFP4")
              .arg(statePath, info.quantDescription);
      return info;
    }
    info.quantFormat = format;
    QString rule = options.value(QStringLiteral("scale_rule")).toString();
    if (rule.isEmpty())
      rule = info.quantDescription.contains(QLatin1String("floor scales")) ? QStringLiteral("floor")
                                                                           : QStringLiteral("ceil");
    info.scaleRule = rule;
    const QJsonObject layers = state.value(QStringLiteral("layers")).toObject();
    for (auto it = layers.begin(); it != layers.end(); ++it) quantized.insert(it.key());
  } else {
    const run::RunConfig defaults;
    QStringList include, exclude;
    for (const std::string& g :
         run::quantIncludePatterns(defaults.quantInclude, info.gptOss ? "GptOssForCausalLM" : ""))
      include << qs(g);
    for (const std::string& g : run::splitList(defaults.quantExclude)) exclude << qs(g);
    auto any = [](const QStringList& globs, const QString& m) {
      return std::any_of(globs.begin(), globs.end(),
                         [&](const QString& g) { return globMatch(g, m); });
    };
    for (const QString& m : modules)
      if (any(include, m) && !any(exclude, m)) quantized.insert(m);
  }
  for (const QString& m : modules)
    if (!quantized.count(m)) info.keptByDefault << m;
  return info;
}

QString ExportDialog::modelDirOfRun(const QString& runDir, const QString& latestCheckpoint) {
  const QString model = QDir(runDir).filePath(QStringLiteral("model"));
  if (QFileInfo(QDir(model).filePath(QStringLiteral("config.json"))).isFile()) return model;
  if (!latestCheckpoint.isEmpty() &&
      QFileInfo(QDir(latestCheckpoint).filePath(QStringLiteral("config.json"))).isFile())
    return latestCheckpoint;
  return {};
}

// ---- The dialog ---------------------------------------------------------------------------------

ExportDialog::ExportDialog(const QString& program, QWidget* parent)
    : QDialog(parent), m_program(program) {
  setObjectName(QStringLiteral("export dialog"));
  setAccessibleName(QStringLiteral("export checkpoint"));
  setWindowTitle(tr("Export checkpoint"));
  setSizeGripEnabled(true);
  buildUi();
  m_validateTimer = new QTimer(this);
  m_validateTimer->setSingleShot(true);
  m_validateTimer->setInterval(kValidateDelayMs);
  connect(m_validateTimer, &QTimer::timeout, this, &ExportDialog::validateNow);
  loadFormats();
  validateNow();
}

ExportDialog::~ExportDialog() {
  if (m_formatsProcess) {
    m_formatsProcess->disconnect(this);
    m_formatsProcess->kill();
    m_formatsProcess->waitForFinished(2000);
  }
  if (m_child) {
    // Never leave an export running behind a closed dialog: SIGTERM (it cleans up), then kill.
    m_child->disconnect(this);
    m_child->terminate();
    if (!m_child->waitForFinished(kKillTimeoutMs)) {
      m_child->kill();
      m_child->waitForFinished(2000);
    }
  }
}

void ExportDialog::buildUi() {
  auto* layout = new QVBoxLayout(this);
  setMinimumWidth(fontMetrics().averageCharWidth() * 64);
  m_form = new QFormLayout;
  m_form->setFieldGrowthPolicy(QFormLayout::ExpandingFieldsGrow);
  layout->addLayout(m_form);

  auto browseButton = [this](const QString& name, const QString& tip) {
    auto* b = new QToolButton(this);
    b->setText(tr("Browse\u2026"));
    b->setObjectName(name);
    b->setAccessibleName(name);
    b->setToolTip(tip);
    return b;
  };
  auto label = [this](const QString& text, QWidget* buddy) {
    auto* l = new QLabel(text, this);
    l->setBuddy(buddy);
    return l;
  };

  // Checkpoint.
  m_model = new QLineEdit(this);
  m_model->setObjectName(QStringLiteral("checkpoint"));
  m_model->setAccessibleName(QStringLiteral("checkpoint"));
  m_model->setToolTip(
      tr("The model folder to export: a run's model/ or checkpoint (with its quant_state.json), "
         "or any Hugging Face folder with config.json and safetensors"));
  m_model->setPlaceholderText(tr("a run's model/ folder, a checkpoint, or a model folder"));
  m_browseModel = browseButton(QStringLiteral("browse checkpoint"), tr("pick the model folder"));
  auto* modelRow = new QHBoxLayout;
  modelRow->addWidget(m_model, 1);
  modelRow->addWidget(m_browseModel);
  m_form->addRow(label(tr("&Checkpoint:"), m_model), modelRow);
  m_modelInfo = new QLabel(this);
  m_modelInfo->setObjectName(QStringLiteral("checkpoint info"));
  m_modelInfo->setAccessibleDescription(QStringLiteral("checkpoint info"));
  m_modelInfo->setWordWrap(true);
  m_modelInfo->setTextFormat(Qt::PlainText);
  m_modelInfo->setEnabled(false);  // drawn as secondary text
  // Wrapped value labels span the field column (QFormLayout grows only Expanding fields).
  m_modelInfo->setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Preferred);
  m_form->addRow(QString(), m_modelInfo);

  // Format, with who loads it.
  m_format = new QComboBox(this);
  m_format->setObjectName(QStringLiteral("format"));
  m_format->setAccessibleName(QStringLiteral("format"));
  m_format->setToolTip(tr("The layout of the exported checkpoint; below, who loads it"));
  m_format->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  m_form->addRow(label(tr("&Format:"), m_format), m_format);
  m_formatDescription = new QLabel(this);
  m_formatDescription->setObjectName(QStringLiteral("format description"));
  m_formatDescription->setAccessibleDescription(QStringLiteral("format description"));
  m_formatDescription->setWordWrap(true);
  m_formatDescription->setTextFormat(Qt::PlainText);
  m_formatDescription->setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Preferred);
  m_form->addRow(QString(), m_formatDescription);

  // Modules kept in high precision.
  m_modules = new QListWidget(this);
  m_modules->setObjectName(QStringLiteral("modules kept in bf16"));
  m_modules->setAccessibleName(QStringLiteral("modules kept in BF16"));
  m_modules->setToolTip(
      tr("Checked modules stay in BF16. The greyed ones are kept by default (not quantized by "
         "the run, or by the recipes' defaults); check more to keep them too"));
  m_modules->setUniformItemSizes(true);
  m_modules->setMinimumHeight(fontMetrics().lineSpacing() * 7);
  m_form->addRow(label(tr("&Kept in BF16:"), m_modules), m_modules);
  m_globs = new QLineEdit(this);
  m_globs->setObjectName(QStringLiteral("keep globs"));
  m_globs->setAccessibleName(QStringLiteral("also keep matching"));
  m_globs->setToolTip(
      tr("Comma-separated globs of module names also kept in BF16 ('*' crosses dots), e.g. "
         "*.0.*, *down_proj"));
  m_globs->setPlaceholderText(tr("e.g. *.0.*, *down_proj"));
  m_globs->setClearButtonEnabled(true);
  m_form->addRow(label(tr("Also keep (&globs):"), m_globs), m_globs);
  m_globInfo = new QLabel(this);
  m_globInfo->setObjectName(QStringLiteral("glob info"));
  m_globInfo->setAccessibleDescription(QStringLiteral("glob matches"));
  m_globInfo->setTextFormat(Qt::PlainText);
  m_globInfo->setEnabled(false);
  m_form->addRow(QString(), m_globInfo);

  // Scale rule (MXFP4 only).
  m_scaleRule = new QComboBox(this);
  m_scaleRule->setObjectName(QStringLiteral("scale rule"));
  m_scaleRule->setAccessibleName(QStringLiteral("scale rule"));
  m_scaleRule->addItem(QStringLiteral("ceil"));
  m_scaleRule->addItem(QStringLiteral("floor"));
  m_scaleRule->setToolTip(tr("MXFP4 block scales: ceil (OCP-safe, no clipping) or floor"));
  m_form->addRow(label(tr("&Scale rule:"), m_scaleRule), m_scaleRule);

  // Output folder.
  m_output = new QLineEdit(this);
  m_output->setObjectName(QStringLiteral("output folder"));
  m_output->setAccessibleName(QStringLiteral("output folder"));
  m_output->setToolTip(tr("The folder to create; written atomically when the export is checked"));
  m_browseOutput = browseButton(QStringLiteral("browse output"), tr("pick the output folder"));
  auto* outputRow = new QHBoxLayout;
  outputRow->addWidget(m_output, 1);
  outputRow->addWidget(m_browseOutput);
  m_form->addRow(label(tr("&Output folder:"), m_output), outputRow);
  m_replace = new QCheckBox(tr("&Replace its contents"), this);
  m_replace->setObjectName(QStringLiteral("replace output"));
  m_replace->setAccessibleName(QStringLiteral("replace output"));
  m_replace->setToolTip(
      tr("The output folder is not empty: replace it (--force) once the export is written"));
  m_form->addRow(QString(), m_replace);

  // Messages, progress, summary.
  m_error = new QLabel(this);
  m_error->setObjectName(QStringLiteral("error"));
  m_error->setAccessibleDescription(QStringLiteral("export error"));
  m_error->setWordWrap(true);
  m_error->setTextFormat(Qt::PlainText);
  m_error->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_error->setStyleSheet(QStringLiteral("color: #b3261e;"));
  layout->addWidget(m_error);
  m_progress = new QProgressBar(this);
  m_progress->setObjectName(QStringLiteral("export progress"));
  m_progress->setAccessibleName(QStringLiteral("export progress"));
  m_progress->setToolTip(tr("measure, write, then read back and verify every tensor"));
  m_progress->setRange(0, 1000);
  m_progress->setTextVisible(false);
  m_progress->hide();
  layout->addWidget(m_progress);
  m_status = new QLabel(this);
  m_status->setObjectName(QStringLiteral("status"));
  m_status->setAccessibleDescription(QStringLiteral("export status"));
  m_status->setTextFormat(Qt::PlainText);
  m_status->setWordWrap(true);
  m_status->hide();
  layout->addWidget(m_status);
  m_summary = new QLabel(this);
  m_summary->setObjectName(QStringLiteral("summary"));
  m_summary->setAccessibleDescription(QStringLiteral("export summary"));
  m_summary->setTextFormat(Qt::PlainText);
  m_summary->setWordWrap(true);
  m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_summary->hide();
  layout->addWidget(m_summary);
  layout->addStretch(1);

  auto* buttons = new QHBoxLayout;
  auto button = [this](const QString& text, const QString& name, const QString& tip) {
    auto* b = new QPushButton(text, this);
    b->setObjectName(name);
    b->setAccessibleName(name);
    b->setToolTip(tip);
    b->setAutoDefault(false);
    return b;
  };
  m_openFolder = button(tr("Open &folder"), QStringLiteral("open folder"),
                        tr("open the exported folder in the file manager"));
  m_openFolder->hide();
  m_cancel = button(tr("&Cancel export"), QStringLiteral("cancel export"),
                    tr("stop the export (SIGTERM); nothing is left in the output folder"));
  m_cancel->hide();
  m_close = button(tr("Close"), QStringLiteral("close"), tr("close the dialog"));
  m_export =
      button(tr("&Export"), QStringLiteral("export"), tr("run fp4lab export with these settings"));
  m_export->setDefault(true);
  buttons->addWidget(m_openFolder);
  buttons->addStretch(1);
  buttons->addWidget(m_cancel);
  buttons->addWidget(m_close);
  buttons->addWidget(m_export);
  layout->addLayout(buttons);

  connect(m_model, &QLineEdit::textChanged, this, &ExportDialog::scheduleValidate);
  connect(m_browseModel, &QToolButton::clicked, this, [this] {
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Model folder"), modelDir());
    if (!dir.isEmpty()) setModelDir(dir);
  });
  connect(m_format, qOverload<int>(&QComboBox::currentIndexChanged), this,
          &ExportDialog::onFormatChanged);
  connect(m_modules, &QListWidget::itemChanged, this, &ExportDialog::scheduleValidate);
  connect(m_globs, &QLineEdit::textChanged, this, &ExportDialog::scheduleValidate);
  connect(m_scaleRule, qOverload<int>(&QComboBox::currentIndexChanged), this,
          &ExportDialog::scheduleValidate);
  connect(m_output, &QLineEdit::textChanged, this, [this] {
    if (!m_settingOutput) m_outputEdited = true;
    scheduleValidate();
  });
  // A path longer than its field shows its end (the run and folder names); the whole of it is in
  // the tooltip, after the field's help.
  for (QLineEdit* path : {m_model, m_output}) {
    const QString help = path->toolTip();
    connect(path, &QLineEdit::textChanged, this, [path, help](const QString& text) {
      path->setToolTip(text.isEmpty() ? help : help + QStringLiteral("\n\n") + text);
    });
  }
  connect(m_browseOutput, &QToolButton::clicked, this, [this] {
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Output folder"), outputDir());
    if (!dir.isEmpty()) setOutputDir(dir);
  });
  connect(m_replace, &QCheckBox::toggled, this, &ExportDialog::scheduleValidate);
  connect(m_export, &QPushButton::clicked, this, &ExportDialog::start);
  connect(m_cancel, &QPushButton::clicked, this, &ExportDialog::cancel);
  connect(m_close, &QPushButton::clicked, this, &ExportDialog::reject);
  connect(m_openFolder, &QPushButton::clicked, this,
          [this] { QDesktopServices::openUrl(QUrl::fromLocalFile(m_exportedDir)); });
}

void ExportDialog::loadFormats() {
  const QFileInfo program(m_program);
  if (m_program.isEmpty() || !program.isFile() || !program.isExecutable()) {
    m_formatsLoaded = true;
    m_formatsError = tr("cannot list the formats: the fp4lab program '%1' is %2 (start the "
                        "workbench from the fp4lab executable, or set FP4LAB_BIN)")
                         .arg(m_program, m_program.isEmpty() ? tr("not set") : tr("missing"));
    fillFormats();
    return;
  }
  m_format->setEnabled(false);
  m_formatDescription->setText(tr("asking fp4lab for its formats\u2026"));
  m_formatsProcess = new QProcess(this);
  m_formatsProcess->setProgram(m_program);
  m_formatsProcess->setArguments({QStringLiteral("export"), QStringLiteral("--list-formats")});
  connect(m_formatsProcess, qOverload<int, QProcess::ExitStatus>(&QProcess::finished), this,
          [this](int code, QProcess::ExitStatus status) {
            const QByteArray out = m_formatsProcess->readAllStandardOutput();
            const QString err = QString::fromUtf8(m_formatsProcess->readAllStandardError());
            m_formatsProcess->deleteLater();
            m_formatsProcess = nullptr;
            for (const QByteArray& line : out.split('\n')) {
              const QJsonObject o = QJsonDocument::fromJson(line).object();
              const QString name = o.value(QStringLiteral("format")).toString();
              if (!name.isEmpty())
                m_formats.emplace_back(name, o.value(QStringLiteral("description")).toString());
            }
            if (m_formats.empty())
              m_formatsError = tr("cannot list the formats (fp4lab export --list-formats: %1)")
                                   .arg(status == QProcess::CrashExit ? tr("crashed")
                                        : err.trimmed().isEmpty()     ? tr("exit code %1").arg(code)
                                                                      : err.trimmed());
            m_formatsLoaded = true;
            fillFormats();
            validateNow();
            Q_EMIT formatsReady();
          });
  connect(m_formatsProcess, &QProcess::errorOccurred, this, [this](QProcess::ProcessError e) {
    if (e != QProcess::FailedToStart || !m_formatsProcess) return;
    m_formatsError = tr("cannot list the formats: %1").arg(m_formatsProcess->errorString());
    m_formatsProcess->deleteLater();
    m_formatsProcess = nullptr;
    m_formatsLoaded = true;
    fillFormats();
    validateNow();
    Q_EMIT formatsReady();
  });
  m_formatsProcess->start();
}

void ExportDialog::setModelDir(const QString& dir) {
  m_model->setText(QDir::cleanPath(dir));
  validateNow();
}

QString ExportDialog::modelDir() const {
  const QString t = m_model->text().trimmed();
  return t.isEmpty() ? t : QDir::cleanPath(t);
}

void ExportDialog::setOutputDir(const QString& dir) {
  m_outputEdited = true;
  m_output->setText(dir);
  validateNow();
}

QString ExportDialog::outputDir() const {
  const QString t = m_output->text().trimmed();
  return t.isEmpty() ? t : QDir::cleanPath(t);
}

bool ExportDialog::setFormat(const QString& name) {
  onModelChanged();
  const int i = m_format->findData(name);
  if (i < 0) return false;
  m_format->setCurrentIndex(i);
  validateNow();
  return true;
}

QString ExportDialog::format() const {
  return m_format->currentData().toString();
}

void ExportDialog::setReplace(bool replace) {
  m_replace->setChecked(replace);
  validateNow();
}

void ExportDialog::setGlobs(const QString& commaSeparated) {
  m_globs->setText(commaSeparated);
  validateNow();
}

bool ExportDialog::setModuleKept(const QString& module, bool kept) {
  onModelChanged();
  for (int i = 0; i < m_modules->count(); ++i) {
    QListWidgetItem* item = m_modules->item(i);
    if (item->text() != module) continue;
    if (!(item->flags() & Qt::ItemIsUserCheckable)) return false;
    item->setCheckState(kept ? Qt::Checked : Qt::Unchecked);
    validateNow();
    return true;
  }
  return false;
}

QStringList ExportDialog::offeredFormats() const {
  QStringList out;
  for (int i = 0; i < m_format->count(); ++i) out << m_format->itemData(i).toString();
  return out;
}

void ExportDialog::scheduleValidate() {
  m_validateTimer->start();
}

void ExportDialog::onModelChanged() {
  const QString dir = modelDir();
  // Read again when the folder changes, or while it is not (yet) a complete model folder.
  const bool complete = m_info.exists && m_info.hasConfig && m_info.hasWeights;
  if (dir == m_infoDir && !m_infoDir.isNull() && complete) return;
  m_infoDir = dir;
  m_info = inspectModel(dir);
  QString text;
  if (m_info.exists && m_info.hasConfig && m_info.hasWeights) {
    text = m_info.quantFormat.isEmpty()
               ? tr("BF16 weights, %1 linear layers").arg(m_info.linearModules.size())
               : tr("%1 run: %2").arg(m_info.quantFormat.toUpper(), m_info.quantDescription);
  }
  m_modelInfo->setText(text);
  m_modelInfo->setVisible(!text.isEmpty());
  fillFormats();
  fillModules();
  suggestOutput();
}

void ExportDialog::fillFormats() {
  const QString previous = format();
  const QSignalBlocker block(m_format);
  m_format->clear();
  for (const auto& [name, description] : m_formats) {
    const QString kind = formatKind(name);
    // A run decodes only to its own format (or to BF16); gpt-oss's layout is for gpt-oss only.
    if (!m_info.quantFormat.isEmpty() && !kind.isEmpty() && kind != m_info.quantFormat) continue;
    if (name == QLatin1String("gpt-oss-mxfp4") && !m_info.gptOss) continue;
    // ... and the other layouts have no place for gpt-oss's experts (the engine refuses them).
    if (m_info.gptOss && !kind.isEmpty() && name != QLatin1String("gpt-oss-mxfp4")) continue;
    m_format->addItem(name, name);
    m_format->setItemData(m_format->count() - 1, description, Qt::ToolTipRole);
  }
  m_format->setEnabled(m_format->count() > 0);
  int index = m_format->findData(previous);
  if (index < 0) {
    // A run's own format first, in the compressed-tensors layout vLLM and transformers load.
    const QString preferred = m_info.gptOss ? QStringLiteral("gpt-oss-mxfp4")
                              : m_info.quantFormat == QLatin1String("mxfp4")
                                  ? QStringLiteral("compressed-tensors-mxfp4")
                                  : QStringLiteral("compressed-tensors-nvfp4");
    index = std::max(0, m_format->findData(preferred));
  }
  if (m_format->count() > 0) m_format->setCurrentIndex(index);
  onFormatChanged();
}

void ExportDialog::onFormatChanged() {
  const QString name = format();
  QString description;
  for (const auto& [n, d] : m_formats)
    if (n == name) description = d;
  if (m_formatsLoaded)
    m_formatDescription->setText(description.isEmpty() ? QString()
                                                       : tr("Loaded by %1").arg(description));
  const QString kind = formatKind(name);
  // The scale rule applies to MXFP4; a run's rule is fixed (another would not decode to what it
  // trained).
  const bool mx = kind == QLatin1String("mxfp4");
  m_form->setRowVisible(m_scaleRule, mx);
  if (mx && !m_info.scaleRule.isEmpty()) {
    m_scaleRule->setCurrentText(m_info.scaleRule);
    m_scaleRule->setEnabled(false);
    m_scaleRule->setToolTip(
        tr("The run's MXFP4 scale rule; another would not decode to the "
           "weights it trained and evaluated"));
  } else {
    m_scaleRule->setEnabled(mx && m_state != State::Running);
    m_scaleRule->setToolTip(tr("MXFP4 block scales: ceil (OCP-safe, no clipping) or floor"));
  }
  // BF16 keeps everything: the module list does not apply.
  const bool quantized = !kind.isEmpty();
  m_modules->setEnabled(quantized && m_state != State::Running);
  m_globs->setEnabled(quantized && m_state != State::Running);
  suggestOutput();
  scheduleValidate();
}

void ExportDialog::fillModules() {
  const QSignalBlocker block(m_modules);
  const QStringList kept = keptModules();
  m_modules->clear();
  for (const QString& m : m_info.linearModules) {
    auto* item = new QListWidgetItem(m, m_modules);
    if (m_info.keptByDefault.contains(m)) {
      item->setFlags(item->flags() & ~(Qt::ItemIsUserCheckable | Qt::ItemIsEnabled));
      item->setCheckState(Qt::Checked);
      item->setToolTip(tr("kept in BF16 by default"));
    } else {
      item->setFlags(item->flags() | Qt::ItemIsUserCheckable);
      item->setCheckState(kept.contains(m) ? Qt::Checked : Qt::Unchecked);
      item->setToolTip(tr("quantized; check to keep it in BF16"));
    }
  }
  // Wide enough for the longest module name (gpt-oss's experts tensors are long), within reason:
  // elided names cannot be told apart.
  int widest = 0;
  for (const QString& m : m_info.linearModules)
    widest = std::max(widest, m_modules->fontMetrics().horizontalAdvance(m));
  m_modules->setMinimumWidth(std::min(widest + 4 * m_modules->fontMetrics().height(), 640));
}

QStringList ExportDialog::keptModules() const {
  QStringList out;
  for (int i = 0; i < m_modules->count(); ++i) {
    const QListWidgetItem* item = m_modules->item(i);
    if ((item->flags() & Qt::ItemIsUserCheckable) && item->checkState() == Qt::Checked)
      out << item->text();
  }
  return out;
}

void ExportDialog::suggestOutput() {
  if (m_outputEdited || modelDir().isEmpty() || format().isEmpty()) return;
  // Next to the model: <run>/export-<format> for a run's model/ or checkpoint, else
  // <folder>-<format>.
  const QFileInfo model(modelDir());
  QDir base = model.dir();
  QString out;
  if (model.fileName() == QLatin1String("model")) {
    out = base.filePath(QStringLiteral("export-") + format());
  } else if (base.dirName() == QLatin1String("checkpoints")) {
    base.cdUp();
    out = base.filePath(QStringLiteral("export-%1-%2").arg(format(), model.fileName()));
  } else {
    out = base.filePath(model.fileName() + QLatin1Char('-') + format());
  }
  m_settingOutput = true;
  m_output->setText(out);
  m_settingOutput = false;
}

void ExportDialog::validateNow() {
  m_validateTimer->stop();
  if (m_state == State::Running) return;
  onModelChanged();
  QString error;
  const QString model = modelDir(), out = outputDir();
  const QFileInfo outInfo(out);
  const bool outNonEmpty = outInfo.isDir() && !isEmptyDir(out);
  m_form->setRowVisible(m_replace, outNonEmpty);

  // Glob feedback: how many listed modules the globs keep.
  const QStringList globs = splitGlobs(m_globs->text());
  int matched = 0;
  for (const QString& m : m_info.linearModules)
    if (std::any_of(globs.begin(), globs.end(), [&](const QString& g) { return globMatch(g, m); }))
      ++matched;
  m_globInfo->setText(globs.isEmpty() ? QString() : tr("matches %n listed module(s)", "", matched));
  m_form->setRowVisible(m_globInfo, !globs.isEmpty());

  if (!m_formatsError.isEmpty()) {
    error = m_formatsError;
  } else if (model.isEmpty()) {
    error = tr("Choose the checkpoint to export (a run's model/ or any model folder).");
  } else if (!m_info.exists) {
    error = tr("The checkpoint folder %1 does not exist.").arg(model);
  } else if (!m_info.hasConfig) {
    error = tr("%1 is not a model folder: it has no config.json.").arg(model);
  } else if (!m_info.error.isEmpty()) {
    error = m_info.error;
  } else if (!m_info.hasWeights) {
    error = tr("%1 has no model.safetensors (or model.safetensors.index.json).").arg(model);
  } else if (!m_formatsLoaded) {
    error = tr("Asking fp4lab for its formats\u2026");
  } else if (format().isEmpty()) {
    error = tr("No export format applies to this checkpoint.");
  } else if (!formatKind(format()).isEmpty() && !m_info.quantFormat.isEmpty() &&
             formatKind(format()) != m_info.quantFormat) {
    error = tr("The run was quantized in %1: a %2 export would not decode to what it trained.")
                .arg(m_info.quantFormat.toUpper(), format());
  } else if (out.isEmpty()) {
    error = tr("Choose the output folder.");
  } else if (outInfo.exists() && !outInfo.isDir()) {
    error = tr("The output %1 is a file, not a folder.").arg(out);
  } else if (QDir::cleanPath(QFileInfo(out).absoluteFilePath()) ==
                 QDir::cleanPath(QFileInfo(model).absoluteFilePath()) ||
             QFileInfo(model).absoluteFilePath().startsWith(
                 QDir::cleanPath(QFileInfo(out).absoluteFilePath()) + QLatin1Char('/'))) {
    error = tr("The output folder would replace the checkpoint itself; choose another.");
  } else if (outNonEmpty && !m_replace->isChecked()) {
    error = tr("The output folder %1 is not empty: choose another, or check \u201cReplace its "
               "contents\u201d.")
                .arg(out);
  } else if (!formatKind(format()).isEmpty()) {
    int quantizedLeft = 0;
    const QStringList kept = keptModules();
    for (const QString& m : m_info.linearModules) {
      if (m_info.keptByDefault.contains(m) || kept.contains(m)) continue;
      if (std::any_of(globs.begin(), globs.end(),
                      [&](const QString& g) { return globMatch(g, m); }))
        continue;
      ++quantizedLeft;
    }
    if (quantizedLeft == 0)
      error =
          tr("Every linear layer is kept in BF16: nothing is left to quantize (export as "
             "bf16 instead).");
  }
  m_valid = error.isEmpty();
  m_errorText = error;
  m_error->setText(error);
  m_error->setVisible(!error.isEmpty());
  m_export->setEnabled(m_valid);
}

QStringList ExportDialog::arguments() const {
  QStringList args = {QStringLiteral("export"),       modelDir(),
                      QStringLiteral("--format"),     format(),
                      QStringLiteral("--output-dir"), outputDir()};
  if (!formatKind(format()).isEmpty()) {
    for (const QString& m : keptModules()) args << QStringLiteral("--exclude") << m;
    for (const QString& g : splitGlobs(m_globs->text())) args << QStringLiteral("--exclude") << g;
  }
  // The run's own rule is the exporter's default; only a BF16 folder's MXFP4 export chooses.
  if (formatKind(format()) == QLatin1String("mxfp4") && m_info.scaleRule.isEmpty())
    args << QStringLiteral("--scale-rule") << m_scaleRule->currentText();
  const QFileInfo out(outputDir());
  if (m_replace->isChecked() && out.isDir() && !isEmptyDir(outputDir()))
    args << QStringLiteral("--force");
  args << QStringLiteral("--events") << QStringLiteral("jsonl");
  return args;
}

void ExportDialog::setEditing(bool editing) {
  for (QWidget* w :
       std::initializer_list<QWidget*>{m_model, m_browseModel, m_output, m_browseOutput, m_replace})
    w->setEnabled(editing);
  m_format->setEnabled(editing && m_format->count() > 0);
  onFormatChanged();  // the scale rule, module list and globs, by format
  m_cancel->setVisible(!editing);
  m_close->setEnabled(editing);
}

bool ExportDialog::start() {
  if (m_state == State::Running) return false;
  validateNow();
  if (!m_valid) return false;
  const QStringList args = arguments();
  m_state = State::Running;
  m_cancelRequested = m_gotEnd = false;
  m_endMessage.clear();
  m_summaryText.clear();
  m_exportedDir.clear();
  m_stdoutTail.clear();
  m_stderrTail.clear();
  m_stderrLines.clear();
  m_progressEvents = 0;
  m_error->hide();
  m_summary->hide();
  m_openFolder->hide();
  m_progress->setValue(0);
  m_progress->show();
  m_status->setText(tr("Starting fp4lab export\u2026"));
  m_status->show();
  m_export->setEnabled(false);
  setEditing(false);
  m_cancel->setEnabled(true);
  m_cancel->setFocus();

  m_child = new QProcess(this);
  m_child->setProgram(m_program);
  m_child->setArguments(args);
  connect(m_child, &QProcess::readyReadStandardOutput, this, &ExportDialog::readChild);
  connect(m_child, &QProcess::readyReadStandardError, this, &ExportDialog::readChild);
  connect(m_child, &QProcess::errorOccurred, this, [this](QProcess::ProcessError error) {
    if (error != QProcess::FailedToStart || !m_child) return;
    const QString why = m_child->errorString();
    m_child->deleteLater();
    m_child = nullptr;
    endWith(State::Failed, tr("cannot start '%1': %2").arg(m_program, why));
  });
  connect(m_child, qOverload<int, QProcess::ExitStatus>(&QProcess::finished), this,
          &ExportDialog::onChildFinished);
  m_child->start();
  return true;
}

void ExportDialog::cancel() {
  if (m_state != State::Running || !m_child) return;
  m_cancelRequested = true;
  m_cancel->setEnabled(false);
  m_status->setText(tr("Cancelling\u2026"));
  m_child->terminate();
  if (!m_killTimer) {
    m_killTimer = new QTimer(this);
    m_killTimer->setSingleShot(true);
    connect(m_killTimer, &QTimer::timeout, this, [this] {
      if (m_child) m_child->kill();
    });
  }
  m_killTimer->start(kKillTimeoutMs);
}

void ExportDialog::resizeEvent(QResizeEvent* event) {
  QDialog::resizeEvent(event);
  // The wrapped notes need more height on a narrower dialog; a window's minimum size does not
  // follow height-for-width by itself, so the form would overlap its rows (the module list under
  // the globs field). The minimum follows the width instead.
  if (layout() && layout()->hasHeightForWidth()) {
    const int need = layout()->totalHeightForWidth(width());
    if (need > 0 && need != minimumHeight()) setMinimumHeight(need);
  }
}

void ExportDialog::reject() {
  if (m_state == State::Running) {
    // Esc or the window's close button while exporting: cancel, and close once it has stopped.
    m_closeWhenDone = true;
    cancel();
    return;
  }
  QDialog::reject();
}

void ExportDialog::readChild() {
  if (!m_child) return;
  for (const auto channel : {QProcess::StandardOutput, QProcess::StandardError}) {
    m_child->setReadChannel(channel);
    QByteArray& tail = channel == QProcess::StandardOutput ? m_stdoutTail : m_stderrTail;
    tail += m_child->readAll();
    qsizetype start = 0;
    for (qsizetype nl; (nl = tail.indexOf('\n', start)) >= 0; start = nl + 1) {
      const QByteArray line = tail.mid(start, nl - start).trimmed();
      if (line.isEmpty()) continue;
      if (channel == QProcess::StandardOutput && line.startsWith('{')) {
        const QJsonDocument doc = QJsonDocument::fromJson(line);
        if (doc.isObject() && doc.object().value(QStringLiteral("event")).isString()) {
          handleEvent(doc.object());
          continue;
        }
      }
      // Console output (a redrawn progress line keeps its last state); a bounded tail.
      QString text = QString::fromUtf8(line);
      const qsizetype cr = text.lastIndexOf(QLatin1Char('\r'));
      if (cr >= 0) text = text.mid(cr + 1);
      m_stderrLines << text;
      if (m_stderrLines.size() > 200) m_stderrLines.removeFirst();
    }
    tail.remove(0, start);
    if (tail.size() > (1 << 20)) tail.clear();
  }
}

void ExportDialog::handleEvent(const QJsonObject& e) {
  const QString kind = e.value(QStringLiteral("event")).toString();
  if (kind == QLatin1String("progress")) {
    const QString stage = e.value(QStringLiteral("stage")).toString();
    const qint64 done = e.value(QStringLiteral("done")).toInteger();
    const qint64 total = e.value(QStringLiteral("total")).toInteger();
    const QString tensor = e.value(QStringLiteral("tensor")).toString();
    ++m_progressEvents;
    m_progress->setValue(std::max(m_progress->value(), overallProgress(stage, done, total)));
    if (!m_cancelRequested)
      m_status->setText(tr("%1 %2/%3  %4").arg(stage).arg(done + 1).arg(total).arg(tensor));
    Q_EMIT progressed(stage, done, total);
  } else if (kind == QLatin1String("finished")) {
    m_gotEnd = true;
    m_exportedDir = e.value(QStringLiteral("output_dir")).toString();
    const double in = e.value(QStringLiteral("input_bytes")).toDouble();
    const double out = e.value(QStringLiteral("output_bytes")).toDouble();
    const qint64 tensors = e.value(QStringLiteral("tensors")).toInteger();
    const qint64 layers = e.value(QStringLiteral("quantized_layers")).toInteger();
    const qint64 shards = e.value(QStringLiteral("shards")).toInteger();
    QStringList lines;
    lines << tr("Exported %1 (%2) to %3")
                 .arg(e.value(QStringLiteral("format")).toString(),
                      e.value(QStringLiteral("quant_algo")).toString(), m_exportedDir);
    lines << tr("Size: %1 (from %2, compression %3\u00d7)")
                 .arg(megabytes(out), megabytes(in))
                 .arg(e.value(QStringLiteral("compression")).toDouble(), 0, 'f', 2);
    lines << tr("Tensors written: %1 in %2 shard(s), %3 quantized layer(s)")
                 .arg(tensors)
                 .arg(shards)
                 .arg(layers);
    if (layers > 0)
      lines << tr("Max dequantization error: %1 (in %2)")
                   .arg(e.value(QStringLiteral("max_abs_error")).toDouble(), 0, 'g', 6)
                   .arg(e.value(QStringLiteral("worst_layer")).toString());
    if (e.value(QStringLiteral("verified")).toBool())
      lines << tr("Verified: %1 tensors read back%2")
                   .arg(e.value(QStringLiteral("verified_tensors")).toInteger())
                   .arg(layers > 0 ? tr(", every quantized weight bit for bit") : QString());
    QStringList kept;
    for (const QJsonValue v : e.value(QStringLiteral("exclude")).toArray()) kept << v.toString();
    if (layers > 0 && !kept.isEmpty()) lines << tr("Kept in BF16: %1").arg(kept.join(", "));
    m_summaryText = lines.join(QLatin1Char('\n'));
  } else if (kind == QLatin1String("failed") || kind == QLatin1String("cancelled")) {
    m_gotEnd = true;
    m_endMessage = e.value(QStringLiteral("message")).toString();
  }
}

void ExportDialog::onChildFinished(int code, QProcess::ExitStatus status) {
  if (!m_child) return;
  readChild();
  for (QByteArray* tail : {&m_stdoutTail, &m_stderrTail})
    if (!tail->trimmed().isEmpty()) m_stderrLines << QString::fromUtf8(tail->trimmed());
  m_child->deleteLater();
  m_child = nullptr;
  if (m_killTimer) m_killTimer->stop();
  if (m_cancelRequested) {
    endWith(State::Cancelled,
            status == QProcess::CrashExit
                ? tr("Export killed; its temporary folder may be left next to %1.").arg(outputDir())
                : tr("Export cancelled; %1 was left as it was.").arg(outputDir()));
  } else if (status == QProcess::NormalExit && code == 0 && !m_summaryText.isEmpty()) {
    endWith(State::Finished, {});
  } else {
    QString message = m_endMessage;
    if (message.isEmpty()) {
      for (auto it = m_stderrLines.crbegin(); it != m_stderrLines.crend() && message.isEmpty();
           ++it)
        message = it->trimmed();
    }
    if (status == QProcess::CrashExit)
      message = tr("fp4lab export died (killed by a signal: out of memory, kill -9 or a crash)") +
                (message.isEmpty() ? QString() : QStringLiteral(": ") + message);
    else if (message.isEmpty())
      message = tr("fp4lab export failed with exit code %1").arg(code);
    endWith(State::Failed, message);
  }
}

void ExportDialog::endWith(State state, const QString& message) {
  m_state = state;
  m_cancel->hide();
  setEditing(true);
  m_status->hide();
  if (state == State::Finished) {
    m_progress->setValue(m_progress->maximum());
    m_progress->hide();  // the summary says it all
    m_summary->setText(m_summaryText);
    m_summary->show();
    m_openFolder->show();
    m_error->hide();
    m_close->setDefault(true);
    m_close->setFocus();
    // A second export into the same folder would need "replace": validate again, but do not
    // offer to replace what was just written beside the summary of writing it (an edit of the
    // form brings the choice back).
    validateNow();
    m_error->hide();
    m_form->setRowVisible(m_replace, false);
  } else {
    m_progress->hide();
    validateNow();
    m_error->setText(state == State::Cancelled ? message : tr("Export failed: %1").arg(message));
    m_error->show();
  }
  Q_EMIT exportEnded();
  if (m_closeWhenDone) {
    m_closeWhenDone = false;
    QDialog::reject();
  }
}

QString ExportDialog::summaryText() const {
  return m_state == State::Finished ? m_summaryText : QString();
}

QString ExportDialog::statusText() const {
  return m_state == State::Running ? m_status->text() : m_error->text();
}

int ExportDialog::progressValue() const {
  return m_progress->value();
}

int ExportDialog::progressMaximum() const {
  return m_progress->maximum();
}

}  // namespace fp4lab::widgets
