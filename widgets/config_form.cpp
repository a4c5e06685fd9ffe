// ConfigForm: one field per configuration key, generated from the engine's key table.
#include "fp4lab/widgets/config_form.h"

#include <QAction>
#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QMenu>
#include <QRegularExpression>
#include <QResizeEvent>
#include <QScrollBar>
#include <QSet>
#include <QToolButton>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

namespace fp4lab::widgets {

namespace {

QString qs(const std::string& s) {
  return QString::fromStdString(s);
}

// The tooltip of a field: the key's help, then its type, range and default.
QString tooltipFor(const run::ConfigKey& key, const QString& defaultText) {
  QString type = qs(key.typeDescription());
  const QString range = qs(key.rangeDescription());
  if (!range.isEmpty()) type += QStringLiteral(", ") + range;
  const QString shown = defaultText.isEmpty() ? QStringLiteral("(empty)") : defaultText;
  return QStringLiteral("<qt><p><b>%1</b></p><p>%2</p><p>Type: %3<br>Default: %4</p></qt>")
      .arg(qs(key.name).toHtmlEscaped(), qs(key.help).toHtmlEscaped(), type.toHtmlEscaped(),
           shown.toHtmlEscaped());
}

QString sectionTitle(const QString& section) {
  return section.isEmpty() ? section : section.left(1).toUpper() + section.mid(1);
}

void clearLayout(QLayout* layout) {
  while (QLayoutItem* item = layout->takeAt(0)) delete item;  // widgets stay, spacers go
}

}  // namespace

QString ConfigForm::plainScalar(const std::string& yaml) {
  const QString s = qs(yaml);
  if (s.size() >= 2 && s.startsWith(QLatin1Char('\'')) && s.endsWith(QLatin1Char('\'')))
    return s.mid(1, s.size() - 2).replace(QStringLiteral("''"), QStringLiteral("'"));
  if (!(s.size() >= 2 && s.startsWith(QLatin1Char('"')) && s.endsWith(QLatin1Char('"')))) return s;
  const QString body = s.mid(1, s.size() - 2);
  QString out;
  for (qsizetype i = 0; i < body.size(); ++i) {
    const QChar c = body[i];
    if (c != QLatin1Char('\\') || i + 1 >= body.size()) {
      out += c;
      continue;
    }
    const QChar e = body[++i];
    auto hex = [&](int digits) {
      bool ok = false;
      const char32_t code = body.mid(i + 1, digits).toUInt(&ok, 16);
      if (!ok) return;
      out += QString::fromUcs4(&code, 1);
      i += digits;
    };
    switch (e.unicode()) {
      case 'n':
        out += QLatin1Char('\n');
        break;
      case 't':
        out += QLatin1Char('\t');
        break;
      case 'r':
        out += QLatin1Char('\r');
        break;
      case '0':
        out += QChar(0);
        break;
      case 'a':
        out += QChar(7);
        break;
      case 'b':
        out += QChar(8);
        break;
      case 'e':
        out += QChar(27);
        break;
      case 'f':
        out += QChar(12);
        break;
      case 'v':
        out += QChar(11);
        break;
      case 'N':
        out += QChar(0x85);
        break;
      case '_':
        out += QChar(0xa0);
        break;
      case 'L':
        out += QChar(0x2028);
        break;
      case 'P':
        out += QChar(0x2029);
        break;
      case 'x':
        hex(2);
        break;
      case 'u':
        hex(4);
        break;
      case 'U':
        hex(8);
        break;
      default:
        out += e;
        break;  // \\ \" \/ and "\ "
    }
  }
  return out;
}

QString ConfigForm::quotedScalar(const QString& text) {
  QString out = QStringLiteral("\"");
  for (const QChar c : text) {
    if (c == QLatin1Char('\\') || c == QLatin1Char('"'))
      out += QLatin1Char('\\') + QString(c);
    else if (c.unicode() < 0x20 || c.unicode() == 0x7f)
      out += QStringLiteral("\\x%1").arg(c.unicode(), 2, 16, QLatin1Char('0'));
    else
      out += c;
  }
  return out + QLatin1Char('"');
}

QString ConfigForm::normalized(const run::ConfigKey& key, const QString& text) {
  switch (key.type) {
    case run::KeyType::Number: {
      bool ok = false;
      const double v = text.toDouble(&ok);  // C locale, like the config files
      if (!ok || !std::isfinite(v)) return text;
      // The shortest text that reads back as the same double: "0.0003", "1e-8", "1000000".
      const QString fixed = QString::number(v, 'f', QLocale::FloatingPointShortest);
      static const QRegularExpression exponent(QStringLiteral("e\\+?(-?)0*([0-9])"));
      const QString scientific = QString::number(v, 'e', QLocale::FloatingPointShortest)
                                     .replace(exponent, QStringLiteral("e\\1\\2"));
      return fixed.size() <= 7 || fixed.size() <= scientific.size() ? fixed : scientific;
    }
    case run::KeyType::Integer: {
      static const QRegularExpression digits(QStringLiteral("^([+-]?)0*([0-9]+)$"));
      const auto m = digits.match(text);
      if (!m.hasMatch()) return text;
      const QString sign =
          m.captured(1) == QLatin1String("-") && m.captured(2) != QLatin1String("0")
              ? QStringLiteral("-")
              : QString();
      return sign + m.captured(2);
    }
    case run::KeyType::Boolean: {
      const QString v = text.toLower();
      for (const char* t : {"true", "yes", "on", "1"})
        if (v == QLatin1String(t)) return QStringLiteral("true");
      for (const char* f : {"false", "no", "off", "0"})
        if (v == QLatin1String(f)) return QStringLiteral("false");
      return text;
    }
    case run::KeyType::String:
    case run::KeyType::Choice:
      break;
  }
  return text;
}

ConfigForm::ConfigForm(std::vector<run::ConfigKey> keys, QWidget* parent)
    : QScrollArea(parent), m_keys(std::move(keys)) {
  setObjectName(QStringLiteral("config form"));
  setAccessibleName(QStringLiteral("run configuration"));
  setWidgetResizable(true);
  setFrameShape(QFrame::NoFrame);

  auto* content = new QWidget;
  content->setObjectName(QStringLiteral("config form content"));
  auto* columns = new QHBoxLayout(content);
  columns->setContentsMargins(0, 0, 0, 0);
  for (int c = 0; c < 2; ++c) {
    auto* column = new QWidget(content);
    column->setObjectName(QStringLiteral("config form column %1").arg(c));
    auto* layout = new QVBoxLayout(column);
    layout->setContentsMargins(0, 0, 0, 0);
    columns->addWidget(column, 1);
  }

  int labelWidth = 0;
  for (const auto& key : m_keys) {
    const QString name = qs(key.name);
    const QString section = name.section(QLatin1Char('.'), 0, 0);
    auto sectionIt = std::find_if(m_sections.begin(), m_sections.end(),
                                  [&](const Section& s) { return s.name == section; });
    if (sectionIt == m_sections.end()) {
      Section s;
      s.name = section;
      s.box = new QGroupBox(sectionTitle(section), content);
      s.box->setObjectName(QStringLiteral("section %1").arg(section));
      auto* form = new QFormLayout(s.box);
      form->setFieldGrowthPolicy(QFormLayout::ExpandingFieldsGrow);
      form->setLabelAlignment(Qt::AlignLeft | Qt::AlignVCenter);
      form->setRowWrapPolicy(QFormLayout::DontWrapRows);
      m_sections.push_back(s);
      sectionIt = std::prev(m_sections.end());
    }
    sectionIt->keys.push_back(name);

    Row& row = m_rows[name];
    row.key = &key;
    row.section = section;
    // One widget per row holds the label, the field and its error: the label and the field are
    // siblings, which is how Qt's accessibility finds a field's label (a buddy in another widget
    // is not announced). The label column is lined up by one minimum width for all labels.
    row.cell = new QWidget(sectionIt->box);
    row.cell->setObjectName(QStringLiteral("cell %1").arg(name));
    auto* rowLayout = new QHBoxLayout(row.cell);
    rowLayout->setContentsMargins(0, 0, 0, 0);
    auto* cellLayout = new QVBoxLayout;
    cellLayout->setContentsMargins(0, 0, 0, 0);
    cellLayout->setSpacing(2);
    auto* line = new QHBoxLayout;
    line->setContentsMargins(0, 0, 0, 0);
    row.editor = makeEditor(row);
    line->addWidget(row.editor, key.type == run::KeyType::String ||
                                        key.type == run::KeyType::Integer ||
                                        key.type == run::KeyType::Number
                                    ? 1
                                    : 0);
    if (key.isPath) line->addWidget(row.browse = makeBrowseButton(row));
    if (key.type == run::KeyType::Choice || key.type == run::KeyType::Boolean) line->addStretch(1);
    cellLayout->addLayout(line);

    row.error = new QLabel(row.cell);
    row.error->setObjectName(QStringLiteral("error %1").arg(name));
    row.error->setAccessibleDescription(QStringLiteral("error for %1").arg(name));
    row.error->setWordWrap(true);
    row.error->setTextFormat(Qt::PlainText);
    row.error->setTextInteractionFlags(Qt::TextSelectableByMouse);
    QPalette red = row.error->palette();
    red.setColor(QPalette::WindowText, QColor(0xc0, 0x10, 0x10));
    row.error->setPalette(red);
    row.error->hide();
    cellLayout->addWidget(row.error);

    row.label = new QLabel(name, row.cell);
    row.label->setObjectName(QStringLiteral("label %1").arg(name));
    row.label->setBuddy(row.editor);
    row.label->setMinimumHeight(row.editor->sizeHint().height());
    row.label->setAlignment(Qt::AlignLeft | Qt::AlignVCenter);
    const QString tip = tooltipFor(key, defaultValue(name));
    row.label->setToolTip(tip);
    row.editor->setToolTip(tip);
    rowLayout->addWidget(row.label, 0, Qt::AlignTop);
    rowLayout->addLayout(cellLayout, 1);
    labelWidth = std::max(labelWidth, QFontMetrics(boldFont()).horizontalAdvance(name) + 8);
    static_cast<QFormLayout*>(sectionIt->box->layout())->addRow(row.cell);
  }
  // One label column width for every section, so the fields line up across the groups.
  for (auto& [name, row] : m_rows) row.label->setMinimumWidth(labelWidth);

  setWidget(content);
  resetToDefaults();
  relayout(true);
}

QFont ConfigForm::boldFont() const {
  QFont f = font();
  f.setBold(true);
  return f;
}

QWidget* ConfigForm::makeEditor(Row& row) {
  const run::ConfigKey& key = *row.key;
  const QString name = qs(key.name);
  QWidget* editor = nullptr;
  switch (key.type) {
    case run::KeyType::Choice: {
      auto* combo = new QComboBox(row.cell);
      for (const auto& c : key.choices) combo->addItem(qs(c));
      connect(combo, &QComboBox::currentIndexChanged, this, [this, name] { onFieldChanged(name); });
      editor = combo;
      break;
    }
    case run::KeyType::Boolean: {
      auto* box = new QCheckBox(row.cell);
      connect(box, &QCheckBox::toggled, this, [this, name] { onFieldChanged(name); });
      editor = box;
      break;
    }
    case run::KeyType::Integer:
    case run::KeyType::Number:
    case run::KeyType::String: {
      auto* edit = new QLineEdit(row.cell);
      if (key.type != run::KeyType::String) {
        QString hint = qs(key.typeDescription());
        const QString range = qs(key.rangeDescription());
        if (!range.isEmpty()) hint += QStringLiteral(", ") + range;
        edit->setPlaceholderText(hint);
        edit->setMinimumWidth(fontMetrics().horizontalAdvance(QLatin1Char('0')) * 14);
      } else {
        edit->setPlaceholderText(key.defaultValue == "\"\"" || key.defaultValue.empty()
                                     ? QStringLiteral("(empty)")
                                     : QString());
        edit->setMinimumWidth(fontMetrics().horizontalAdvance(QLatin1Char('x')) * 22);
      }
      edit->setClearButtonEnabled(key.type == run::KeyType::String);
      connect(edit, &QLineEdit::textChanged, this, [this, name] { onFieldChanged(name); });
      editor = edit;
      break;
    }
  }
  editor->setObjectName(name);
  editor->setAccessibleName(name);
  return editor;
}

QWidget* ConfigForm::makeBrowseButton(Row& row) {
  const QString name = qs(row.key->name);
  auto* button = new QToolButton(row.cell);
  button->setText(tr("Browse…"));
  button->setObjectName(QStringLiteral("browse %1").arg(name));
  button->setAccessibleName(QStringLiteral("browse %1").arg(name));
  button->setToolTip(tr("Choose a folder, a file or a built-in for %1").arg(name));
  button->setPopupMode(QToolButton::InstantPopup);
  button->setToolButtonStyle(Qt::ToolButtonTextOnly);
  auto* menu = new QMenu(button);
  menu->setObjectName(QStringLiteral("browse menu %1").arg(name));
  auto startDir = [this, name] {
    const QFileInfo current(value(name));
    if (current.isDir()) return current.absoluteFilePath();
    if (current.exists()) return current.absolutePath();
    return QDir::currentPath();
  };
  auto choose = [this, name](const QString& picked) {
    if (picked.isEmpty()) return;
    setValue(name, picked);
    Q_EMIT edited(name);
  };
  connect(menu->addAction(tr("&Folder…")), &QAction::triggered, this, [=, this] {
    choose(QFileDialog::getExistingDirectory(this, tr("Choose a folder for %1").arg(name),
                                             startDir()));
  });
  connect(menu->addAction(tr("F&ile…")), &QAction::triggered, this, [=, this] {
    choose(QFileDialog::getOpenFileName(this, tr("Choose a file for %1").arg(name), startDir()));
  });
  const QStringList names = builtins(name);
  if (!names.isEmpty()) menu->addSection(tr("Built-in"));
  for (const QString& b : names)
    connect(menu->addAction(b), &QAction::triggered, this, [=] { choose(b); });
  if (!row.key->defaultValue.empty()) {
    menu->addSeparator();
    connect(
        menu->addAction(tr("&Default (%1)")
                            .arg(defaultValue(name).isEmpty() ? tr("empty") : defaultValue(name))),
        &QAction::triggered, this, [=, this] {
          setValue(name, defaultValue(name));
          Q_EMIT edited(name);
        });
  }
  button->setMenu(menu);
  return button;
}

QStringList ConfigForm::builtins(const QString& name) const {
  const run::ConfigKey* k = key(name);
  if (!k || !k->isPath) return {};
  // The key's own help lists what it accepts besides files and folders ("builtin:tiny (the
  // shipped base model), or scratch:tiny"): no second list in the GUI.
  static const QRegularExpression re(
      QStringLiteral("\\b((?:builtin|scratch|random):[A-Za-z0-9_-]+)"));
  QStringList out;
  for (auto it = re.globalMatch(qs(k->help)); it.hasNext();) {
    const QString b = it.next().captured(1);
    if (!out.contains(b)) out << b;
  }
  return out;
}

const run::ConfigKey* ConfigForm::key(const QString& name) const {
  const Row* r = row(name);
  return r ? r->key : nullptr;
}

const ConfigForm::Row* ConfigForm::row(const QString& name) const {
  auto it = m_rows.find(name);
  return it == m_rows.end() ? nullptr : &it->second;
}

ConfigForm::Row* ConfigForm::row(const QString& name) {
  auto it = m_rows.find(name);
  return it == m_rows.end() ? nullptr : &it->second;
}

QString ConfigForm::value(const QString& name) const {
  const Row* r = row(name);
  if (!r) return {};
  if (auto* combo = qobject_cast<QComboBox*>(r->editor)) return combo->currentText();
  if (auto* box = qobject_cast<QCheckBox*>(r->editor))
    return box->isChecked() ? QStringLiteral("true") : QStringLiteral("false");
  if (auto* edit = qobject_cast<QLineEdit*>(r->editor)) return edit->text();
  return {};
}

void ConfigForm::setValue(const QString& name, const QString& value) {
  Row* r = row(name);
  if (!r) return;
  const bool wasLoading = m_loading;
  m_loading = true;
  if (auto* combo = qobject_cast<QComboBox*>(r->editor)) {
    int index = combo->findText(value);
    if (index < 0) {  // not one of the choices: shown as it is, for the engine to judge
      combo->addItem(value);
      index = combo->count() - 1;
    }
    combo->setCurrentIndex(index);
  } else if (auto* box = qobject_cast<QCheckBox*>(r->editor)) {
    box->setChecked(normalized(*r->key, value) == QLatin1String("true"));
  } else if (auto* edit = qobject_cast<QLineEdit*>(r->editor)) {
    edit->setText(r->key->type == run::KeyType::Number ? normalized(*r->key, value) : value);
    edit->setCursorPosition(0);
  }
  markChanged(*r);
  m_loading = wasLoading;
}

void ConfigForm::resetToDefaults() {
  for (const auto& key : m_keys) setValue(qs(key.name), defaultValue(qs(key.name)));
}

QString ConfigForm::defaultValue(const QString& name) const {
  const run::ConfigKey* k = key(name);
  return k ? plainScalar(k->defaultValue) : QString();
}

bool ConfigForm::isChanged(const QString& name) const {
  const run::ConfigKey* k = key(name);
  return k && normalized(*k, value(name)) != normalized(*k, defaultValue(name));
}

void ConfigForm::markChanged(Row& r) {
  const QString name = qs(r.key->name);
  const bool changed = isChanged(name);
  QFont f = r.label->font();
  if (f.bold() != changed) {
    f.setBold(changed);
    r.label->setFont(f);
  }
  // Read out after the name: the key's help in plain words (Qt would read the tooltip's HTML),
  // and whether it differs from the default.
  const QString shownDefault = defaultValue(name).isEmpty() ? tr("empty") : defaultValue(name);
  const QString help = qs(r.key->help);
  r.editor->setAccessibleDescription(
      changed ? tr("%1 Changed from the default, %2.").arg(help, shownDefault) : help);
}

void ConfigForm::onFieldChanged(const QString& name) {
  if (Row* r = row(name)) markChanged(*r);
  if (!m_loading) Q_EMIT edited(name);
}

void ConfigForm::setKeyVisible(const QString& name, bool visible) {
  Row* r = row(name);
  if (!r || r->visible == visible) return;
  r->visible = visible;
  for (Section& s : m_sections) {
    if (s.name != r->section) continue;
    // Rows are taken out of the form and put back rather than hidden with setRowVisible: Qt
    // 6.4's height-for-width pass miscounts around hidden rows and squeezes a wrapped error
    // label's row to nothing.
    auto* form = static_cast<QFormLayout*>(s.box->layout());
    if (!visible) {
      const QFormLayout::TakeRowResult taken = form->takeRow(r->cell);
      delete taken.labelItem;  // the layout items; the widgets stay in the box
      delete taken.fieldItem;
      r->cell->hide();
    } else {
      int index = 0;
      for (const QString& k : s.keys) {
        if (k == name) break;
        index += row(k)->visible ? 1 : 0;
      }
      form->insertRow(index, r->cell);
      r->cell->show();
    }
    const bool any = std::any_of(s.keys.begin(), s.keys.end(),
                                 [this](const QString& k) { return row(k)->visible; });
    s.box->setVisible(any);
  }
  relayout(true);
}

bool ConfigForm::isKeyVisible(const QString& name) const {
  const Row* r = row(name);
  return r && r->visible;
}

void ConfigForm::setError(const QString& name, const QString& message) {
  Row* r = row(name);
  if (!r) return;
  r->error->setText(message);
  r->error->setVisible(!message.isEmpty());
}

QString ConfigForm::error(const QString& name) const {
  const Row* r = row(name);
  return r ? r->error->text() : QString();
}

void ConfigForm::clearErrors() {
  for (auto& [name, r] : m_rows) setError(name, {});
}

QWidget* ConfigForm::field(const QString& name) const {
  const Row* r = row(name);
  return r ? r->editor : nullptr;
}

QLabel* ConfigForm::label(const QString& name) const {
  const Row* r = row(name);
  return r ? r->label : nullptr;
}

QWidget* ConfigForm::browseButton(const QString& name) const {
  const Row* r = row(name);
  return r ? r->browse : nullptr;
}

void ConfigForm::ensureKeyVisible(const QString& name) {
  if (const Row* r = row(name); r && r->visible) ensureWidgetVisible(r->cell);
}

void ConfigForm::resizeEvent(QResizeEvent* event) {
  QScrollArea::resizeEvent(event);
  relayout();
}

void ConfigForm::relayout(bool force) {
  QWidget* content = widget();
  if (!content) return;
  auto* columnsLayout = static_cast<QHBoxLayout*>(content->layout());
  QWidget* column0 = columnsLayout->itemAt(0)->widget();
  QWidget* column1 = columnsLayout->itemAt(1)->widget();
  // Two columns of sections when both fit side by side, else one.
  int widest = 0;
  for (const Section& s : m_sections) widest = std::max(widest, s.box->minimumSizeHint().width());
  const int spacing = columnsLayout->spacing();
  const int columns = viewport()->width() >= 2 * widest + spacing ? 2 : 1;
  if (columns == m_columns && !force) return;
  m_columns = columns;

  clearLayout(column0->layout());
  clearLayout(column1->layout());
  int total = 0;
  for (const Section& s : m_sections)
    for (const QString& k : s.keys) total += row(k)->visible ? 1 : 0;
  int placed = 0;
  bool right = false;
  for (const Section& s : m_sections) {
    int rows = 0;
    for (const QString& k : s.keys) rows += row(k)->visible ? 1 : 0;
    // Balance the columns, keeping the table's order: the sections from the one that would
    // take the left column past half of the rows go right.
    right = right || (columns == 2 && placed > 0 && 2 * placed + rows > total);
    static_cast<QVBoxLayout*>((right ? column1 : column0)->layout())->addWidget(s.box);
    placed += rows;
  }
  static_cast<QVBoxLayout*>(column0->layout())->addStretch(1);
  static_cast<QVBoxLayout*>(column1->layout())->addStretch(1);
  column1->setVisible(columns == 2);
}

}  // namespace fp4lab::widgets
