// NewRunDialog: the workbench's "New run" form. Its fields are generated from the engine's key
// table (run::runConfigKeys()); the recipe and format pickers hide the fields that do not apply;
// every edit is checked (debounced) by the engine's own parser and RunConfig::validate(), whose
// message is shown under the field it names and on the message line. It opens and saves run.yaml
// (atomically), and "Queue run" accepts only a valid configuration.
#pragma once

#include <QDialog>
#include <QString>

#include <string>
#include <vector>

#include "fp4lab/run/run_config.h"

class QLabel;
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

  // Fills the form from `config` ("duplicate as new run", presets) and validates it. Keys that do
  // not apply to its recipe or format are kept in their fields but left at their defaults in
  // config(); the message line names them.
  void setConfig(const run::RunConfig& config);
  // The configuration the form describes, built by the engine from the fields that apply and
  // differ from their defaults (the others keep their defaults). Throws fp4lab::Error, the
  // engine's, when the form is invalid (then "Queue run" is disabled).
  run::RunConfig config() const;
  // Whether the last validation passed (validateNow() brings it up to date).
  bool isValid() const { return m_valid; }

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

  ConfigForm* m_form = nullptr;
  QLabel* m_message = nullptr;
  QPushButton* m_open = nullptr;
  QPushButton* m_save = nullptr;
  QPushButton* m_cancel = nullptr;
  QPushButton* m_queue = nullptr;
  QTimer* m_debounce = nullptr;
  QString m_errorText, m_errorKey, m_status, m_path;
  bool m_valid = false;
};

}  // namespace fp4lab::widgets
