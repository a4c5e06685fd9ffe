// FlowLayout, the wrapping toolbar row: items never overlap, rows wrap when the width runs out,
// an item whose size policy ignores its hint takes what is left of its row, and the height it
// reports for a width is the height it uses.
#include <catch2/catch.hpp>

#include <QLabel>
#include <QPushButton>
#include <QWidget>

#include "fp4lab/widgets/flow_layout.h"

using fp4lab::widgets::flowGroup;
using fp4lab::widgets::FlowLayout;

namespace {

void checkNoOverlap(const std::vector<QWidget*>& items, int width) {
  for (size_t i = 0; i < items.size(); ++i) {
    const QRect a = items[i]->geometry();
    INFO("item " << i << " at " << a.x() << "," << a.y() << " " << a.width() << "x" << a.height()
                 << ", width " << width);
    CHECK(a.left() >= 0);
    CHECK(a.right() < width);
    for (size_t j = i + 1; j < items.size(); ++j) CHECK_FALSE(a.intersects(items[j]->geometry()));
  }
}

}  // namespace

TEST_CASE("flow layout: no overlaps, wrapping, an Ignored-policy label takes the rest", "[flow]") {
  QWidget host;
  auto* flow = new FlowLayout(&host);
  auto* open = new QPushButton(QStringLiteral("Open analysis..."));
  auto* path = new QLabel(QStringLiteral("/a/rather/long/path/to/an/analysis/file/model.h5"));
  path->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);  // its hint is width 0
  path->setMinimumWidth(120);
  auto* metricLabel = new QLabel(QStringLiteral("Metric:"));
  auto* metric = new QPushButton(QStringLiteral("sqnr_db"));
  QWidget* group = flowGroup({metricLabel, metric});
  flow->addWidget(open);
  flow->addWidget(path, 6);
  flow->addWidget(group, 6);
  const std::vector<QWidget*> items = {open, path, group};

  // Wide: one row; the path takes what the others leave.
  host.resize(900, flow->heightForWidth(900));
  flow->activate();
  flow->setGeometry(QRect(0, 0, 900, flow->heightForWidth(900)));
  checkNoOverlap(items, 900);
  CHECK(path->y() < open->geometry().bottom());  // one row (items are centred in it)
  CHECK(path->width() > 120);
  CHECK(group->geometry().right() >= 900 - 6);  // the row is full
  const int oneRow = flow->heightForWidth(900);

  // Narrow: the items wrap onto more rows, still apart, and the height grows with them.
  const int narrow = open->sizeHint().width() + 6 + 150;
  flow->setGeometry(QRect(0, 0, narrow, flow->heightForWidth(narrow)));
  checkNoOverlap(items, narrow);
  CHECK(group->y() > open->y());
  CHECK(path->width() >= 120);
  CHECK(flow->heightForWidth(narrow) > oneRow);
  int bottom = 0;
  for (QWidget* w : items) bottom = std::max(bottom, w->geometry().bottom() + 1);
  CHECK(bottom <= flow->heightForWidth(narrow));
  // The narrowest it asks for is its widest item, never the whole row.
  CHECK(flow->minimumSize().width() < flow->sizeHint().width());
}
