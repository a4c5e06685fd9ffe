// The heatmap widget: one Indexed8 image, one paint function for screen, PNG and SVG.
#include "fp4lab/widgets/heatmap_widget.h"

#include "fp4lab/widgets/chart_export.h"

#include <QApplication>
#include <QClipboard>
#include <QContextMenuEvent>
#include <QFileDialog>
#include <QFontMetricsF>
#include <QMenu>
#include <QMouseEvent>
#include <QPainter>
#include <QSaveFile>
#include <QSvgGenerator>
#include <QToolTip>
#include <QWheelEvent>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace fp4lab::widgets {

namespace {

constexpr double kBarWidth = 14, kGap = 8;

QString number(double v) {
  if (!std::isfinite(v)) return QStringLiteral("not measured");
  return QString::number(v, 'g', 4);
}

}  // namespace

HeatmapWidget::HeatmapWidget(QWidget* parent) : QWidget(parent) {
  setMouseTracking(true);
  setMinimumSize(240, 160);
  setFocusPolicy(Qt::StrongFocus);
  setContextMenuPolicy(Qt::DefaultContextMenu);
  setEmptyText(QStringLiteral("No data."));
}

void HeatmapWidget::setData(int rows, int cols, std::vector<float> values, QStringList rowLabels,
                            QStringList colLabels, heatmap::ColorMap map) {
  if (rows <= 0 || cols <= 0 || values.size() != size_t(rows) * size_t(cols)) {
    setEmptyText(QStringLiteral("No data."));
    return;
  }
  const bool sameShape = rows == m_rows && cols == m_cols;
  m_rows = rows;
  m_cols = cols;
  m_values = std::move(values);
  m_rowLabels = std::move(rowLabels);
  m_colLabels = std::move(colLabels);
  m_map = map;
  m_emptyText.clear();
  if (!m_fixedScale) m_scale = heatmap::autoScale(m_values, map);
  rebuildImage();
  if (!sameShape) m_view = QRectF(0, 0, cols, rows);
  setAccessibleDescription(QStringLiteral("%1: %2 rows by %3 columns, colour scale %4 to %5")
                               .arg(m_title.isEmpty() ? QStringLiteral("heatmap") : m_title)
                               .arg(rows)
                               .arg(cols)
                               .arg(number(m_scale.lo), number(m_scale.hi)));
  update();
}

void HeatmapWidget::setEmptyText(const QString& text) {
  m_rows = m_cols = 0;
  m_values.clear();
  m_rowLabels.clear();
  m_colLabels.clear();
  m_image = QImage();
  m_view = QRectF();
  m_emptyText = text;
  setAccessibleDescription(text);
  update();
}

void HeatmapWidget::setTitle(const QString& title) {
  m_title = title;
  update();
}

void HeatmapWidget::setCornerLabels(const QString& rowHeader, const QString& valueName) {
  m_rowHeader = rowHeader;
  m_valueName = valueName;
}

void HeatmapWidget::setFixedScale(bool fixed, heatmap::Scale scale) {
  m_fixedScale = fixed;
  m_scale = fixed ? scale : heatmap::autoScale(m_values, m_map);
  if (hasData()) rebuildImage();
  update();
}

float HeatmapWidget::value(int row, int col) const {
  if (row < 0 || col < 0 || row >= m_rows || col >= m_cols) return NAN;
  return m_values[size_t(row) * size_t(m_cols) + size_t(col)];
}

void HeatmapWidget::rebuildImage() {
  if (m_image.width() != m_cols || m_image.height() != m_rows ||
      m_image.format() != QImage::Format_Indexed8)
    m_image = QImage(m_cols, m_rows, QImage::Format_Indexed8);
  const auto& table = heatmap::colorTable(m_map);
  QVector<QRgb> colors(256);
  for (int i = 0; i < 256; ++i) colors[i] = table[size_t(i)];
  m_image.setColorTable(colors);
  for (int r = 0; r < m_rows; ++r) {
    uchar* line = m_image.scanLine(r);
    const float* v = m_values.data() + size_t(r) * size_t(m_cols);
    for (int c = 0; c < m_cols; ++c) line[c] = heatmap::colorIndex(v[c], m_scale);
  }
}

QString HeatmapWidget::rowLabel(int row) const {
  return row < m_rowLabels.size() ? m_rowLabels[row] : QString::number(row);
}

QString HeatmapWidget::colLabel(int col) const {
  return col < m_colLabels.size() ? m_colLabels[col] : QString::number(col);
}

