// A layout that places its items left to right and wraps them onto further rows when the width
// runs out, so a toolbar row never sets the window's minimum width: the narrowest it asks for is
// its widest item. Its height follows its width (heightForWidth), which the box layouts around it
// honour. Items keep their size hints; a row is not stretched.
#pragma once

#include <QLayout>
#include <QList>

#include <initializer_list>

namespace fp4lab::widgets {

class FlowLayout : public QLayout {
 public:
  explicit FlowLayout(QWidget* parent = nullptr, int hSpacing = 6, int vSpacing = 4);
  ~FlowLayout() override;

  // Extra space before an item (the gap a box layout's addSpacing would leave), 0 at a row start.
  void addWidget(QWidget* widget, int gapBefore = 0);

  void addItem(QLayoutItem* item) override;
  int count() const override;
  QLayoutItem* itemAt(int index) const override;
  QLayoutItem* takeAt(int index) override;
  Qt::Orientations expandingDirections() const override;
  bool hasHeightForWidth() const override;
  int heightForWidth(int width) const override;
  QSize minimumSize() const override;
  QSize sizeHint() const override;
  void setGeometry(const QRect& rect) override;

 private:
  // Lays the items out in rect (or only measures, when apply is false); returns the height used.
  int place(const QRect& rect, bool apply) const;

  QList<QLayoutItem*> m_items;
  QList<int> m_gaps;  // per item, parallel to m_items
  int m_hSpacing, m_vSpacing;
};

// Widgets that wrap as one piece (a label with its control): a row of them in one QWidget.
QWidget* flowGroup(std::initializer_list<QWidget*> widgets);

}  // namespace fp4lab::widgets
