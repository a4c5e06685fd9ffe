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

#include "fp4lab/widgets/curve_buckets.h"
#include "fp4lab/widgets/run_charts.h"

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

// What one shown run contributes: its points (log10 when the axis is log), smoothed, in single
// precision, and the series that draw it. The raw points are kept only for runs drawn in detail
// (their faint raw curve and min/max band): the selected run, or every run when few are shown.
struct CurvePanel::RunCurve {
  std::shared_ptr<const RunCurves> source;  // the curves the cache was built from
  CurveSettings settings;
  std::string name;
  FloatPoints shown;  // transformed and smoothed; x non-decreasing
  FloatPoints raw;    // transformed, not smoothed; empty unless drawn in detail with smoothing
  bool rawBuilt = false;
  // What the series hold now: a frame that would hand them the same points skips replace().
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

CurvePanel::CurvePanel(const std::string& series, const QString& title, QWidget* parent)
    : QWidget(parent), m_series(series), m_title(title) {
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
  auto* x = new QValueAxis;
  x->setLabelFormat(QStringLiteral("%.6g"));
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
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(m_view);
  m_frame = new QTimer(this);
  m_frame->setSingleShot(true);
  m_frame->setInterval(33);
  connect(m_frame, &QTimer::timeout, this, [this] {
    // A panel scrolled out of view waits until it is scrolled back (ChartsPage asks again).
    if (m_dirty && onScreen()) redrawNow();
  });
}

CurvePanel::~CurvePanel() = default;

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
}

void CurvePanel::setRuns(RunSnapshotsPtr runs, const std::set<std::string>& shown) {
  m_runs = std::move(runs);
  m_shown = shown;
  m_cacheDirty = true;
  markDirty();
}

void CurvePanel::setSettings(const CurveSettings& settings) {
  if (settings == m_settings) return;
  const bool newX = settings.x != m_settings.x;
  m_settings = settings;
  if (newX) m_zoomed = false;  // another unit: the old range means nothing
  m_cacheDirty = true;
  markDirty();
}

void CurvePanel::setSelectedRun(const std::string& id) {
  if (id == m_selected) return;
  m_selected = id;
  m_cacheDirty = true;  // the selected run is drawn in detail (its raw points)
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
    if (!c->shown.empty()) return true;
  return false;
}

namespace {

// A run's series in the chart's units: x as chosen, sorted (wall time and tokens may step back
// across a resume), log10 of the positive values on a log axis.
Points chartPoints(const RunCurves& curves, const std::string& series, const CurveSettings& s) {
  Points raw = curves.series(series, s.x);
  const auto byX = [](const auto& a, const auto& b) { return a.first < b.first; };
  if (!std::is_sorted(raw.begin(), raw.end(), byX)) std::stable_sort(raw.begin(), raw.end(), byX);
  if (s.logY) {
    Points positive;
    positive.reserve(raw.size());
    for (const auto& [x, y] : raw)
      if (y > 0) positive.emplace_back(x, std::log10(y));
    raw = std::move(positive);
  }
  return raw;
}

FloatPoints toFloat(const Points& p) {
  FloatPoints out;
  out.reserve(p.size());
  for (const auto& [x, y] : p) out.emplace_back(float(x), float(y));
  return out;
}

bool smoothed(const CurveSettings& s) {
  return s.smoothing > 0 || s.movingAverage > 1;
}

}  // namespace

bool CurvePanel::inDetail(const std::string& id) const {
  return id == m_selected || m_curves.size() <= kDetailedRuns;
}

void CurvePanel::rebuildCache() {
  // At most about this many points are transformed per frame, so 20 runs of 100 000 steps load
  // over a few frames instead of stalling the GUI thread for one long one.
  constexpr size_t kPointsPerFrame = 100000;
  size_t budget = kPointsPerFrame;
  bool pending = false;
  std::set<std::string> keep;
  if (m_runs) {
    for (const RunSnapshot& run : *m_runs) {
      if (!m_shown.count(run.id) || !run.curves) continue;
      keep.insert(run.id);
      auto& c = m_curves[run.id];
      if (!c) c = std::make_unique<RunCurve>();
      c->name = run.name;
      const bool stale = c->source != run.curves || c->settings != m_settings;
      const bool needRaw = smoothed(m_settings) && inDetail(run.id) && !c->rawBuilt;
      if (!stale && !needRaw) continue;
      if (budget == 0) {
        pending = true;
        continue;
      }
      const Points raw = chartPoints(*run.curves, m_series, m_settings);
      budget -= std::min(budget, raw.size());
      if (stale) {
        c->source = run.curves;
        c->settings = m_settings;
        c->shown = toFloat(smoothCurve(raw, m_settings.smoothing, m_settings.movingAverage));
        c->raw.clear();
        c->rawBuilt = false;
      }
      if (smoothed(m_settings) && inDetail(run.id)) {
        c->raw = toFloat(raw);
        c->rawBuilt = true;
      } else if (!inDetail(run.id) && c->rawBuilt) {
        c->raw.clear();
        c->raw.shrink_to_fit();
        c->rawBuilt = false;
      }
    }
  }
  m_cacheDirty = pending;
  QChart* ch = chart();
  for (auto it = m_curves.begin(); it != m_curves.end();) {
    if (keep.count(it->first)) {
      ++it;
      continue;
    }
    for (QLineSeries* s : {it->second->line, it->second->faint, it->second->band}) {
      if (!s) continue;
      ch->removeSeries(s);
      delete s;
    }
    it = m_curves.erase(it);
  }
}