QString HeatmapWidget::shortModule(const QString& module) {
  for (const char* prefix : {"model.layers.", "model.language_model.layers.", "model."})
    if (module.startsWith(QLatin1String(prefix))) return module.mid(int(std::strlen(prefix)));
  return module;
}

QString HeatmapWidget::fitRowLabel(const QString& label, const QFontMetricsF& fm, double width) {
  if (fm.horizontalAdvance(label) <= width) return label;
  QString s = shortModule(label);
  s.replace(QStringLiteral("self_attn."), QStringLiteral("attn."));
  s.replace(QStringLiteral("block_sparse_moe."), QStringLiteral("moe."));
  s.replace(QStringLiteral("_proj"), QString());
  if (fm.horizontalAdvance(s) <= width) return s;
  // "row 224" -> "224": the number is what tells the rows apart.
  const qsizetype space = s.lastIndexOf(QLatin1Char(' '));
  if (space > 0) {
    bool number = false;
    s.mid(space + 1).toLongLong(&number);
    if (number && fm.horizontalAdvance(s.mid(space + 1)) <= width) return s.mid(space + 1);
  }
  return fm.elidedText(s, Qt::ElideMiddle, width);
}

double HeatmapWidget::widestColumnLabel(const QFontMetricsF& fm) const {
  double widest = 0;
  const int first = std::max(0, int(std::floor(m_view.left())));
  const int last = std::min(m_cols, int(std::ceil(m_view.right())));
  for (int c = first; c < last && c < first + 400; ++c)
    widest = std::max(widest, fm.horizontalAdvance(colLabel(c)));
  return widest;
}

bool HeatmapWidget::uprightColumnLabels(const QSize& size) const {
  if (!hasData()) return false;
  const QFontMetricsF fm(font());
  const QRectF plot = plotAreaWithBottom(size, fm.height() + 10);
  const double cw = plot.width() / m_view.width();
  // Upright only where that shows more of them: a column wider than a line of text.
  return widestColumnLabel(fm) + 10 > cw && cw >= fm.height() + 2;
}

QRectF HeatmapWidget::plotArea(const QSize& size) const {
  const QFontMetricsF fm(font());
  double bottom = fm.height() + 10;
  if (uprightColumnLabels(size))
    bottom = std::min(widestColumnLabel(fm) + 10, std::max(bottom, size.height() * 0.4));
  return plotAreaWithBottom(size, bottom);
}

QRectF HeatmapWidget::plotAreaWithBottom(const QSize& size, double bottom) const {
  const QFontMetricsF fm(font());
  double labelWidth = 0;
  const int first = std::max(0, int(std::floor(m_view.top())));
  const int last = std::min(m_rows, int(std::ceil(m_view.bottom())));
  for (int r = first; r < last && r < first + 400; ++r)
    labelWidth = std::max(labelWidth, fm.horizontalAdvance(rowLabel(r)));
  const double left = std::clamp(labelWidth + kGap, 24.0, size.width() * 0.35);
  const double top = m_title.isEmpty() ? 6 : fm.height() + 10;
  const double right = kGap + kBarWidth + 6 +
                       std::max({fm.horizontalAdvance(QStringLiteral("-0.0000e-00")),
                                 fm.horizontalAdvance(QStringLiteral("not measured")),
                                 fm.horizontalAdvance(m_valueName)}) +
                       6;
  return QRectF(left, top, std::max(1.0, size.width() - left - right),
                std::max(1.0, size.height() - top - bottom));
}

QPointF HeatmapWidget::cellCentre(int row, int col, const QSize& size) const {
  const QRectF plot = plotArea(size);
  const double cw = plot.width() / m_view.width(), ch = plot.height() / m_view.height();
  return {plot.left() + (col + 0.5 - m_view.left()) * cw,
          plot.top() + (row + 0.5 - m_view.top()) * ch};
}

std::pair<int, int> HeatmapWidget::cellAt(const QPointF& point, const QSize& size) const {
  if (!hasData()) return {-1, -1};
  const QRectF plot = plotArea(size);
  if (!plot.contains(point)) return {-1, -1};
  const double x = m_view.left() + (point.x() - plot.left()) / plot.width() * m_view.width();
  const double y = m_view.top() + (point.y() - plot.top()) / plot.height() * m_view.height();
  const int col = int(std::floor(x)), row = int(std::floor(y));
  if (row < 0 || col < 0 || row >= m_rows || col >= m_cols) return {-1, -1};
  return {row, col};
}

