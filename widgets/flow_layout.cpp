// The wrapping toolbar layout.
#include "fp4lab/widgets/flow_layout.h"

#include <QHBoxLayout>
#include <QWidget>

#include <algorithm>

namespace fp4lab::widgets {

namespace {

// An item's width in a row: its size hint, but never under its minimum (a widget whose size
// policy ignores its hint, such as an elided path label, has a hint of width 0).
int widthOf(const QLayoutItem* item) {
  return std::max(item->sizeHint().width(), item->minimumSize().width());
}

// QSizePolicy::Ignored: the item takes what is left of its row, as in a box layout.
bool takesRest(const QLayoutItem* item) {
  const QWidget* w = item->widget();
  return w && (w->sizePolicy().horizontalPolicy() & QSizePolicy::IgnoreFlag);
}

}  // namespace

FlowLayout::FlowLayout(QWidget* parent, int hSpacing, int vSpacing)
    : QLayout(parent), m_hSpacing(hSpacing), m_vSpacing(vSpacing) {
  setContentsMargins(0, 0, 0, 0);
}

FlowLayout::~FlowLayout() {
  while (QLayoutItem* item = takeAt(0)) delete item;
}

void FlowLayout::addWidget(QWidget* widget, int gapBefore) {
  QLayout::addWidget(widget);  // adds through addItem
  m_gaps.back() = gapBefore;
}

void FlowLayout::addItem(QLayoutItem* item) {
  m_items.append(item);
  m_gaps.append(0);
}

int FlowLayout::count() const {
  return int(m_items.size());
}

QLayoutItem* FlowLayout::itemAt(int index) const {
  return index >= 0 && index < m_items.size() ? m_items[index] : nullptr;
}

QLayoutItem* FlowLayout::takeAt(int index) {
  if (index < 0 || index >= m_items.size()) return nullptr;
  m_gaps.removeAt(index);
  return m_items.takeAt(index);
}

Qt::Orientations FlowLayout::expandingDirections() const {
  return {};
}

bool FlowLayout::hasHeightForWidth() const {
  return true;
}

int FlowLayout::heightForWidth(int width) const {
  return place(QRect(0, 0, width, 0), false);
}

QSize FlowLayout::minimumSize() const {
  QSize size;
  for (const QLayoutItem* item : m_items)
    if (!item->isEmpty()) size = size.expandedTo(item->minimumSize());
  const QMargins m = contentsMargins();
  return size + QSize(m.left() + m.right(), m.top() + m.bottom());
}

QSize FlowLayout::sizeHint() const {
  // One row: the width that needs no wrapping.
  int width = 0, height = 0;
  bool first = true;
  for (int i = 0; i < m_items.size(); ++i) {
    const QLayoutItem* item = m_items[i];
    if (item->isEmpty()) continue;
    if (!first) width += m_hSpacing + m_gaps[i];
    width += widthOf(item);
    height = std::max(height, item->sizeHint().height());
    first = false;
  }
  const QMargins m = contentsMargins();
  return {width + m.left() + m.right(), height + m.top() + m.bottom()};
}

void FlowLayout::setGeometry(const QRect& rect) {
  QLayout::setGeometry(rect);
  place(rect, true);
}

int FlowLayout::place(const QRect& rect, bool apply) const {
  const QRect area = rect.marginsRemoved(contentsMargins());
  // Rows first (which items go on which row), then each row placed, its items vertically centred.
  int y = area.y(), rowStart = 0;
  const auto layRow = [&](int from, int to) {
    int rowHeight = 0;
    for (int i = from; i < to; ++i)
      if (!m_items[i]->isEmpty()) rowHeight = std::max(rowHeight, m_items[i]->sizeHint().height());
    if (apply) {
      // What the row leaves over goes to its items that take the rest.
      int used = 0, takers = 0;
      bool first = true;
      for (int i = from; i < to; ++i) {
        if (m_items[i]->isEmpty()) continue;
        used += (first ? 0 : m_hSpacing + m_gaps[i]) + widthOf(m_items[i]);
        takers += takesRest(m_items[i]) ? 1 : 0;
        first = false;
      }
      const int extra = takers > 0 ? std::max(0, area.width() - used) / takers : 0;
      int x = area.x();
      first = true;
      for (int i = from; i < to; ++i) {
        QLayoutItem* item = m_items[i];
        if (item->isEmpty()) continue;
        if (!first) x += m_hSpacing + m_gaps[i];
        const QSize hint = item->sizeHint();
        const int w = std::min(widthOf(item) + (takesRest(item) ? extra : 0), area.width());
        item->setGeometry(QRect(x, y + (rowHeight - hint.height()) / 2, w, hint.height()));
        x += w;
        first = false;
      }
    }
    return rowHeight;
  };
  int x = 0;
  bool rowEmpty = true;
  for (int i = 0; i < m_items.size(); ++i) {
    const QLayoutItem* item = m_items[i];
    if (item->isEmpty()) continue;
    const int w = widthOf(item);
    const int advance = rowEmpty ? w : x + m_hSpacing + m_gaps[i] + w;
    if (!rowEmpty && advance > area.width()) {
      y += layRow(rowStart, i) + m_vSpacing;
      rowStart = i;
      x = w;
    } else {
      x = advance;
    }
    rowEmpty = false;
  }
  if (!rowEmpty) y += layRow(rowStart, int(m_items.size()));
  const QMargins m = contentsMargins();
  return y - area.y() + m.top() + m.bottom();
}

QWidget* flowGroup(std::initializer_list<QWidget*> widgets) {
  auto* group = new QWidget;
  auto* row = new QHBoxLayout(group);
  row->setContentsMargins(0, 0, 0, 0);
  for (QWidget* w : widgets) row->addWidget(w);
  return group;
}

}  // namespace fp4lab::widgets
