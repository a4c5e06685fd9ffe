// The size/accuracy frontier chart and the sensitivity file it draws.
#include "fp4lab/widgets/frontier_chart.h"

#include <QChart>
#include <QChartView>
#include <QLabel>
#include <QLegend>
#include <QLineSeries>
#include <QPen>
#include <QScatterSeries>
#include <QCursor>
#include <QToolTip>
#include <QVBoxLayout>
#include <QValueAxis>

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>

#include "fp4lab/analyze/sensitivity_file.h"

namespace fp4lab::widgets {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

}  // namespace

bool readSensitivityFile(const QString& path, SensitivityFile* out, QString* error) {
  analyze::SensitivityFile f;
  try {
    f = analyze::readSensitivityFile(path.toStdString());
  } catch (const std::exception& e) {
    if (error) *error = QString::fromUtf8(e.what());
    return false;
  }
  SensitivityFile s;
  s.model = QString::fromStdString(f.model);
  s.format = QString::fromStdString(f.format);
  s.formatName = QString::fromStdString(f.formatName);
  s.bf16Loss = f.bf16Loss;
  s.bf16Bytes = f.bf16Bytes;
  s.ptqLoss = f.ptqLoss;
  s.ptqBytes = f.ptqBytes;
  s.chosenKeep = f.chosenKeep;
  for (const auto& p : f.plans) {
    SensitivityPlanPoint point;
    point.keep = p.keep;
    point.bytes = p.bytes;
    point.loss = p.loss;
    point.kl = p.kl;
    for (const auto& k : p.kept) point.kept << QString::fromStdString(k);
    s.plans.push_back(std::move(point));
  }
  std::sort(s.plans.begin(), s.plans.end(),
            [](const auto& a, const auto& b) { return a.keep < b.keep; });
  *out = std::move(s);
  return true;
}

FrontierChart::FrontierChart(QWidget* parent) : QWidget(parent) {
  auto* chart = new QChart;
  chart->setTheme(QChart::ChartThemeLight);
  chart->setAnimationOptions(QChart::NoAnimation);
  chart->setBackgroundRoundness(0);
  chart->setMargins(QMargins(4, 4, 12, 4));
  // No legend (the panel is small): the title says what the marks are.
  chart->legend()->hide();
  m_view = new QChartView(chart);
  m_view->setObjectName(QStringLiteral("frontier chart"));
  m_view->setAccessibleName(QStringLiteral("size/accuracy frontier"));
  m_view->setToolTip(QStringLiteral(
      "each plan of fp4lab sensitivity: keep the k most sensitive layers in BF16; model size "
      "against validation loss. Hover a point for its plan."));
  m_view->setRenderHint(QPainter::Antialiasing, true);
  m_view->setMinimumHeight(180);
  m_empty = new QLabel(QStringLiteral(
      "Open a sensitivity file (fp4lab sensitivity MODEL --data FILE --output FILE.h5) to see "
      "the size/accuracy frontier."));
  m_empty->setWordWrap(true);
  m_empty->setAccessibleDescription(QStringLiteral("frontier chart status"));
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(m_view, 1);
  layout->addWidget(m_empty);
  clear();
}

void FrontierChart::clear() {
  m_file = SensitivityFile{};
  m_view->chart()->removeAllSeries();
  for (QAbstractAxis* a : m_view->chart()->axes()) {
    m_view->chart()->removeAxis(a);
    delete a;
  }
  m_view->hide();
  m_empty->show();
}

QPointF FrontierChart::chosenPoint() const {
  for (const auto& p : m_file.plans)
    if (p.keep == m_file.chosenKeep && std::isfinite(p.loss)) return {p.bytes / kMiB, p.loss};
  return {NAN, NAN};
}

