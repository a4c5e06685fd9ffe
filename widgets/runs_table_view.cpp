// The runs table with its first column frozen.
#include "fp4lab/widgets/runs_table_view.h"

#include <QHeaderView>
#include <QScrollBar>

namespace fp4lab::widgets {

RunsTableView::RunsTableView(QWidget* parent) : QTableView(parent) {
  m_frozen = new QTableView(this);
  m_frozen->setObjectName(QStringLiteral("runs table names"));
  m_frozen->setAccessibleName(QStringLiteral("runs table names"));
  m_frozen->setToolTip(
      QStringLiteral("the runs' names: this column stays while the others scroll sideways"));
  m_frozen->setFocusPolicy(Qt::NoFocus);
  m_frozen->verticalHeader()->hide();
  m_frozen->horizontalHeader()->setSectionResizeMode(QHeaderView::Fixed);
  m_frozen->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  m_frozen->setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  m_frozen->setVerticalScrollMode(ScrollPerPixel);
  m_frozen->setSelectionBehavior(SelectRows);
  m_frozen->setSelectionMode(SingleSelection);
  m_frozen->setAlternatingRowColors(true);
  m_frozen->setContextMenuPolicy(Qt::CustomContextMenu);
  m_frozen->setStyleSheet(
      QStringLiteral("QTableView { border: none; border-right: 1px solid "
                     "palette(mid); }"));
  setHorizontalScrollMode(ScrollPerPixel);
  setVerticalScrollMode(ScrollPerPixel);
  viewport()->stackUnder(m_frozen);
  connect(m_frozen->verticalScrollBar(), &QAbstractSlider::valueChanged, verticalScrollBar(),
          &QAbstractSlider::setValue);
  connect(verticalScrollBar(), &QAbstractSlider::valueChanged, m_frozen->verticalScrollBar(),
          &QAbstractSlider::setValue);
  connect(horizontalHeader(), &QHeaderView::sectionResized, this, [this](int logical, int, int) {
    if (logical == 0) syncFrozenColumns(), placeFrozen();
  });
  connect(verticalHeader(), &QHeaderView::sectionResized, this,
          [this](int logical, int, int size) { m_frozen->setRowHeight(logical, size); });
  // The name stays the first column: a drag that moves it elsewhere is undone.
  connect(horizontalHeader(), &QHeaderView::sectionMoved, this, [this](int logical, int, int) {
    if (logical == 0 || horizontalHeader()->logicalIndex(0) != 0)
      horizontalHeader()->moveSection(horizontalHeader()->visualIndex(0), 0);
  });
  // Sorting and the context menu from the frozen column act on the table.
  connect(m_frozen->horizontalHeader(), &QHeaderView::sectionClicked, this, [this](int logical) {
    const Qt::SortOrder order =
        horizontalHeader()->sortIndicatorSection() == logical &&
                horizontalHeader()->sortIndicatorOrder() == Qt::AscendingOrder
            ? Qt::DescendingOrder
            : Qt::AscendingOrder;
    sortByColumn(logical, order);
  });
  connect(horizontalHeader(), &QHeaderView::sortIndicatorChanged, this,
          [this](int logical, Qt::SortOrder order) {
            m_frozen->horizontalHeader()->setSortIndicatorShown(logical == 0);
            m_frozen->horizontalHeader()->setSortIndicator(logical, order);
          });
  connect(m_frozen, &QWidget::customContextMenuRequested, this, [this](const QPoint& pos) {
    Q_EMIT customContextMenuRequested(
        viewport()->mapFromGlobal(m_frozen->viewport()->mapToGlobal(pos)));
  });
}

void RunsTableView::setModel(QAbstractItemModel* model) {
  QTableView::setModel(model);
  m_frozen->setModel(model);
  m_frozen->setSelectionModel(selectionModel());
  m_frozen->verticalHeader()->setDefaultSectionSize(verticalHeader()->defaultSectionSize());
  if (model) {
    connect(model, &QAbstractItemModel::columnsInserted, this, &RunsTableView::syncFrozenColumns);
    connect(model, &QAbstractItemModel::modelReset, this, &RunsTableView::syncFrozenColumns);
  }
  syncFrozenColumns();
  placeFrozen();
}

void RunsTableView::syncFrozenColumns() {
  if (!model()) return;
  for (int c = 1; c < model()->columnCount(); ++c) m_frozen->setColumnHidden(c, true);
  m_frozen->setColumnWidth(0, columnWidth(0));
  m_frozen->verticalHeader()->setDefaultSectionSize(verticalHeader()->defaultSectionSize());
}

void RunsTableView::placeFrozen() {
  m_frozen->setGeometry(verticalHeader()->width() + frameWidth(), frameWidth(), columnWidth(0),
                        viewport()->height() + horizontalHeader()->height());
  m_frozen->setVisible(!isColumnHidden(0) && model());
}

void RunsTableView::resizeEvent(QResizeEvent* event) {
  QTableView::resizeEvent(event);
  placeFrozen();
}

void RunsTableView::updateGeometries() {
  QTableView::updateGeometries();
  if (m_frozen) placeFrozen();
}

QModelIndex RunsTableView::moveCursor(CursorAction action, Qt::KeyboardModifiers modifiers) {
  const QModelIndex current = QTableView::moveCursor(action, modifiers);
  // Moving left onto a column hidden under the frozen one scrolls it out from under it.
  if (action == MoveLeft && current.column() > 0 &&
      visualRect(current).topLeft().x() < m_frozen->columnWidth(0)) {
    const int x = horizontalScrollBar()->value() + visualRect(current).topLeft().x() -
                  m_frozen->columnWidth(0);
    horizontalScrollBar()->setValue(x);
  }
  return current;
}

void RunsTableView::scrollTo(const QModelIndex& index, ScrollHint hint) {
  // The name column is always in sight: selecting a run scrolls to its row, never sideways to
  // the name (which would scroll the numbers away).
  const int x = horizontalScrollBar()->value();
  QTableView::scrollTo(index, hint);
  if (index.column() == 0) horizontalScrollBar()->setValue(x);
}

}  // namespace fp4lab::widgets
