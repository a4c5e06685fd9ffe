// The Run details dock: the selected run's state and message, its configuration as a tree
// (section, key, value; the tooltip says where each value was set), the log's events and the
// child's console output when the workbench launched it.
#pragma once

#include <QWidget>

#include <string>

#include "fp4lab/widgets/run_snapshot.h"

class QLabel;
class QPlainTextEdit;
class QTabWidget;
class QTreeWidget;
class QListWidget;

namespace fp4lab::widgets {

class RunDetails : public QWidget {
  Q_OBJECT

 public:
  explicit RunDetails(QWidget* parent = nullptr);

  // The run shown (null: none); refreshes only what changed.
  void setRun(const RunSnapshot* run);
  // The console of the job (replaces it), and appended text as it arrives.
  void setConsole(const QStringList& lines);
  void appendConsole(const QString& text);
  const std::string& runId() const { return m_id; }
  QString stateText() const;

 private:
  QLabel* m_header = nullptr;
  QTabWidget* m_tabs = nullptr;
  QTreeWidget* m_config = nullptr;
  QListWidget* m_events = nullptr;
  QPlainTextEdit* m_console = nullptr;
  std::string m_id, m_configYaml;
  size_t m_eventCount = 0;
};

}  // namespace fp4lab::widgets
