// The live curve chart.
#include "fp4lab/widgets/curve_panel.h"

#include <QAction>
#include <QApplication>
#include <QAbstractScrollArea>
#include <QCategoryAxis>
#include <QChart>
#include <QChartView>
#include <QClipboard>
#include <QFileDialog>
#include <QGraphicsLayout>
#include <QLabel>
#include <QLegend>
#include <QLegendMarker>
#include <QLineSeries>
#include <QMenu>
#include <QMessageBox>
#include <QMouseEvent>
#include <QPainter>
#include <QRubberBand>
#include <QSaveFile>
#include <QSvgGenerator>
#include <QTimer>
#include <QVBoxLayout>
#include <QValueAxis>
#include <QWheelEvent>

#include <algorithm>
#include <cmath>
#include <limits>

#include "fp4lab/widgets/chart_export.h"
#include "fp4lab/widgets/curve_buckets.h"
#include "fp4lab/widgets/run_charts.h"
#include "fp4lab/widgets/vector_state.h"

namespace fp4lab::widgets {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

QList<QPointF> toQPoints(const Points& points) {
  QList<QPointF> out;
  out.reserve(qsizetype(points.size()));
  for (const auto& [x, y] : points) out.append(QPointF(x, y));
  return out;
}

QString xTitle(XAxis x) {
  switch (x) {
    case XAxis::Tokens:
      return QStringLiteral("tokens seen");
    case XAxis::WallSeconds:
      return QStringLiteral("wall time (s)");
    case XAxis::Step:
      break;
  }
  return QStringLiteral("optimizer step");
}

// Tick and read-out text: plain digits for the thousands of tokens per second, four significant
// digits otherwise.
QString formatY(double v) {
  const double a = std::abs(v);
  if (a >= 1000 && a < 1e7) return QString::number(v, 'f', 0);
  return QString::number(v, 'g', 4);
}

}  // namespace

// What the chart holds of one run: the series that draw it, what they were last handed (a frame
// that would hand them the same points skips replace()), and the run's full curve from the
// worker for the hover read-out and clicks.
struct CurvePanel::RunCurve {
  std::string name;
  std::shared_ptr<const FloatPoints> shown;  // transformed and smoothed; x non-decreasing
  struct Key {
    const RunCurves* source = nullptr;
    double x0 = 0, x1 = 0;
    int buckets = 0;
    bool detail = false, selected = false;
    CurveSettings settings;
    bool operator==(const Key& o) const {
      return source == o.source && x0 == o.x0 && x1 == o.x1 && buckets == o.buckets &&
             detail == o.detail && selected == o.selected && settings == o.settings;
    }
  } drawn;
  double yLo = kInf, yHi = -kInf;  // the drawn line's range inside [x0, x1]
  QLineSeries* line = nullptr;
  QLineSeries* faint = nullptr;  // the raw curve under a smoothed one
  QLineSeries* band = nullptr;   // min/max per bucket, as a zigzag through each bucket's extremes
};

// Mouse handling of the chart: rubber band and wheel zoom on x, hover read-out, click to select,
// context menu.
class CurveChartView : public QChartView {
 public:
  CurveChartView(QChart* chart, CurvePanel* panel) : QChartView(chart), m_panel(panel) {
    setRenderHint(QPainter::Antialiasing, true);
    setMouseTracking(true);
    setRubberBand(QChartView::NoRubberBand);  // our own: Qt's zooms y too and on clicks
  }