QString HeatmapWidget::cellText(int row, int col) const {
  const float v = value(row, col);
  QString valueText = std::isfinite(v) ? number(v) : QStringLiteral("not measured");
  if (!m_valueName.isEmpty()) valueText = m_valueName + QStringLiteral(" = ") + valueText;
  return rowLabel(row) + QLatin1Char('\n') + colLabel(col) + QLatin1Char('\n') + valueText;
}

void HeatmapWidget::paint(QPainter& p, const QSize& size) const {
  p.save();
  p.setFont(font());
  const QFontMetricsF fm(font());
  const QColor text = palette().color(QPalette::WindowText);
  p.setPen(text);
  if (!m_title.isEmpty())
    p.drawText(QRectF(0, 2, size.width(), fm.height() + 6), Qt::AlignHCenter | Qt::AlignVCenter,
               fm.elidedText(m_title, Qt::ElideRight, size.width() - 8));
  if (!hasData()) {
    p.drawText(QRectF(12, 12, size.width() - 24, size.height() - 24),
               Qt::AlignCenter | Qt::TextWordWrap, m_emptyText);
    p.restore();
    return;
  }
  const QRectF plot = plotArea(size);
  p.setRenderHint(QPainter::SmoothPixmapTransform, false);
  p.setRenderHint(QPainter::Antialiasing, false);
  p.drawImage(plot, m_image, m_view);
  p.setPen(QPen(text, 0));
  p.setBrush(Qt::NoBrush);
  p.drawRect(plot);

  // Row labels, every k-th row when the rows are thinner than the text.
  const double ch = plot.height() / m_view.height(), cw = plot.width() / m_view.width();
  const int firstRow = std::max(0, int(std::floor(m_view.top())));
  const int lastRow = std::min(m_rows, int(std::ceil(m_view.bottom())));
  const int rowStep = std::max(1, int(std::ceil(fm.height() / ch)));
  for (int r = firstRow; r < lastRow; r += rowStep) {
    const double y = plot.top() + (r + 0.5 - m_view.top()) * ch;
    if (y < plot.top() || y > plot.bottom()) continue;
    p.drawText(QRectF(0, y - fm.height() / 2, plot.left() - 4, fm.height()),
               Qt::AlignRight | Qt::AlignVCenter, fitRowLabel(rowLabel(r), fm, plot.left() - 6));
  }
  // Column labels below, spaced so they do not overlap, counted from the last column (the newest
  // evaluation, the one the worst-layers list reads, always has its label). Upright where the
  // columns are narrower than their labels.
  const int firstCol = std::max(0, int(std::floor(m_view.left())));
  const int lastCol = std::min(m_cols, int(std::ceil(m_view.right())));
  const bool upright = uprightColumnLabels(size);
  const double room = size.height() - plot.bottom() - 6;
  const double labelWidth = widestColumnLabel(fm);
  const int colStep =
      std::max(1, int(std::ceil(((upright ? fm.height() : labelWidth) + (upright ? 2 : 10)) / cw)));
  double nextRight = 1e9;
  for (int c = lastCol - 1; c >= firstCol; c -= colStep) {
    const double x = plot.left() + (c + 0.5 - m_view.left()) * cw;
    if (x < plot.left() || x > plot.right()) continue;
    if (upright) {
      const QString label = fm.elidedText(colLabel(c), Qt::ElideMiddle, room);
      p.save();
      p.translate(x + fm.ascent() / 2 - 1, plot.bottom() + 4);
      p.rotate(-90);
      p.drawText(QRectF(-room, -fm.ascent(), room, fm.height()), Qt::AlignRight | Qt::AlignTop,
                 label);
      p.restore();
      continue;
    }
    const QString label = colLabel(c);
    const double w = fm.horizontalAdvance(label);
    const double x0 = std::clamp(x - w / 2, plot.left() - 4, plot.right() - w + 4);
    if (x0 + w > nextRight - 6) continue;
    p.drawText(QRectF(x0, plot.bottom() + 3, w + 2, fm.height()), Qt::AlignLeft, label);
    nextRight = x0;
  }

  // The colour bar: index 254 at the top, 0 at the bottom, the scale's ticks, then the NaN swatch.
  const double swatch = fm.height();
  const QRectF bar(plot.right() + kGap, plot.top(), kBarWidth,
                   std::max(10.0, plot.height() - swatch - 8));
  QImage ramp(1, heatmap::kScaleColors, QImage::Format_Indexed8);
  ramp.setColorTable(m_image.colorTable());
  for (int i = 0; i < heatmap::kScaleColors; ++i)
    ramp.scanLine(i)[0] = uchar(heatmap::kScaleColors - 1 - i);
  p.drawImage(bar, ramp);
  p.drawRect(bar);
  const int ticks = bar.height() > 5 * fm.height() ? 5 : 2;
  for (int t = 0; t < ticks; ++t) {
    const double f = double(t) / (ticks - 1);
    const double y = bar.bottom() - f * bar.height();
    const double v = m_scale.lo + f * (m_scale.hi - m_scale.lo);
    p.drawLine(QPointF(bar.right(), y), QPointF(bar.right() + 3, y));
    p.drawText(
        QRectF(bar.right() + 5, y - fm.height() / 2, size.width() - bar.right() - 5, fm.height()),
        Qt::AlignLeft | Qt::AlignVCenter, number(v));
  }
  const QRectF grey(bar.left(), plot.bottom() - swatch, kBarWidth, swatch);
  p.fillRect(grey, QColor::fromRgba(heatmap::kNanColor));
  p.drawRect(grey);
  p.drawText(QRectF(bar.right() + 5, grey.top(), size.width() - bar.right() - 5, swatch),
             Qt::AlignLeft | Qt::AlignVCenter, QStringLiteral("not measured"));
  p.restore();
}

