// The runs table: a QTableView whose first column (the run's name, its checkbox and colour) stays
// in place while the other columns scroll sideways under it, as a spreadsheet's frozen column
// does, so the numbers at the right never lose the name they belong to. The frozen column is a
// second view over the same model and selection model, laid over the first one's left edge.
#pragma once

#include <QTableView>

namespace fp4lab::widgets {

class RunsTableView : public QTableView {
  Q_OBJECT

 public:
  explicit RunsTableView(QWidget* parent = nullptr);
  void setModel(QAbstractItemModel* model) override;
  // The view that draws the frozen first column (for tests and accessibility).
  QTableView* frozenView() const { return m_frozen; }
  void scrollTo(const QModelIndex& index, ScrollHint hint = EnsureVisible) override;

 protected:
  void resizeEvent(QResizeEvent* event) override;
  QModelIndex moveCursor(CursorAction action, Qt::KeyboardModifiers modifiers) override;
  void updateGeometries() override;

 private:
  void placeFrozen();
  void syncFrozenColumns();

  QTableView* m_frozen = nullptr;
};

}  // namespace fp4lab::widgets
