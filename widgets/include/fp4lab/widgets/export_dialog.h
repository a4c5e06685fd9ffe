// ExportDialog: the workbench's "Export checkpoint" dialog. It writes a model folder (a run's
// model/ or checkpoint, or any Hugging Face folder) as a deployable checkpoint by running
// `fp4lab export ... --events jsonl` as a child process (QProcess, in RunQueue's style: the
// exporter never runs inside the workbench, so fp4lab_widgets does not link fp4lab_export).
//
// - The formats and their one-line descriptions come from the child (`fp4lab export
//   --list-formats`, asked once when the dialog opens); a run's quantization (quant_state.json)
//   limits them to the ones that decode to what it trained (MXFP4 run: MXFP4 formats and bf16).
// - The modules kept in high precision are read from the folder itself: the 2-D `.weight`
//   tensors of its safetensors headers (through model.safetensors.index.json for shards), with
//   the defaults the exporter uses checked and fixed (the layers quant_state.json does not name,
//   or for a BF16 folder those quant.include/quant.exclude's defaults leave out); more can be
//   checked, or matched by globs.
// - Validation before start (shown inline; Export disabled until valid), then a progress bar fed
//   by the child's events and Cancel (SIGTERM: the exporter stops and leaves OUT as it was), then
//   the summary and "Open folder", or the child's message.
#pragma once

#include <QDialog>
#include <QProcess>
#include <QString>
#include <QStringList>

#include <vector>

class QCheckBox;
class QComboBox;
class QFormLayout;
class QJsonObject;
class QLabel;
class QLineEdit;
class QListWidget;
class QProgressBar;
class QPushButton;
class QTimer;
class QToolButton;

namespace fp4lab::widgets {

class ExportDialog : public QDialog {
  Q_OBJECT

 public:
  // What the dialog knows of a model folder, read from its files (no tensor data).
  struct ModelInfo {
    bool exists = false, hasConfig = false, hasWeights = false;
    bool gptOss = false;        // config.json's model_type / architectures
    QString quantFormat;        // "mxfp4" or "nvfp4" from quant_state.json; "" for a BF16 folder
    QString quantDescription;   // quant_state.json's "format" text
    QString scaleRule;          // the run's MXFP4 rule ("ceil"/"floor"), "" without a state
    QStringList linearModules;  // lm_head first, then model order
    QStringList keptByDefault;  // of linearModules: what the exporter keeps in BF16 unasked
    QString error;              // a file that could not be read ("" when fine)
  };
  static ModelInfo inspectModel(const QString& dir);
  // The folder to export from a run folder: model/ when it holds config.json, else the latest
  // checkpoint; "" when there is neither.
  static QString modelDirOfRun(const QString& runDir, const QString& latestCheckpoint = {});
  // fnmatch-like, as the exporter's --exclude: '*' any run (dots included), '?' one, [...].
  static bool globMatch(const QString& pattern, const QString& name);

  enum class State { Editing, Running, Finished, Failed, Cancelled };

  // `program`: the fp4lab executable (the formats are asked from it at once, asynchronously).
  explicit ExportDialog(const QString& program, QWidget* parent = nullptr);
  ~ExportDialog() override;  // a running export is cancelled and waited for

  void setModelDir(const QString& dir);
  QString modelDir() const;
  void setOutputDir(const QString& dir);
  QString outputDir() const;
  bool setFormat(const QString& name);  // false when it is not offered for this model
  QString format() const;
  void setReplace(bool replace);
  void setGlobs(const QString& commaSeparated);
  // Checks (keeps in BF16) a module of the list; false when it is not there or fixed.
  bool setModuleKept(const QString& module, bool kept);

  bool formatsLoaded() const { return m_formatsLoaded; }
  QStringList offeredFormats() const;  // what the format picker offers now
  const ModelInfo& model() const { return m_info; }
  // Validation, now (edits validate after a short delay).
  void validateNow();
  bool isValid() const { return m_valid; }
  QString errorText() const { return m_errorText; }
  // The arguments of the fp4lab executable for the current fields.
  QStringList arguments() const;

  // Export (as the button does): false when the fields are not valid or an export runs.
  bool start();
  // SIGTERM to the child (SIGKILL after a timeout); the end arrives as exportEnded.
  void cancel();
  State state() const { return m_state; }
  QString summaryText() const;
  QString statusText() const;
  int progressValue() const;
  int progressMaximum() const;
  int progressEvents() const { return m_progressEvents; }

 Q_SIGNALS:
  void formatsReady();
  void progressed(const QString& stage, qint64 done, qint64 total);
  void exportEnded();

 protected:
  void reject() override;
  void resizeEvent(QResizeEvent* event) override;

 private:
  void buildUi();
  void loadFormats();
  void onModelChanged();
  void onFormatChanged();
  void fillFormats();
  void fillModules();
  void scheduleValidate();
  void setEditing(bool editing);
  void suggestOutput();
  void readChild();
  void handleEvent(const QJsonObject& event);
  void onChildFinished(int code, QProcess::ExitStatus status);
  void endWith(State state, const QString& message);
  QStringList keptModules() const;  // checked, beyond the defaults

  QString m_program;
  QProcess* m_formatsProcess = nullptr;
  std::vector<std::pair<QString, QString>> m_formats;  // name, description (from the child)
  bool m_formatsLoaded = false;
  QString m_formatsError;
  ModelInfo m_info;
  QString m_infoDir;  // the folder m_info describes
  bool m_outputEdited = false, m_settingOutput = false;

  QFormLayout* m_form = nullptr;
  QLineEdit* m_model = nullptr;
  QToolButton* m_browseModel = nullptr;
  QLabel* m_modelInfo = nullptr;
  QComboBox* m_format = nullptr;
  QLabel* m_formatDescription = nullptr;
  QListWidget* m_modules = nullptr;
  QLineEdit* m_globs = nullptr;
  QLabel* m_globInfo = nullptr;
  QComboBox* m_scaleRule = nullptr;
  QLineEdit* m_output = nullptr;
  QToolButton* m_browseOutput = nullptr;
  QCheckBox* m_replace = nullptr;
  QLabel* m_error = nullptr;
  QProgressBar* m_progress = nullptr;
  QLabel* m_status = nullptr;
  QLabel* m_summary = nullptr;
  QPushButton* m_export = nullptr;
  QPushButton* m_cancel = nullptr;
  QPushButton* m_openFolder = nullptr;
  QPushButton* m_close = nullptr;
  QTimer* m_validateTimer = nullptr;

  bool m_valid = false;
  QString m_errorText;
  State m_state = State::Editing;
  QProcess* m_child = nullptr;
  QTimer* m_killTimer = nullptr;
  QByteArray m_stdoutTail, m_stderrTail;
  QStringList m_stderrLines;
  bool m_cancelRequested = false, m_gotEnd = false, m_closeWhenDone = false;
  QString m_endMessage, m_summaryText, m_exportedDir;
  int m_progressEvents = 0;
};

}  // namespace fp4lab::widgets
