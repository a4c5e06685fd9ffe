// The quantization inspector's heatmap: a matrix of values (rows x columns, row-major, NaN = not
// measured) painted as a QImage in Format_Indexed8 through heatmap_colors.h's 256-entry table,
// one image pixel per cell, scaled with Qt::FastTransformation. Row labels on the left, column
// labels below, a colour bar with its scale and the "not measured" swatch on the right. The wheel
// zooms about the cursor (large maps), a drag pans, a double click resets; hovering shows the row,
// the column and the value; a click emits cellActivated. One paint function draws the screen, the
// PNG and the SVG export; the context menu saves PNG, SVG and CSV (the matrix).
#pragma once

#include <QImage>
#include <QRectF>
#include <QStringList>
#include <QWidget>

#include <vector>

#include "fp4lab/widgets/heatmap_colors.h"

class QFontMetricsF;
class QPainter;

namespace fp4lab::widgets {

class HeatmapWidget : public QWidget {
  Q_OBJECT

 public:
  explicit HeatmapWidget(QWidget* parent = nullptr);

  // values.size() must be rows * cols (row-major). The labels name rows and columns in tooltips,
  // on the axes and in the CSV (fewer labels than rows/cols: numbered). The scale is autoScale()
  // of the values unless setFixedScale was called. Resets the zoom when the shape changes.
  void setData(int rows, int cols, std::vector<float> values, QStringList rowLabels,
               QStringList colLabels, heatmap::ColorMap map = heatmap::ColorMap::Viridis);
  // Shows `text` instead of a map (why there is nothing to draw). Clears the data.
  void setEmptyText(const QString& text);
  void setTitle(const QString& title);
  void setCornerLabels(const QString& rowHeader, const QString& valueName);
  // A fixed colour range instead of the automatic one (RdBu: keep it symmetric); `false` clears.
  void setFixedScale(bool fixed, heatmap::Scale scale = {});

  int rows() const { return m_rows; }
  int cols() const { return m_cols; }
  bool hasData() const { return m_rows > 0 && m_cols > 0; }
  QString emptyText() const { return m_emptyText; }
  QString title() const { return m_title; }
  heatmap::ColorMap colorMap() const { return m_map; }
  heatmap::Scale scale() const { return m_scale; }
  float value(int row, int col) const;
  const QImage& image() const { return m_image; }  // cols x rows, Indexed8

  // The painting, at any size, on any device: the widget, an image, an SVG generator.
  void paint(QPainter& painter, const QSize& size) const;
  QImage render(const QSize& size) const;  // white background, ARGB32
  // Where the cells go when painting at `size`, and the centre of one cell (current zoom).
  QRectF plotArea(const QSize& size) const;
  QPointF cellCentre(int row, int col, const QSize& size) const;
  // The cell under a point of a painting at `size` (row, col), or (-1, -1).
  std::pair<int, int> cellAt(const QPointF& point, const QSize& size) const;
  // What hovering over a cell shows: "row label\ncolumn label\nvalue".
  QString cellText(int row, int col) const;
  // A row label in `width` pixels: whole if it fits, else the module path shortened
  // ("3.self_attn.q_proj" -> "3.attn.q"), else cut in the middle: the layer index at its start is
  // never what goes.
  static QString fitRowLabel(const QString& label, const QFontMetricsF& metrics, double width);
  // A module path without the prefix every layer shares: "model.layers.3.mlp.down_proj" ->
  // "3.mlp.down_proj" (for titles, where the room is short).
  static QString shortModule(const QString& module);
  // Whether column labels are drawn upright (rotated) at `size`: when the widest does not fit its
  // column lying down.
  bool uprightColumnLabels(const QSize& size) const;

  // The visible part in cell coordinates (x: columns, y: rows); the full map when not zoomed.
  QRectF view() const { return m_view; }
  void zoomAt(const QPointF& cell, double factor);  // factor < 1 zooms in
  void resetZoom();

  QString csv() const;  // first column the row label, then one column per column label
  bool savePng(const QString& path, const QSize& size = QSize()) const;
  bool saveSvg(const QString& path, const QSize& size = QSize()) const;

 Q_SIGNALS:
  void cellActivated(int row, int col);

 protected:
  void paintEvent(QPaintEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void mouseReleaseEvent(QMouseEvent* event) override;
  void mouseDoubleClickEvent(QMouseEvent* event) override;
  void wheelEvent(QWheelEvent* event) override;
  void contextMenuEvent(QContextMenuEvent* event) override;

 private:
  QRectF plotAreaWithBottom(const QSize& size, double bottom) const;
  double widestColumnLabel(const QFontMetricsF& metrics) const;
  void rebuildImage();
  void clampView();
  QString rowLabel(int row) const;
  QString colLabel(int col) const;

  int m_rows = 0, m_cols = 0;
  std::vector<float> m_values;
  QStringList m_rowLabels, m_colLabels;
  heatmap::ColorMap m_map = heatmap::ColorMap::Viridis;
  heatmap::Scale m_scale;
  bool m_fixedScale = false;
  QImage m_image;
  QString m_emptyText, m_title, m_rowHeader, m_valueName;
  QRectF m_view;
  QPoint m_pressPos;
  QRectF m_pressView;
  bool m_dragging = false, m_pressed = false;
};

}  // namespace fp4lab::widgets