 protected:
  void mousePressEvent(QMouseEvent* e) override {
    if (e->button() == Qt::LeftButton) {
      m_origin = e->pos();
      if (!m_band) m_band = new QRubberBand(QRubberBand::Rectangle, viewport());
      m_band->setGeometry(QRect(m_origin, QSize()));
      m_band->show();
      e->accept();
      return;
    }
    QChartView::mousePressEvent(e);
  }
  void mouseMoveEvent(QMouseEvent* e) override {
    if (m_band && m_band->isVisible()) {
      const QRectF plot = chart()->plotArea();
      QRect r = QRect(m_origin, e->pos()).normalized();
      r.setTop(int(plot.top()));
      r.setBottom(int(plot.bottom()));
      m_band->setGeometry(r);
    }
    m_panel->updateReadout(chart()->mapToValue(chart()->mapFromScene(mapToScene(e->pos()))).x());
    QChartView::mouseMoveEvent(e);
  }
  void mouseReleaseEvent(QMouseEvent* e) override {
    if (e->button() != Qt::LeftButton || !m_band || !m_band->isVisible()) {
      QChartView::mouseReleaseEvent(e);
      return;
    }
    m_band->hide();
    const QPointF a = valueAt(m_origin), b = valueAt(e->pos());
    if (std::abs(e->pos().x() - m_origin.x()) > 4) {
      m_panel->setXRange(std::min(a.x(), b.x()), std::max(a.x(), b.x()));
    } else {
      const auto [lo, hi] = yRange();
      const std::string id = m_panel->runNear(b.x(), b.y(), 0.03 * (hi - lo));
      if (!id.empty()) Q_EMIT m_panel->runSelected(id);
    }
    e->accept();
  }
  void wheelEvent(QWheelEvent* e) override {
    const double factor = e->angleDelta().y() > 0 ? 0.8 : 1.25;
    const double x = valueAt(e->position().toPoint()).x();
    const auto [x0, x1] = m_panel->xRange();
    m_panel->setXRange(x - (x - x0) * factor, x + (x1 - x) * factor);
    e->accept();
  }
  void leaveEvent(QEvent* e) override {
    m_panel->m_readout->hide();
    QChartView::leaveEvent(e);
  }
  void contextMenuEvent(QContextMenuEvent* e) override { m_panel->contextMenu(e->globalPos()); }

 private:
  QPointF valueAt(const QPoint& pos) const {
    return chart()->mapToValue(chart()->mapFromScene(mapToScene(pos)));
  }
  std::pair<double, double> yRange() const {
    auto* y = qobject_cast<QValueAxis*>(chart()->axes(Qt::Vertical).value(0));
    return y ? std::make_pair(y->min(), y->max()) : std::make_pair(0.0, 1.0);
  }
  CurvePanel* m_panel;
  QRubberBand* m_band = nullptr;
  QPoint m_origin;
};

