// Charts to image files: render a chart at a fixed pixel size (no window, any Qt platform) and
// write PNGs atomically. Used by the experiment's plots and the window's "Save as PNG".
#pragma once

#include <QChart>
#include <QImage>
#include <QSize>
#include <QString>
#include <QStringList>

class QWidget;

#include <string>

namespace fp4lab::widgets {

// The size of a saved chart: readable in a report or on a slide.
constexpr int kPlotWidth = 1200, kPlotHeight = 700;

// Lays the chart out at `size` (device pixels, ratio 1) and paints it on a white image. The chart
// keeps that geometry afterwards, so chart.plotArea() is where the data went in the image. Needs a
// QApplication (ensureApplication()).
QImage renderChart(QChart& chart, QSize size = QSize(kPlotWidth, kPlotHeight));

// Encodes `image` as PNG and writes it under a temporary name in the same folder, then renames it
// over `path` (QSaveFile): `path` holds either its old content or the complete new image, never a
// partial one. Throws fp4lab::Error naming the file.
void savePngAtomically(const QImage& image, const std::string& path);

// The window's "Save as PNG": `widget` as it is on screen, without its child widgets (a hover
// read-out, an overlay message), at `scale` times its size in logical pixels, painted at that
// resolution (not an enlarged screen grab), so it is as sharp on a HiDPI screen as on any other.
constexpr double kExportScale = 2.0;
QImage renderWidget(QWidget& widget, double scale = kExportScale);

// A file name for a saved chart or table from its parts ("Validation loss", "qat-nvfp4"):
// lower case, words joined by '-', nothing a file system or a shell would trip over, at most 80
// characters, then `extension` ("png").
QString suggestedFileName(const QStringList& parts, const QString& extension);

}  // namespace fp4lab::widgets
