// ConfigForm: a scrollable form generated from a table of configuration keys (the engine's
// run::runConfigKeys()), one field per key, grouped by section (run., model., data., ...). The
// widget follows the key's type (choice: combo box, boolean: check box, anything else: a line
// edit, with Browse… and the key's built-ins for files and folders); its label is the key name,
// its tooltip the key's help, type, range and default. The form shows values and errors; what
// the values mean is left to the engine (NewRunDialog validates them with RunConfig).
#pragma once

#include <QScrollArea>
#include <QString>
#include <QStringList>

#include <map>
#include <string>
#include <vector>

#include "fp4lab/run/config_keys.h"

class QGroupBox;
class QLabel;
class QResizeEvent;

namespace fp4lab::widgets {

class ConfigForm : public QScrollArea {
  Q_OBJECT

 public:
  explicit ConfigForm(std::vector<run::ConfigKey> keys, QWidget* parent = nullptr);

  const std::vector<run::ConfigKey>& keys() const { return m_keys; }
  // The key named `name`, or nullptr.
  const run::ConfigKey* key(const QString& name) const;

  // The field's value as plain text, exactly what the engine is to read ("0.001", "true",
  // "builtin:sft", "" for an empty string); "" for an unknown key.
  QString value(const QString& name) const;
  // Sets a field without emitting edited(); numbers are shown in their shortest form.
  void setValue(const QString& name, const QString& value);
  void resetToDefaults();
  // The key's default as plain text (its YAML defaultValue unquoted).
  QString defaultValue(const QString& name) const;
  // Whether the field's value differs from the key's default (numbers compared as numbers,
  // booleans as true/false); such labels are bold.
  bool isChanged(const QString& name) const;

  // Hides or shows a key's row (a section whose rows are all hidden is hidden).
  void setKeyVisible(const QString& name, bool visible);
  bool isKeyVisible(const QString& name) const;

  // The message under a field ("" hides it).
  void setError(const QString& name, const QString& message);
  QString error(const QString& name) const;
  void clearErrors();

  // The editor of a key (QComboBox, QCheckBox or QLineEdit; objectName and accessibleName are
  // the key name), its label, and its Browse… button (paths only).
  QWidget* field(const QString& name) const;
  QLabel* label(const QString& name) const;
  QWidget* browseButton(const QString& name) const;
  // The built-in values a path key's help names (builtin:tiny, scratch:tiny, random:tokens...),
  // offered in its Browse… menu.
  QStringList builtins(const QString& name) const;
  // Scrolls so the key's row is in view.
  void ensureKeyVisible(const QString& name);

  // A YAML scalar as the engine's emitter writes it (plain, 'single' or "double" quoted) as its
  // plain text: "\"\"" -> "", "'it''s'" -> "it's".
  static QString plainScalar(const std::string& yaml);
  // `text` as a double-quoted YAML scalar, so that the engine reads exactly `text`.
  static QString quotedScalar(const QString& text);
  // `text` as the key compares it: shortest numbers, lower-case booleans, integers without a
  // '+' or leading zeros; other text as it is.
  static QString normalized(const run::ConfigKey& key, const QString& text);

 Q_SIGNALS:
  // The user changed a field (not emitted by setValue or resetToDefaults).
  void edited(const QString& name);

 protected:
  void resizeEvent(QResizeEvent* event) override;

 private:
  struct Row {
    const run::ConfigKey* key = nullptr;
    QString section;
    QLabel* label = nullptr;
    QWidget* editor = nullptr;
    QWidget* cell = nullptr;  // the editor, its Browse… button and its error label
    QWidget* browse = nullptr;
    QLabel* error = nullptr;
    bool visible = true;
  };
  struct Section {
    QString name;
    QGroupBox* box = nullptr;
    std::vector<QString> keys;
  };

  QWidget* makeEditor(Row& row);
  QWidget* makeBrowseButton(Row& row);
  void onFieldChanged(const QString& name);
  void markChanged(Row& row);
  void relayout(bool force = false);
  QFont boldFont() const;
  const Row* row(const QString& name) const;
  Row* row(const QString& name);

  std::vector<run::ConfigKey> m_keys;
  std::map<QString, Row> m_rows;
  std::vector<Section> m_sections;
  int m_columns = 0;
  bool m_loading = false;
};

}  // namespace fp4lab::widgets