CurvePanel::CurvePanel(const std::string& series, const QString& title,
                       std::shared_ptr<CurveWorker> worker, QWidget* parent)
    : QWidget(parent),
      m_series(series),
      m_title(title),
      m_worker(worker ? std::move(worker) : std::make_shared<CurveWorker>()) {
  guardVectorState();
  auto* chart = new QChart;
  chart->setTheme(QChart::ChartThemeLight);
  chart->setAnimationOptions(QChart::NoAnimation);
  chart->setBackgroundRoundness(0);
  chart->setTitle(title);
  // No legend: a panel is a third of a screen wide and nine names do not fit; the colours are the
  // runs table's, and the hover read-out names every run.
  chart->legend()->hide();
  // Reserved margins: a wider tick label must not make the plot area jump.
  chart->setMargins(QMargins(4, 4, 12, 4));
  // Labels of our own on both axes (Qt's value axis elides "100000" to "1000…" when crowded).
  auto* x = new QCategoryAxis;
  x->setLabelsPosition(QCategoryAxis::AxisLabelsPositionOnValue);
  x->setTitleText(xTitle(m_settings.x));
  x->setGridLineColor(QColor(0xdd, 0xdd, 0xdd));
  chart->addAxis(x, Qt::AlignBottom);
  auto* y = new QCategoryAxis;
  y->setLabelsPosition(QCategoryAxis::AxisLabelsPositionOnValue);
  y->setGridLineColor(QColor(0xdd, 0xdd, 0xdd));
  chart->addAxis(y, Qt::AlignLeft);
  m_view = new CurveChartView(chart, this);
  m_view->setObjectName(QString::fromStdString("chart " + series));
  m_view->setAccessibleName(QStringLiteral("%1 chart").arg(title));
  m_view->setToolTip(
      QStringLiteral(
          "%1 of every checked run. Drag to zoom on x, wheel to zoom, click a curve to select its "
          "run; right-click to save PNG/SVG/CSV or reset the zoom (Ctrl+0).")
          .arg(title));
  m_view->setMinimumSize(280, 200);
  m_readout = new QLabel(m_view);
  m_readout->setObjectName(QStringLiteral("hover readout"));
  m_readout->setAccessibleDescription(QStringLiteral("values of the shown runs under the cursor"));
  m_readout->setStyleSheet(QStringLiteral(
      "QLabel { background: rgba(255,255,255,225); border: 1px solid #bbb; padding: 3px; }"));
  m_readout->setAttribute(Qt::WA_TransparentForMouseEvents);
  m_readout->hide();
  // "Validation loss" reads "validation loss" mid-sentence; "KL to the reference" stays.
  QString inSentence = title;
  if (inSentence.size() > 1 && inSentence[1].isLower()) inSentence[0] = inSentence[0].toLower();
  m_emptyText = QStringLiteral("The checked runs have no %1 yet.").arg(inSentence);
  m_empty = new QLabel(m_view);
  m_empty->setObjectName(QStringLiteral("empty chart message"));
  m_empty->setAlignment(Qt::AlignCenter);
  m_empty->setWordWrap(true);
  m_empty->setStyleSheet(
      QStringLiteral("QLabel { color: #555; background: rgba(255,255,255,230); padding: 4px; }"));
  m_empty->setAttribute(Qt::WA_TransparentForMouseEvents);
  m_empty->hide();
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(m_view);
  m_frame = new QTimer(this);
  m_frame->setSingleShot(true);
  m_frame->setInterval(33);
  connect(m_frame, &QTimer::timeout, this, [this] {
    // A panel scrolled out of view waits until it is scrolled back (ChartsPage asks again).
    if (m_dirty && onScreen()) requestFrame();
  });
  // Frames arrive on the worker's thread and are drawn in this one's event loop.
  m_worker->setDelivery(this, [this](std::shared_ptr<const CurveFrame> frame) {
    QMetaObject::invokeMethod(
        this, [this, frame] { applyFrame(frame); }, Qt::QueuedConnection);
  });
}

// Before QObject's destructor drops the frames already posted: none is posted after this.
CurvePanel::~CurvePanel() {
  m_worker->forget(this);
}

QChart* CurvePanel::chart() const {
  return m_view->chart();
}

bool CurvePanel::onScreen() const {
  if (!isVisible()) return false;
  // Inside a scroll area: only when some of it lies in the viewport. (visibleRegion() would say
  // this too, but is empty on platforms without real exposure, such as offscreen.)
  for (const QWidget* w = parentWidget(); w; w = w->parentWidget()) {
    if (const auto* area = qobject_cast<const QAbstractScrollArea*>(w)) {
      const QWidget* viewport = area->viewport();
      const QRect mine(mapTo(viewport, QPoint(0, 0)), size());
      return viewport->rect().intersects(mine);
    }
  }
  return true;
}

void CurvePanel::setFrameDelayMs(int ms) {
  m_frame->setInterval(std::max(1, ms));
}

void CurvePanel::markDirty() {
  m_dirty = true;
  if (isVisible() && !m_frame->isActive()) m_frame->start();
}

void CurvePanel::showEvent(QShowEvent* event) {
  QWidget::showEvent(event);
  if (m_dirty) m_frame->start();
}

void CurvePanel::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  markDirty();  // the buckets follow the plot's width
  placeEmptyMessage();
}

void CurvePanel::setEmptyText(const QString& text) {
  m_emptyText = text;
  placeEmptyMessage();
}