QImage HeatmapWidget::render(const QSize& size) const {
  QImage image(size, QImage::Format_ARGB32_Premultiplied);
  image.fill(Qt::white);
  QPainter p(&image);
  paint(p, size);
  p.end();
  return image;
}

void HeatmapWidget::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), palette().color(QPalette::Base));
  paint(p, size());
}

void HeatmapWidget::clampView() {
  if (!hasData()) return;
  double w = std::clamp(m_view.width(), std::min(1.0, double(m_cols)), double(m_cols));
  double h = std::clamp(m_view.height(), std::min(1.0, double(m_rows)), double(m_rows));
  double x = std::clamp(m_view.left(), 0.0, m_cols - w);
  double y = std::clamp(m_view.top(), 0.0, m_rows - h);
  m_view = QRectF(x, y, w, h);
}

void HeatmapWidget::zoomAt(const QPointF& cell, double factor) {
  if (!hasData()) return;
  const QSizeF old = m_view.size();
  const QSizeF next(std::clamp(old.width() * factor, 1.0, double(m_cols)),
                    std::clamp(old.height() * factor, 1.0, double(m_rows)));
  const double rx = (cell.x() - m_view.left()) / old.width();
  const double ry = (cell.y() - m_view.top()) / old.height();
  m_view = QRectF(cell.x() - rx * next.width(), cell.y() - ry * next.height(), next.width(),
                  next.height());
  clampView();
  update();
}

void HeatmapWidget::resetZoom() {
  m_view = hasData() ? QRectF(0, 0, m_cols, m_rows) : QRectF();
  update();
}

void HeatmapWidget::mousePressEvent(QMouseEvent* event) {
  if (event->button() != Qt::LeftButton) return QWidget::mousePressEvent(event);
  m_pressed = true;
  m_dragging = false;
  m_pressPos = event->position().toPoint();
  m_pressView = m_view;
}

void HeatmapWidget::mouseMoveEvent(QMouseEvent* event) {
  const QPointF pos = event->position();
  if (m_pressed && hasData()) {
    if ((pos.toPoint() - m_pressPos).manhattanLength() > 4) m_dragging = true;
    if (m_dragging) {
      const QRectF plot = plotArea(size());
      const double dx = (pos.x() - m_pressPos.x()) / plot.width() * m_pressView.width();
      const double dy = (pos.y() - m_pressPos.y()) / plot.height() * m_pressView.height();
      m_view = m_pressView.translated(-dx, -dy);
      clampView();
      update();
      return;
    }
  }
  const auto [row, col] = cellAt(pos, size());
  if (row >= 0)
    QToolTip::showText(event->globalPosition().toPoint(), cellText(row, col), this);
  else
    QToolTip::hideText();
}

void HeatmapWidget::mouseReleaseEvent(QMouseEvent* event) {
  if (event->button() != Qt::LeftButton || !m_pressed) return QWidget::mouseReleaseEvent(event);
  m_pressed = false;
  if (m_dragging) {
    m_dragging = false;
    return;
  }
  const auto [row, col] = cellAt(event->position(), size());
  if (row >= 0) Q_EMIT cellActivated(row, col);
}