int CurvePanel::redrawNow() {
  if (m_cacheDirty) rebuildCache();
  m_dirty = m_cacheDirty;  // runs still to load: another frame follows
  QChart* ch = chart();
  auto* xAxis = qobject_cast<QValueAxis*>(ch->axes(Qt::Horizontal).value(0));
  auto* yAxis = qobject_cast<QCategoryAxis*>(ch->axes(Qt::Vertical).value(0));
  xAxis->setTitleText(xTitle(m_settings.x));
  // x: the data's range while following, else the user's.
  if (!m_zoomed) {
    double lo = kInf, hi = -kInf;
    for (const auto& [id, c] : m_curves) {
      if (c->shown.empty()) continue;
      lo = std::min(lo, double(c->shown.front().first));
      hi = std::max(hi, double(c->shown.back().first));
    }
    if (!(lo <= hi)) lo = 0, hi = 1;
    if (hi == lo) lo -= 0.5, hi += 0.5;
    m_x0 = lo, m_x1 = hi;
  }
  // One bucket per two pixels, within a budget of points per chart: Qt Charts spends about 10 us
  // per point on a replace() and its paint (docs/performance.md), so 20 runs share 4000 points.
  constexpr int kPointBudget = 4000;
  const double plotWidth = ch->plotArea().width() > 0 ? ch->plotArea().width() : 600;
  const int buckets = std::clamp(kPointBudget / std::max<int>(1, int(m_curves.size())), 50,
                                 std::max(50, int(plotWidth / 2)));
  const bool smoothing = smoothed(m_settings);
  double yLo = kInf, yHi = -kInf;
  int points = 0;
  const auto addSeries = [&](QLineSeries* s, bool inLegend) {
    ch->addSeries(s);
    s->attachAxis(xAxis);
    s->attachAxis(yAxis);
    for (QLegendMarker* m : ch->legend()->markers(s)) m->setVisible(inLegend);
  };
  const auto drop = [&](QLineSeries*& s) {
    if (!s) return;
    ch->removeSeries(s);
    delete s;
    s = nullptr;
  };
  for (const auto& [id, c] : m_curves) {
    const bool selected = id == m_selected, detail = inDetail(id);
    const RunCurve::Key key{c->source.get(), m_x0, m_x1, buckets, detail, selected, m_settings};
    if (c->line && key == c->drawn) {  // nothing new for this run: its series stay as they are
      yLo = std::min(yLo, c->yLo), yHi = std::max(yHi, c->yHi);
      points += int(c->line->count()) + (c->faint ? int(c->faint->count()) : 0) +
                (c->band ? int(c->band->count()) : 0);
      continue;
    }
    c->drawn = key;
    const QColor colour = runColour(c->name);
    const BucketedCurve b = bucketCurve(c->shown, m_x0, m_x1, buckets);
    if (!c->line) c->line = new QLineSeries, addSeries(c->line, true);
    c->line->setName(QString::fromStdString(c->name));
    QPen pen(colour);
    pen.setWidthF(selected ? 3.0 : 1.6);
    c->line->setPen(pen);
    c->line->replace(toQPoints(b.line));
    c->line->setPointsVisible(b.line.size() == 1);
    points += int(b.line.size());
    c->yLo = kInf, c->yHi = -kInf;
    for (const auto& [x, y] : b.line)
      if (x >= m_x0 && x <= m_x1) c->yLo = std::min(c->yLo, y), c->yHi = std::max(c->yHi, y);
    yLo = std::min(yLo, c->yLo), yHi = std::max(yHi, c->yHi);
    // In detail: the raw curve faint under a smoothed one, and the min/max band when bucketed.
    const BucketedCurve raw =
        detail && smoothing ? bucketCurve(c->raw, m_x0, m_x1, buckets) : BucketedCurve{};
    if (detail && smoothing) {
      if (!c->faint) c->faint = new QLineSeries, addSeries(c->faint, false);
      QColor faint = colour;
      faint.setAlpha(80);
      c->faint->setPen(QPen(faint, 1.0));
      c->faint->replace(toQPoints(raw.line));
      points += int(raw.line.size());
    } else {
      drop(c->faint);
    }
    const BucketedCurve& banded = smoothing ? raw : b;
    if (detail && banded.bucketed()) {
      // A zigzag through each bucket's min and max: buckets two pixels apart fill in as a band,
      // at the cost of one line series (an area series costs ten times as much to paint).
      QList<QPointF> zigzag;
      zigzag.reserve(qsizetype(2 * banded.low.size()));
      for (size_t i = 0; i < banded.low.size(); ++i) {
        const bool up = i % 2 == 0;
        zigzag.append(
            QPointF(banded.low[i].first, up ? banded.low[i].second : banded.high[i].second));
        zigzag.append(
            QPointF(banded.low[i].first, up ? banded.high[i].second : banded.low[i].second));
      }
      if (!c->band) c->band = new QLineSeries, addSeries(c->band, false);
      QColor fill = colour;
      fill.setAlpha(55);
      c->band->setPen(QPen(fill, 1.0));
      c->band->replace(zigzag);
      points += int(zigzag.size());
    } else {
      drop(c->band);
    }
  }
  m_drawnPoints = points;
  // A cheaper painter for many points: antialiasing doubles Qt Charts' paint time.
  m_view->setRenderHint(QPainter::Antialiasing, points <= 2500);
  xAxis->setRange(m_x0, m_x1);
  // While following the data, round numbers at the ends; a zoom shows exactly what was chosen.
  if (!m_zoomed) xAxis->applyNiceNumbers();
  if (!(yLo <= yHi)) yLo = m_settings.logY ? -1 : 0, yHi = m_settings.logY ? 0 : 1;
  const double span = yHi - yLo;
  const double pad = span > 0 ? 0.05 * span : 0.05 * std::max(1e-3, std::abs(yHi));
  const double lo = yLo - pad, hi = yHi + pad;
  // The labels change only when the range does (a new label set relayouts the axis).
  const int labels = std::clamp(int(ch->plotArea().height() / 40), 2, 8);
  if (lo != m_yLo || hi != m_yHi || labels != m_yLabels) {
    m_yLo = lo, m_yHi = hi, m_yLabels = labels;
    for (const QString& label : yAxis->categoriesLabels()) yAxis->remove(label);
    yAxis->setStartValue(lo);
    if (m_settings.logY) {
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
  QStringList names;
  for (const auto& [id, c] : m_curves) names << QString::fromStdString(c->name);
  m_view->setAccessibleDescription(QStringLiteral("%1 of %2 runs: %3")
                                       .arg(m_title)
                                       .arg(m_curves.size())
                                       .arg(names.join(QStringLiteral(", "))));
  if (m_dirty) m_frame->start();
  return points;
}

QString CurvePanel::readoutAt(double x) const {
  QStringList lines;
  for (const auto& [id, c] : m_curves) {
    const double v = valueAt(c->shown, x);
    if (!std::isfinite(v)) continue;
    lines << QStringLiteral("%1: %2").arg(QString::fromStdString(c->name),
                                          formatY(m_settings.logY ? std::pow(10.0, v) : v));
  }
  return lines.join(QLatin1Char('\n'));
}

std::string CurvePanel::runNear(double x, double y, double tolerance) const {
  std::string best;
  double bestDistance = tolerance;
  for (const auto& [id, c] : m_curves) {
    const double v = valueAt(c->shown, x);
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

bool CurvePanel::savePng(const QString& path, QString* error) const {
  const QImage image = m_view->grab().toImage();
  QSaveFile file(path);
  if (!file.open(QIODevice::WriteOnly) || !image.save(&file, "PNG") || !file.commit()) {
    if (error) *error = QStringLiteral("cannot write %1: %2").arg(path, file.errorString());
    return false;
  }
  return true;
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
  QMenu menu(this);
  menu.addAction(QStringLiteral("Save as &PNG\u2026"), this, [this] {
    const QString path = QFileDialog::getSaveFileName(this, QStringLiteral("Save chart"), QString(),
                                                      QStringLiteral("PNG (*.png)"));
    QString error;
    if (!path.isEmpty() && !savePng(path, &error)) m_readout->setText(error), m_readout->show();
  });
  menu.addAction(QStringLiteral("Save as &SVG\u2026"), this, [this] {
    const QString path = QFileDialog::getSaveFileName(this, QStringLiteral("Save chart"), QString(),
                                                      QStringLiteral("SVG (*.svg)"));
    QString error;
    if (!path.isEmpty() && !saveSvg(path, &error)) m_readout->setText(error), m_readout->show();
  });
  menu.addAction(QStringLiteral("Save data as &CSV\u2026"), this, [this] {
    const QString path = QFileDialog::getSaveFileName(this, QStringLiteral("Save data"), QString(),
                                                      QStringLiteral("CSV (*.csv)"));
    if (path.isEmpty()) return;
    QSaveFile file(path);
    if (file.open(QIODevice::WriteOnly)) file.write(csv().toUtf8()), file.commit();
  });
  menu.addAction(QStringLiteral("&Copy image"), this,
                 [this] { QApplication::clipboard()->setPixmap(m_view->grab()); });
  menu.addAction(QStringLiteral("Copy data as CSV"), this,
                 [this] { QApplication::clipboard()->setText(csv()); });
  menu.addSeparator();
  QAction* reset = menu.addAction(QStringLiteral("&Reset zoom"), this, &CurvePanel::resetZoom);
  reset->setEnabled(m_zoomed);
  menu.exec(global);
}

}  // namespace fp4lab::widgets