QString CurvePanel::emptyMessage() const {
  if (m_drawnPoints > 0) return {};
  if (m_shown.empty()) return QStringLiteral("No run is checked: check runs in the runs table.");
  return m_emptyText;
}

void CurvePanel::placeEmptyMessage() {
  const QString message = m_applied > 0 ? emptyMessage() : QString();
  // Called with every frame: a live run's frames must not re-announce the label to AT-SPI.
  if (message != m_empty->text()) {
    m_empty->setText(message);
    m_empty->setAccessibleName(message);
  }
  m_empty->setVisible(!message.isEmpty());
  if (message.isEmpty()) return;
  const QRectF plot = chart()->plotArea();
  const int width = std::max(120, int(plot.width()) - 16);
  const int height = m_empty->heightForWidth(width);
  m_empty->setFixedSize(width, height);
  // Centred on the plot; a message taller than the plot starts at its top.
  m_empty->move(int(plot.center().x()) - width / 2,
                std::max(int(plot.top()), int(plot.center().y()) - height / 2));
}

void CurvePanel::setRuns(RunSnapshotsPtr runs, const std::set<std::string>& shown) {
  m_runs = std::move(runs);
  m_shown = shown;
  markDirty();
}

void CurvePanel::setSettings(const CurveSettings& settings) {
  if (settings == m_settings) return;
  const bool newX = settings.x != m_settings.x;
  m_settings = settings;
  if (newX) m_zoomed = false;  // another unit: the old range means nothing
  markDirty();
}

void CurvePanel::setSelectedRun(const std::string& id) {
  if (id == m_selected) return;
  m_selected = id;
  markDirty();
}

void CurvePanel::setXRange(double x0, double x1) {
  if (!(x1 > x0) || !std::isfinite(x0) || !std::isfinite(x1)) return;
  m_x0 = x0, m_x1 = x1;
  m_zoomed = true;
  markDirty();
  Q_EMIT zoomChanged();
}

void CurvePanel::resetZoom() {
  m_zoomed = false;
  markDirty();
  Q_EMIT zoomChanged();
}

bool CurvePanel::hasData() const {
  for (const auto& [id, c] : m_curves)
    if (c->shown && !c->shown->empty()) return true;
  return false;
}

uint64_t CurvePanel::requestFrame() {
  CurveRequest r;
  r.series = m_series;
  r.runs = m_runs;
  r.shown = m_shown;
  r.selected = m_selected;
  r.settings = m_settings;
  r.follow = !m_zoomed;
  r.x0 = m_x0, r.x1 = m_x1;
  const QRectF plot = chart()->plotArea();
  r.plotWidth = plot.width() > 0 ? int(plot.width()) : 600;
  m_dirty = false;
  return m_worker->submit(this, std::move(r));
}

int CurvePanel::redrawNow() {
  const std::shared_ptr<const CurveFrame> frame = m_worker->wait(this, requestFrame());
  if (frame) applyFrame(frame);
  return m_drawnPoints;
}

