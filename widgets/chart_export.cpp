// Rendering a chart into an image without a window, and writing PNGs atomically.
#include "fp4lab/widgets/chart_export.h"

#include <QBuffer>
#include <QByteArray>
#include <QCoreApplication>
#include <QGraphicsLayout>
#include <QGraphicsScene>
#include <QPainter>
#include <QSaveFile>
#include <QRegularExpression>
#include <QString>
#include <QWidget>

#include "fp4lab/error.h"

namespace fp4lab::widgets {

QImage renderChart(QChart& chart, QSize size) {
  QImage image(size, QImage::Format_ARGB32_Premultiplied);
  image.setDevicePixelRatio(1.0);
  image.fill(Qt::white);
  // A scene without a view: the chart is laid out at exactly `size`, whatever the screen's
  // device pixel ratio. The scene gives the chart back before it is destroyed.
  QGraphicsScene scene;
  scene.addItem(&chart);
  chart.setGeometry(QRectF(QPointF(0, 0), QSizeF(size)));
  if (chart.layout()) chart.layout()->activate();
  // Qt Charts lays out axes and series on posted events.
  QCoreApplication::processEvents();
  {
    QPainter painter(&image);
    painter.setRenderHint(QPainter::Antialiasing);
    painter.setRenderHint(QPainter::TextAntialiasing);
    scene.render(&painter, QRectF(QPointF(0, 0), QSizeF(size)),
                 QRectF(QPointF(0, 0), QSizeF(size)));
  }
  scene.removeItem(&chart);
  return image;
}

void savePngAtomically(const QImage& image, const std::string& path) {
  QByteArray png;
  {
    QBuffer buffer(&png);
    buffer.open(QIODevice::WriteOnly);
    if (image.isNull() || !image.save(&buffer, "PNG"))
      throw Error("cannot encode the chart as PNG", path,
                  "this Qt lacks its PNG image plugin; reinstall the Qt 6 base libraries");
  }
  QSaveFile file(QString::fromStdString(path));
  if (!file.open(QIODevice::WriteOnly))
    throw Error("cannot create the PNG: " + file.errorString().toStdString(), path,
                "check that the folder exists and is writable");
  if (file.write(png) != png.size() || !file.commit())
    throw Error("cannot write the PNG: " + file.errorString().toStdString(), path,
                "check free disk space and permissions; the previous file, if any, is unchanged");
}

QImage renderWidget(QWidget& widget, double scale) {
  QImage image(widget.size() * scale, QImage::Format_ARGB32_Premultiplied);
  image.setDevicePixelRatio(scale);
  image.fill(Qt::white);
  QPainter painter(&image);
  painter.setRenderHint(QPainter::Antialiasing);
  painter.setRenderHint(QPainter::TextAntialiasing);
  widget.render(&painter, QPoint(), QRegion(), QWidget::DrawWindowBackground);
  return image;
}

QString suggestedFileName(const QStringList& parts, const QString& extension) {
  static const QRegularExpression unsafe(QStringLiteral("[^a-z0-9._+]+"));
  QStringList words;
  for (const QString& part : parts) {
    QString w = part.toLower().replace(unsafe, QStringLiteral("-"));
    while (w.startsWith(QLatin1Char('-')) || w.startsWith(QLatin1Char('.'))) w.remove(0, 1);
    while (w.endsWith(QLatin1Char('-'))) w.chop(1);
    if (!w.isEmpty()) words << w;
  }
  QString name = words.join(QLatin1Char('-')).left(80);
  if (name.isEmpty()) name = QStringLiteral("chart");
  return name + QLatin1Char('.') + extension;
}

}  // namespace fp4lab::widgets