void HeatmapWidget::mouseDoubleClickEvent(QMouseEvent*) {
  resetZoom();
}

void HeatmapWidget::wheelEvent(QWheelEvent* event) {
  if (!hasData()) return;
  const QRectF plot = plotArea(size());
  const QPointF pos = event->position();
  const QPointF cell(m_view.left() + (pos.x() - plot.left()) / plot.width() * m_view.width(),
                     m_view.top() + (pos.y() - plot.top()) / plot.height() * m_view.height());
  const double steps = event->angleDelta().y() / 120.0;
  if (steps == 0) return;
  zoomAt(cell, std::pow(0.8, steps));
  event->accept();
}

QString HeatmapWidget::csv() const {
  const auto quote = [](QString s) {
    if (s.contains(QLatin1Char(',')) || s.contains(QLatin1Char('"'))) {
      s.replace(QLatin1String("\""), QLatin1String("\"\""));
      s = QLatin1Char('"') + s + QLatin1Char('"');
    }
    return s;
  };
  QString out = quote(m_rowHeader.isEmpty() ? QStringLiteral("row") : m_rowHeader);
  for (int c = 0; c < m_cols; ++c) out += QLatin1Char(',') + quote(colLabel(c));
  out += QLatin1Char('\n');
  for (int r = 0; r < m_rows; ++r) {
    out += quote(rowLabel(r));
    for (int c = 0; c < m_cols; ++c) {
      const float v = value(r, c);
      out += QLatin1Char(',');
      if (std::isfinite(v)) out += QString::number(double(v), 'g', 9);
    }
    out += QLatin1Char('\n');
  }
  return out;
}

bool HeatmapWidget::savePng(const QString& path, const QSize& size) const {
  const QSize s = size.isValid() ? size : QSize(1200, 800);
  return render(s).save(path, "PNG");
}

bool HeatmapWidget::saveSvg(const QString& path, const QSize& size) const {
  const QSize s = size.isValid() ? size : QSize(1200, 800);
  QSvgGenerator svg;
  svg.setFileName(path);
  svg.setSize(s);
  svg.setViewBox(QRect(QPoint(0, 0), s));
  svg.setTitle(m_title);
  QPainter p;
  if (!p.begin(&svg)) return false;
  p.fillRect(QRect(QPoint(0, 0), s), Qt::white);
  paint(p, s);
  return p.end();
}

void HeatmapWidget::contextMenuEvent(QContextMenuEvent* event) {
  QMenu menu(this);
  menu.setObjectName(QStringLiteral("heatmap menu"));
  QAction* png = menu.addAction(QStringLiteral("Save &PNG\u2026"));
  QAction* svg = menu.addAction(QStringLiteral("Save &SVG\u2026"));
  QAction* csvFile = menu.addAction(QStringLiteral("Save C&SV\u2026"));
  QAction* copy = menu.addAction(QStringLiteral("&Copy CSV"));
  menu.addSeparator();
  QAction* reset = menu.addAction(QStringLiteral("&Reset zoom"));
  for (QAction* a : {png, svg, csvFile, copy}) a->setEnabled(hasData());
  QAction* chosen = menu.exec(event->globalPos());
  if (!chosen) return;
  if (chosen == reset) return resetZoom();
  if (chosen == copy) return QApplication::clipboard()->setText(csv());
  const bool isPng = chosen == png, isSvg = chosen == svg;
  const QString filter = isPng   ? QStringLiteral("PNG (*.png)")
                         : isSvg ? QStringLiteral("SVG (*.svg)")
                                 : QStringLiteral("CSV (*.csv)");
  const QString path = QFileDialog::getSaveFileName(
      this, chosen->text(),
      suggestedFileName({accessibleName(), m_title}, isPng   ? QStringLiteral("png")
                                                     : isSvg ? QStringLiteral("svg")
                                                             : QStringLiteral("csv")),
      filter);
  if (path.isEmpty()) return;
  if (isPng) {
    savePng(path, size() * 2);
  } else if (isSvg) {
    saveSvg(path, size());
  } else {
    QSaveFile f(path);
    if (f.open(QIODevice::WriteOnly)) {
      f.write(csv().toUtf8());
      f.commit();
    }
  }
}

}  // namespace fp4lab::widgets