void CurvePanel::applyFrame(const std::shared_ptr<const CurveFrame>& frame) {
  // Frames come in order; one already drawn by redrawNow() arrives again by the event loop.
  if (frame->generation <= m_applied) return;
  m_applied = frame->generation;
  clearUpperVectorState();  // when called outside an event (redrawNow)
  QChart* ch = chart();
  auto* xAxis = qobject_cast<QCategoryAxis*>(ch->axes(Qt::Horizontal).value(0));
  auto* yAxis = qobject_cast<QCategoryAxis*>(ch->axes(Qt::Vertical).value(0));
  xAxis->setTitleText(xTitle(frame->settings.x));
  // A zoom asked for after this frame's request keeps its own range (a newer frame follows).
  if (!m_zoomed) m_x0 = frame->x0, m_x1 = frame->x1;
  const auto drop = [&](QLineSeries*& s) {
    if (!s) return;
    ch->removeSeries(s);
    delete s;
    s = nullptr;
  };
  // Runs no longer shown.
  std::set<std::string> ids;
  for (const CurveFrame::Run& r : frame->runs) ids.insert(r.id);
  for (auto it = m_curves.begin(); it != m_curves.end();) {
    if (ids.count(it->first)) {
      ++it;
      continue;
    }
    drop(it->second->line), drop(it->second->faint), drop(it->second->band);
    it = m_curves.erase(it);
  }
  // Qt Charts recomputes a series' geometry (and the stroked outline it hit-tests with, the
  // costliest part) on every replace() and on every axis range change. So the series that change
  // are emptied first, the axes set, and only then are the new points handed over: each series'
  // geometry is computed once per frame instead of once per change.
  struct Change {
    RunCurve* curve;
    const CurveFrame::Run* run;
  };
  std::vector<Change> changes;
  double yLo = kInf, yHi = -kInf;
  for (const CurveFrame::Run& r : frame->runs) {
    auto& c = m_curves[r.id];
    if (!c) c = std::make_unique<RunCurve>();
    c->name = r.name;
    c->shown = r.shown;
    const RunCurve::Key key{r.source.get(), frame->x0,  frame->x1,      frame->buckets,
                            r.detail,       r.selected, frame->settings};
    if (!c->line || !(key == c->drawn)) {  // else its series stay as they are
      c->drawn = key;
      c->yLo = r.yLo, c->yHi = r.yHi;
      changes.push_back({c.get(), &r});
      for (QLineSeries* s : {c->line, c->faint, c->band})
        if (s) s->clear();
    }
    yLo = std::min(yLo, c->yLo), yHi = std::max(yHi, c->yHi);
  }
  // While following the data, round numbers at the ends; a zoom shows exactly what was chosen.
  // Compact labels ("250k", "1.2M"), as many as fit at about 80 px each.
  {
    int fit = std::clamp(int(ch->plotArea().width() / 80), 2, 8);
    double lo = m_x0, hi = m_x1, step = 1;
    // Steps and tokens are whole numbers: no tick between two of them, no negative ones around
    // a single point (a PTQ run's one evaluation at step 0).
    const bool whole = frame->settings.x != XAxis::WallSeconds;
    if (!(lo < hi)) lo -= 1, hi += 1;
    if (whole && m_x0 >= 0 && lo < 0) hi -= lo, lo = 0;
    if (whole) fit = std::max(1, std::min(fit, int(std::floor(hi - lo))));
    std::vector<std::pair<double, std::string>> labels =
        detail::linearAxisLabels(lo, hi, fit, &step);
    if (!m_zoomed) {
      lo = std::floor(lo / step + 1e-9) * step, hi = std::ceil(hi / step - 1e-9) * step;
      if (!(lo < hi)) hi = lo + step;
      labels = detail::linearAxisLabels(lo, hi, fit);
    }
    if (lo != m_xLo || hi != m_xHi || fit != m_xLabels) {
      m_xLo = lo, m_xHi = hi, m_xLabels = fit;
      for (const QString& label : xAxis->categoriesLabels()) xAxis->remove(label);
      xAxis->setStartValue(lo);
      for (const auto& [value, text] : labels) xAxis->append(QString::fromStdString(text), value);
      xAxis->setRange(lo, hi);
    }
  }
  const bool logY = frame->settings.logY;
  if (!logY && m_boundLo <= m_boundHi)  // bounded values: the axis spans the bounds
    yLo = std::min(yLo, m_boundLo), yHi = std::max(yHi, m_boundHi);
  if (!(yLo <= yHi)) yLo = logY ? -1 : 0, yHi = logY ? 0 : 1;
  const double span = yHi - yLo;
  const double pad = span > 0 ? 0.05 * span : 0.05 * std::max(1e-3, std::abs(yHi));
  const double lo = yLo - pad, hi = yHi + pad;
  // The labels change only when the range does (a new label set relayouts the axis).
  const int labels = std::clamp(int(ch->plotArea().height() / 40), 2, 8);
  if (lo != m_yLo || hi != m_yHi || labels != m_yLabels || logY != m_yLog) {
    m_yLo = lo, m_yHi = hi, m_yLabels = labels, m_yLog = logY;
    for (const QString& label : yAxis->categoriesLabels()) yAxis->remove(label);
    yAxis->setStartValue(lo);
    if (logY) {
      std::vector<double> values =
          detail::logAxisLabels(std::pow(10.0, lo), std::pow(10.0, hi), labels);
      // A range too narrow for the log ladders gets evenly spaced values, possibly more than fit.
      const size_t every = (values.size() + size_t(labels) - 1) / size_t(labels);
      for (size_t i = 0; i < values.size(); i += std::max<size_t>(1, every))
        yAxis->append(formatY(values[i]), std::log10(values[i]));
    } else {
      const double rough = (hi - lo) / labels, mag = std::pow(10.0, std::floor(std::log10(rough)));
      const double step = rough / mag >= 5 ? 5 * mag : rough / mag >= 2 ? 2 * mag : mag;
      for (double k = std::ceil(lo / step); k * step <= hi; ++k)
        yAxis->append(formatY(k * step), k * step);
    }
    yAxis->setRange(lo, hi);
    // Qt sizes the axis for the labels it had at the last layout and elides wider new ones: lay
    // the chart out again when the widest label changes (not on every frame, so the plot area
    // does not jump while a run grows).
    int widest = 0;
    for (const QString& label : yAxis->categoriesLabels())
      widest = std::max(widest, int(label.size()));
    if (widest != m_labelChars) {
      m_labelChars = widest;
      ch->layout()->invalidate();
    }
  }
  // The new points.
  const auto addSeries = [&](QLineSeries* s, bool inLegend) {
    ch->addSeries(s);
    s->attachAxis(xAxis);
    s->attachAxis(yAxis);
    for (QLegendMarker* m : ch->legend()->markers(s)) m->setVisible(inLegend);
  };
  const auto hand = [&](QLineSeries*& s, const Points& points, const QPen& pen, bool inLegend) {
    if (points.empty()) return drop(s);
    if (!s) s = new QLineSeries, addSeries(s, inLegend);
    s->setPen(pen);
    s->replace(toQPoints(points));
  };
  // Colour-blind-safe palettes stop near eight colours: the ninth run on and its neighbours in
  // colour get dash patterns too.
  std::map<std::string, Qt::PenStyle> styles;
  for (size_t i = 0; i < frame->runs.size(); ++i) {
    static const Qt::PenStyle past8[] = {Qt::DashLine, Qt::DotLine, Qt::DashDotLine};
    styles[frame->runs[i].id] = i < 8 ? Qt::SolidLine : past8[(i - 8) % 3];
  }
  for (const CurveFrame::Run& r : frame->runs) {  // a run whose place changed, not its points
    RunCurve* c = m_curves[r.id].get();
    if (c && c->line && c->line->pen().style() != styles[r.id]) {
      QPen pen = c->line->pen();
      pen.setStyle(styles[r.id]);
      c->line->setPen(pen);
    }
  }
  for (const auto& [c, r] : changes) {
    const QColor colour = runColour(r->name);
    QPen pen(colour);
    pen.setWidthF(r->selected ? 3.0 : 1.6);
    pen.setStyle(styles[r->id]);
    QColor faint = colour, fill = colour;
    faint.setAlpha(80);
    fill.setAlpha(55);
    hand(c->band, r->band, QPen(fill, 1.0), false);
    hand(c->faint, r->faint, QPen(faint, 1.0), false);
    if (!c->line) c->line = new QLineSeries, addSeries(c->line, true);
    c->line->setName(QString::fromStdString(r->name));
    c->line->setPen(pen);
    // A lone point (PTQ's one evaluation) is a dot big enough to see.
    c->line->setPointsVisible(r->line.size() == 1);
    c->line->setMarkerSize(r->line.size() == 1 ? 10 : 5);
    c->line->replace(toQPoints(r->line));
  }
  int points = 0;
  for (const auto& [id, c] : m_curves)
    for (QLineSeries* s : {c->line, c->faint, c->band})
      if (s) points += int(s->count());
  m_drawnPoints = points;
  placeEmptyMessage();
  // A cheaper painter for many points: antialiasing doubles Qt Charts' paint time.
  m_view->setRenderHint(QPainter::Antialiasing, points <= 2500);
  QStringList names;
  for (const auto& [id, c] : m_curves) names << QString::fromStdString(c->name);
  m_view->setAccessibleDescription(QStringLiteral("%1 of %2 runs: %3")
                                       .arg(m_title)
                                       .arg(m_curves.size())
                                       .arg(names.join(QStringLiteral(", "))));
}

