// The selected run's details.
#include "fp4lab/widgets/run_details.h"

#include <QHeaderView>
#include <QLabel>
#include <QListWidget>
#include <QPlainTextEdit>
#include <QTabWidget>
#include <QTreeWidget>
#include <QVBoxLayout>

#include <map>

namespace fp4lab::widgets {

RunDetails::RunDetails(QWidget* parent) : QWidget(parent) {
  m_header = new QLabel(QStringLiteral("No run selected."));
  m_header->setObjectName(QStringLiteral("run state"));
  m_header->setAccessibleDescription(QStringLiteral("the selected run's state"));
  m_header->setWordWrap(true);
  m_header->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_config = new QTreeWidget;
  m_config->setObjectName(QStringLiteral("run config"));
  m_config->setAccessibleName(QStringLiteral("run config"));
  m_config->setToolTip(QStringLiteral("the run's run.yaml: every key and where it was set"));
  m_config->setHeaderLabels({QStringLiteral("key"), QStringLiteral("value")});
  m_config->header()->setSectionResizeMode(0, QHeaderView::ResizeToContents);
  m_events = new QListWidget;
  m_events->setObjectName(QStringLiteral("run events"));
  m_events->setAccessibleName(QStringLiteral("run events"));
  m_events->setToolTip(
      QStringLiteral("the log's events: start, resume, checkpoints, task gradings, warnings, end"));
  // An event is a sentence (a task grading's pass rates, a warning's advice): wrapped to the
  // dock's width rather than cut at its edge.
  m_events->setWordWrap(true);
  m_events->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  m_events->setResizeMode(QListView::Adjust);
  m_events->setAlternatingRowColors(true);  // where one wrapped event ends
  m_console = new QPlainTextEdit;
  m_console->setObjectName(QStringLiteral("run console"));
  m_console->setAccessibleName(QStringLiteral("run console"));
  m_console->setToolTip(QStringLiteral("what the run's process printed (runs launched here)"));
  m_console->setReadOnly(true);
  m_console->setMaximumBlockCount(5000);
  m_console->setFont(QFont(QStringLiteral("monospace")));
  // Wrapped: an error's start must not be scrolled out of sight to the left.
  m_console->setLineWrapMode(QPlainTextEdit::WidgetWidth);
  m_console->setWordWrapMode(QTextOption::WrapAtWordBoundaryOrAnywhere);
  m_tabs = new QTabWidget;
  m_tabs->setObjectName(QStringLiteral("run details tabs"));
  m_tabs->setAccessibleName(QStringLiteral("run details tabs"));
  m_tabs->addTab(m_config, QStringLiteral("&Config"));
  m_tabs->addTab(m_events, QStringLiteral("&Events"));
  m_tabs->addTab(m_console, QStringLiteral("C&onsole"));
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addWidget(m_header);
  layout->addWidget(m_tabs, 1);
}

QString RunDetails::stateText() const {
  return m_header->text();
}

void RunDetails::setRun(const RunSnapshot* run) {
  if (!run) {
    m_id.clear(), m_configYaml.clear(), m_eventCount = 0;
    m_header->setText(QStringLiteral("No run selected."));
    m_config->clear(), m_events->clear(), m_console->clear();
    return;
  }
  const bool other = run->id != m_id;
  if (other) {
    m_id = run->id;
    m_configYaml.clear();
    m_eventCount = 0;
    m_events->clear();
    m_console->clear();
  }
  QString header = QStringLiteral("<b>%1</b> \u2014 %2")
                       .arg(QString::fromStdString(run->name).toHtmlEscaped(),
                            QString::fromStdString(stateLabel(*run)));
  const RunSummary& s = run->summary;
  if (s.maxSteps > 0) header += QStringLiteral(", step %1 of %2").arg(s.step).arg(s.maxSteps);
  if (!run->folder.message.empty())
    header += QStringLiteral("<br>") + QString::fromStdString(run->folder.message).toHtmlEscaped();
  if (run->damaged())
    header += QStringLiteral("<br><span style='color:#b03000'>%1</span>")
                  .arg(QString::fromStdString(damageText(*run))
                           .toHtmlEscaped()
                           .replace(QLatin1Char('\n'), QStringLiteral("<br>")));
  if (!run->folder.latestCheckpoint.empty())
    header += QStringLiteral("<br>latest checkpoint: %1")
                  .arg(QString::fromStdString(run->folder.latestCheckpoint).toHtmlEscaped());
  header +=
      QStringLiteral("<br><small>%1</small>").arg(QString::fromStdString(run->id).toHtmlEscaped());
  m_header->setText(header);

  const std::string yaml = run->folder.hasConfig ? run->folder.config.toYaml() : std::string();
  if (yaml != m_configYaml) {
    m_configYaml = yaml;
    m_config->clear();
    std::map<QString, QTreeWidgetItem*> sections;
    if (run->folder.hasConfig) {
      for (const auto& [key, value] : run->folder.config.flatten()) {
        const QString k = QString::fromStdString(key);
        const QString section = k.section(QLatin1Char('.'), 0, 0);
        QTreeWidgetItem*& parent = sections[section];
        if (!parent) {
          parent = new QTreeWidgetItem(m_config, {section});
          parent->setExpanded(true);
        }
        auto* item = new QTreeWidgetItem(
            parent, {k.section(QLatin1Char('.'), 1), QString::fromStdString(value)});
        item->setToolTip(1, QString::fromStdString(run->folder.config.originOf(key)));
      }
    }
  }
  if (run->curves && run->curves->events.size() != m_eventCount) {
    for (size_t i = m_eventCount; i < run->curves->events.size(); ++i)
      m_events->addItem(QString::fromStdString(run->curves->events[i]));
    m_eventCount = run->curves->events.size();
    m_events->scrollToBottom();
  }
}

void RunDetails::setConsole(const QStringList& lines) {
  m_console->setPlainText(lines.join(QLatin1Char('\n')));
  m_console->moveCursor(QTextCursor::End);
}

void RunDetails::appendConsole(const QString& text) {
  QString t = text;
  if (t.endsWith(QLatin1Char('\n'))) t.chop(1);
  m_console->appendPlainText(t);
}

}  // namespace fp4lab::widgets
