// NewRunDialog: the workbench's "New run" form. Its fields are generated from the engine's key
// table (run::runConfigKeys()); the recipe and format pickers hide the fields that do not apply;
// every edit is checked (debounced) by the engine's own parser and RunConfig::validate(), then
// the model folders and data files it names by run::checkInputs on a worker thread (a network
// folder may take seconds to answer); a message is shown under the field it names and on the
// message line. It opens and saves run.yaml (atomically). "Queue run" is enabled only for a valid
// configuration whose inputs are there; with a program set, it first runs `fp4lab train
// --dry-run` on it (the full load: weights, tokenizer, data) and accepts only when that passes.
#pragma once

#include <QDialog>
#include <QString>
#include <QTemporaryDir>

#include <memory>

#include <string>
#include <vector>

#include "fp4lab/run/run_config.h"

class QLabel;
class QProcess;
class QPushButton;
class QTimer;

namespace fp4lab::widgets {

class ConfigForm;

class NewRunDialog : public QDialog {
  Q_OBJECT

 public:
  // How long after the last edit the configuration is validated.
  static constexpr int kValidateDelayMs = 150;

  explicit NewRunDialog(QWidget* parent = nullptr);
  ~NewRunDialog() override;  // a dry run still going is killed

  // Fills the form from `config` ("duplicate as new run", presets) and validates it. Keys that do
  // not apply to its recipe or format are kept in their fields but left at their defaults in
  // config(); the message line names them.
  void setConfig(const run::RunConfig& config);
  // The configuration the form describes, built by the engine from the fields that apply and
  // differ from their defaults (the others keep their defaults). Throws fp4lab::Error, the
  // engine's, when the form is invalid (then "Queue run" is disabled).
  run::RunConfig config() const;
  // Whether the last validation passed: the engine's, and the check of the inputs on disk
  // (validateNow() brings the first up to date and starts the second; `validated` follows).
  bool isValid() const { return m_valid; }
  // Whether the check of the inputs on disk is still running.
  bool isCheckingInputs() const { return m_checking; }

  // The fp4lab program that checks the configuration with `train --dry-run` before Queue run
  // accepts it ("": no dry run; the dialog is then used without the engine's executable).
  void setDryRunProgram(const QString& program) { m_program = program; }
  bool isDryRunning() const { return m_dryRun != nullptr; }

  // Reads a run config with RunConfig::fromYamlFile into the form. On failure the form is
  // unchanged, the engine's message (file:line, what, what to do) is shown on the message line and
  // returned in `error`.
  bool openFile(const QString& path, QString* error = nullptr);
  // Writes config().toYaml() to `path` atomically (QSaveFile): on any failure (an invalid form, an
  // unwritable folder, a full disk) an existing file is left as it was and the reason is shown on
  // the message line and returned in `error`.
  bool saveFile(const QString& path, QString* error = nullptr);
  // The file last opened or saved ("" before).
  QString filePath() const { return m_path; }

  // The error shown now on the message line ("" when there is none).
  QString errorText() const { return m_errorText; }
  // The key the current validation error names ("" when none, or when it names no field).
  QString errorKey() const { return m_errorKey; }
  ConfigForm* form() const { return m_form; }

  // Whether `key` applies to a run with recipe.name `recipe` and quant.format `format`: quant.*
  // not for sft, recipe.teacher/temperature/ce_weight for qad only, quant.scale_rule for mxfp4
  // and quant.blocks_2d for nvfp4 only.
  static bool keyApplies(const QString& key, const QString& recipe, const QString& format);

 public Q_SLOTS:
  // Validates now (instead of after the debounce delay) and updates the errors and "Queue run".
  void validateNow();
  // Validates first; refuses (and shows the field at fault) while the configuration is invalid.
  void accept() override;

 Q_SIGNALS:
  // After every validation.
  void validated(bool valid);

 private:
  std::vector<std::string> overrides() const;
  void updateVisibility();
  void onEdited(const QString& key);
  QString keyNamedBy(const std::string& where, const std::string& problem) const;
  void showMessage(const QString& text, bool isError);
  void setValid(bool valid);
  void updateTitle();
  void chooseOpenFile();
  void chooseSaveFile();
  // Shows an engine error (its key's field, the message line) and disables Queue run.
  void showProblem(const std::string& where, const std::string& problem, const std::string& hint);
  void startInputCheck(const run::RunConfig& config);
  void finishValidation();
  void startDryRun();
  void dryRunFinished(int exitCode, bool crashed);

  ConfigForm* m_form = nullptr;
  QLabel* m_message = nullptr;
  QPushButton* m_open = nullptr;
  QPushButton* m_save = nullptr;
  QPushButton* m_cancel = nullptr;
  QPushButton* m_queue = nullptr;
  QTimer* m_debounce = nullptr;
  QString m_errorText, m_errorKey, m_status, m_path, m_program;
  bool m_valid = false;
  bool m_checking = false;   // the input check runs (Queue run waits for it)
  quint64 m_generation = 0;  // of the last validation: a late input check is dropped
  QProcess* m_dryRun = nullptr;
  std::unique_ptr<QTemporaryDir> m_dryRunDir;  // the run.yaml the dry run reads
};

}  // namespace fp4lab::widgets