double CurvePanel::valueOf(const RunCurve& c, double x) const {
  if (!c.shown || c.shown->empty()) return NAN;
  // A run that ended before x has no value there: its last one stands for x only within one of
  // its own intervals between points (or 2% of the axis, for a lone point: PTQ's evaluation).
  const FloatPoints& p = *c.shown;
  const double first = double(p.front().first), last = double(p.back().first);
  const double interval = p.size() > 1 ? (last - first) / double(p.size() - 1) : 0;
  if (x > last + std::max(interval, 0.02 * (m_x1 - m_x0))) return NAN;
  return valueAt(p, x);
}

QString CurvePanel::readoutAt(double x) const {
  QStringList lines;
  for (const auto& [id, c] : m_curves) {
    const double v = valueOf(*c, x);
    if (!std::isfinite(v)) continue;
    lines << QStringLiteral("%1: %2").arg(QString::fromStdString(c->name),
                                          formatY(c->drawn.settings.logY ? std::pow(10.0, v) : v));
  }
  return lines.join(QLatin1Char('\n'));
}

std::string CurvePanel::runNear(double x, double y, double tolerance) const {
  std::string best;
  double bestDistance = tolerance;
  for (const auto& [id, c] : m_curves) {
    const double v = valueOf(*c, x);
    if (std::isfinite(v) && std::abs(v - y) <= bestDistance)
      bestDistance = std::abs(v - y), best = id;
  }
  return best;
}