void FrontierChart::setFile(const SensitivityFile& file) {
  clear();
  m_file = file;
  QChart* chart = m_view->chart();
  chart->setTitle(QStringLiteral("Frontier (%1): dashed BF16, orange the chosen plan")
                      .arg(file.formatName.isEmpty() ? file.format : file.formatName));
  auto* line = new QLineSeries;
  line->setName(QStringLiteral("keep k layers in BF16"));
  line->setPen(QPen(QColor(0x00, 0x72, 0xb2), 1.6));
  auto* points = new QScatterSeries;
  points->setName(QStringLiteral("measured plans"));
  points->setMarkerSize(7);
  points->setColor(QColor(0x00, 0x72, 0xb2));
  points->setBorderColor(QColor(0x00, 0x72, 0xb2));
  auto* chosen = new QScatterSeries;
  chosen->setName(QStringLiteral("chosen plan"));
  chosen->setMarkerSize(14);
  chosen->setColor(QColor(0xe6, 0x9f, 0x00));
  chosen->setBorderColor(Qt::black);
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const auto& p : file.plans) {
    if (!std::isfinite(p.loss)) continue;
    const QPointF at(p.bytes / kMiB, p.loss);
    line->append(at);
    points->append(at);
    if (p.keep == file.chosenKeep) chosen->append(at);
    x0 = std::min(x0, at.x()), x1 = std::max(x1, at.x());
    y0 = std::min(y0, at.y()), y1 = std::max(y1, at.y());
  }
  if (!(x0 <= x1)) {
    m_empty->setText(QStringLiteral("The sensitivity file has no measured plan."));
    return;
  }
  y0 = std::min(y0, file.bf16Loss), y1 = std::max(y1, file.bf16Loss);
  auto* bf16 = new QLineSeries;
  bf16->setName(QStringLiteral("BF16 loss"));
  QPen dashed(QColor(0x55, 0x55, 0x55), 1.0, Qt::DashLine);
  bf16->setPen(dashed);
  bf16->append(x0, file.bf16Loss);
  bf16->append(x1, file.bf16Loss);
  for (QAbstractSeries* s : std::initializer_list<QAbstractSeries*>{bf16, line, points, chosen})
    chart->addSeries(s);
  auto* x = new QValueAxis;
  x->setTitleText(QStringLiteral("size (MiB)"));
  x->setLabelFormat(QStringLiteral("%.3g"));
  x->setTickCount(4);
  auto* y = new QValueAxis;
  y->setTitleText(QStringLiteral("loss"));
  y->setLabelFormat(QStringLiteral("%.4g"));
  y->setTickCount(4);
  // Room for the chosen plan's larger marker at the ends.
  const double padX = x1 > x0 ? 0.06 * (x1 - x0) : 0.5, padY = y1 > y0 ? 0.15 * (y1 - y0) : 0.01;
  x->setRange(x0 - padX, x1 + padX);
  y->setRange(y0 - padY, y1 + padY);
  chart->addAxis(x, Qt::AlignBottom);
  chart->addAxis(y, Qt::AlignLeft);
  for (QAbstractSeries* s : chart->series()) s->attachAxis(x), s->attachAxis(y);
  const auto describe = [this](const QPointF& at, bool state) {
    if (!state) return QToolTip::hideText();
    for (const auto& p : m_file.plans) {
      if (std::abs(p.bytes / kMiB - at.x()) > 1e-9 || std::abs(p.loss - at.y()) > 1e-12) continue;
      QString text = QStringLiteral("keep %1 in BF16: %2 MiB, loss %3")
                         .arg(p.keep)
                         .arg(p.bytes / kMiB, 0, 'f', 3)
                         .arg(p.loss, 0, 'g', 6);
      if (std::isfinite(p.kl)) text += QStringLiteral(", KL %1").arg(p.kl, 0, 'g', 4);
      if (!p.kept.isEmpty())
        text += QStringLiteral("\nkept: %1").arg(p.kept.mid(0, 6).join(QStringLiteral(", ")));
      if (p.kept.size() > 6) text += QStringLiteral(", \u2026");
      QToolTip::showText(QCursor::pos(), text, m_view);
      return;
    }
  };
  connect(points, &QScatterSeries::hovered, this, describe);
  connect(chosen, &QScatterSeries::hovered, this, describe);
  m_view->setAccessibleDescription(QStringLiteral("%1 plans from %2 MiB to %3 MiB; BF16 loss %4")
                                       .arg(points->count())
                                       .arg(x0, 0, 'f', 2)
                                       .arg(x1, 0, 'f', 2)
                                       .arg(file.bf16Loss, 0, 'g', 5));
  m_empty->hide();
  m_view->show();
}

}  // namespace fp4lab::widgets