void CurvePanel::updateReadout(double x) {
  const QString text = readoutAt(x);
  if (text.isEmpty() || !std::isfinite(x)) {
    m_readout->hide();
    return;
  }
  QString header;
  switch (m_settings.x) {
    case XAxis::Step:
      header = QStringLiteral("step %1").arg(qint64(std::floor(x)));
      break;
    case XAxis::Tokens:
      header = QStringLiteral("%1 tokens").arg(qint64(std::floor(x)));
      break;
    case XAxis::WallSeconds:
      header = QStringLiteral("%1 s").arg(x, 0, 'f', 1);
      break;
  }
  m_readout->setText(header + QLatin1Char('\n') + text);
  m_readout->adjustSize();
  const QRectF plot = chart()->plotArea();
  m_readout->move(int(plot.left()) + 8, int(plot.top()) + 8);
  m_readout->show();
  m_readout->raise();
}

bool CurvePanel::savePng(const QString& path, QString* error, double scale) const {
  try {
    savePngAtomically(renderWidget(*m_view, scale), path.toStdString());
  } catch (const std::exception& e) {
    if (error) *error = QString::fromUtf8(e.what());
    return false;
  }
  return true;
}

QString CurvePanel::suggestedName(const QString& extension) const {
  QStringList parts{m_title};
  // The runs drawn: one by name, or how many.
  if (m_curves.size() == 1)
    parts << QString::fromStdString(m_curves.begin()->second->name);
  else if (!m_curves.empty())
    parts << QStringLiteral("%1 runs").arg(m_curves.size());
  return suggestedFileName(parts, extension);
}

bool CurvePanel::saveSvg(const QString& path, QString* error) const {
  QSaveFile file(path);
  if (!file.open(QIODevice::WriteOnly)) {
    if (error) *error = QStringLiteral("cannot write %1: %2").arg(path, file.errorString());
    return false;
  }
  {
    QSvgGenerator svg;
    svg.setOutputDevice(&file);
    svg.setSize(m_view->size());
    svg.setViewBox(QRect(QPoint(0, 0), m_view->size()));
    svg.setTitle(m_title);
    QPainter painter(&svg);
    m_view->render(&painter);
  }
  if (!file.commit()) {
    if (error) *error = QStringLiteral("cannot write %1: %2").arg(path, file.errorString());
    return false;
  }
  return true;
}

QString CurvePanel::csv() const {
  const char* xName = m_settings.x == XAxis::Step     ? "step"
                      : m_settings.x == XAxis::Tokens ? "tokens"
                                                      : "wall_s";
  QString out =
      QStringLiteral("run,%1,%2\n").arg(QLatin1String(xName), QString::fromStdString(m_series));
  if (!m_runs) return out;
  for (const RunSnapshot& run : *m_runs) {
    if (!m_shown.count(run.id) || !run.curves) continue;
    // The full data as logged, not what is drawn.
    for (const auto& [x, y] : run.curves->series(m_series, m_settings.x))
      out += QStringLiteral("%1,%2,%3\n")
                 .arg(QString::fromStdString(run.name))
                 .arg(x, 0, 'g', 17)
                 .arg(y, 0, 'g', 9);
  }
  return out;
}

void CurvePanel::contextMenu(const QPoint& global) {
  // The hover read-out belongs to the cursor, which is on the menu now (and a file dialog next).
  m_readout->hide();
  QMenu menu(this);
  const auto report = [this](const QString& error) {
    QMessageBox::warning(this, QStringLiteral("Save chart"), error);
  };
  menu.addAction(QStringLiteral("Save as &PNG (2x)\u2026"), this, [this, report] {
    const QString path = QFileDialog::getSaveFileName(this, QStringLiteral("Save chart"),
                                                      suggestedName(QStringLiteral("png")),
                                                      QStringLiteral("PNG (*.png)"));
    QString error;
    if (!path.isEmpty() && !savePng(path, &error)) report(error);
  });
  menu.addAction(QStringLiteral("Save as &SVG\u2026"), this, [this, report] {
    const QString path = QFileDialog::getSaveFileName(this, QStringLiteral("Save chart"),
                                                      suggestedName(QStringLiteral("svg")),
                                                      QStringLiteral("SVG (*.svg)"));
    QString error;
    if (!path.isEmpty() && !saveSvg(path, &error)) report(error);
  });
  menu.addAction(QStringLiteral("Save data as &CSV\u2026"), this, [this] {
    const QString path = QFileDialog::getSaveFileName(this, QStringLiteral("Save data"),
                                                      suggestedName(QStringLiteral("csv")),
                                                      QStringLiteral("CSV (*.csv)"));
    if (path.isEmpty()) return;
    QSaveFile file(path);
    if (file.open(QIODevice::WriteOnly)) file.write(csv().toUtf8()), file.commit();
  });
  menu.addAction(QStringLiteral("&Copy image"), this,
                 [this] { QApplication::clipboard()->setImage(renderWidget(*m_view)); });
  menu.addAction(QStringLiteral("Copy data as CSV"), this,
                 [this] { QApplication::clipboard()->setText(csv()); });
  menu.addSeparator();
  QAction* reset = menu.addAction(QStringLiteral("&Reset zoom"), this, &CurvePanel::resetZoom);
  reset->setEnabled(m_zoomed);
  menu.exec(global);
}

}  // namespace fp4lab::widgets
