// The Compare tab: pickers, the overlay and difference charts, config differences, metrics side by
// side and gap recovered.
#include "fp4lab/widgets/compare_view.h"

#include <QAction>
#include <QAreaSeries>
#include <QBrush>
#include <QChart>
#include <QChartView>
#include <QCheckBox>
#include <QClipboard>
#include <QComboBox>
#include <QFileDialog>
#include <QFont>
#include <QGraphicsLayout>
#include <QGraphicsScene>
#include <QGridLayout>
#include <QGroupBox>
#include <QGuiApplication>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLegend>
#include <QLegendMarker>
#include <QLineSeries>
#include <QMenu>
#include <QMessageBox>
#include <QPainter>
#include <QPen>
#include <QProgressBar>
#include <QSaveFile>
#include <QSplitter>
#include <QSvgGenerator>
#include <QTabWidget>
#include <QTableWidget>
#include <QValueAxis>
#include <QVBoxLayout>

#include "fp4lab/widgets/flow_layout.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <set>

#include "fp4lab/error.h"
#include "fp4lab/widgets/chart_export.h"
#include "fp4lab/widgets/run_charts.h"
#include "fp4lab/widgets/run_table_model.h"

namespace fp4lab::widgets {

namespace detail {

Points cleanPoints(const Points& points) {
  Points out;
  out.reserve(points.size());
  for (const auto& p : points)
    if (std::isfinite(p.first) && std::isfinite(p.second)) out.push_back(p);
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  // One point per x: the last logged (a resumed run may log a step twice).
  Points unique;
  unique.reserve(out.size());
  for (const auto& p : out) {
    if (!unique.empty() && unique.back().first == p.first)
      unique.back() = p;
    else
      unique.push_back(p);
  }
  return unique;
}

double interpolate(const Points& points, double x) {
  if (points.empty() || !(x >= points.front().first) || !(x <= points.back().first))
    return std::numeric_limits<double>::quiet_NaN();
  const auto upper = std::lower_bound(points.begin(), points.end(), x,
                                      [](const auto& p, double v) { return p.first < v; });
  if (upper->first == x) return upper->second;
  const auto lower = upper - 1;
  const double t = (x - lower->first) / (upper->first - lower->first);
  return lower->second + t * (upper->second - lower->second);
}

namespace {
// The x of every point of `curves` within the range all of them cover, sorted, each once.
std::vector<double> commonSteps(const std::vector<const Points*>& curves) {
  std::vector<double> xs;
  if (curves.empty()) return xs;
  double lo = -std::numeric_limits<double>::infinity(), hi = -lo;
  for (const Points* c : curves) {
    if (c->empty()) return xs;
    lo = std::max(lo, c->front().first);
    hi = std::min(hi, c->back().first);
  }
  if (!(lo <= hi)) return xs;
  std::set<double> all;
  for (const Points* c : curves)
    for (const auto& p : *c)
      if (p.first >= lo && p.first <= hi) all.insert(p.first);
  return std::vector<double>(all.begin(), all.end());
}
}  // namespace

Points difference(const Points& a, const Points& b) {
  const Points ca = cleanPoints(a), cb = cleanPoints(b);
  Points out;
  for (double x : commonSteps({&ca, &cb})) {
    const double d = interpolate(cb, x) - interpolate(ca, x);
    if (std::isfinite(d)) out.emplace_back(x, d);
  }
  return out;
}

Band meanBand(const std::vector<Points>& curves) {
  std::vector<Points> clean;
  for (const Points& c : curves) clean.push_back(cleanPoints(c));
  std::vector<const Points*> ptrs;
  for (const Points& c : clean) ptrs.push_back(&c);
  Band band;
  for (double x : commonSteps(ptrs)) {
    double sum = 0, lo = std::numeric_limits<double>::infinity(), hi = -lo;
    int n = 0;
    for (const Points& c : clean) {
      const double v = interpolate(c, x);
      if (!std::isfinite(v)) continue;
      sum += v, ++n;
      lo = std::min(lo, v), hi = std::max(hi, v);
    }
    if (n == 0) continue;
    band.mean.emplace_back(x, sum / n);
    band.lo.emplace_back(x, lo);
    band.hi.emplace_back(x, hi);
  }
  return band;
}

}  // namespace detail

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
const QString kNone = QStringLiteral("\u2014");  // an em dash: not measured

QList<QPointF> toQPoints(const Points& points) {
  QList<QPointF> out;
  out.reserve(qsizetype(points.size()));
  for (const auto& [x, y] : points)
    if (std::isfinite(x) && std::isfinite(y)) out.append(QPointF(x, y));
  return out;
}

void styleAxis(QValueAxis& axis, const QString& title) {
  axis.setTitleText(title);
  QFont font = axis.titleFont();
  font.setPointSizeF(10);
  font.setBold(false);
  axis.setTitleFont(font);
  QFont labels = axis.labelsFont();
  labels.setPointSizeF(9);
  axis.setLabelsFont(labels);
  axis.setGridLineColor(QColor(0xdd, 0xdd, 0xdd));
  axis.setLinePenColor(QColor(0x88, 0x88, 0x88));
}

// A range padded by 4% (or around a single value), with nice ticks and a fixed label format of as
// many decimals as the tick step needs, so labels keep their width while the data grows.
void fitAxis(QValueAxis& axis, double lo, double hi, bool integers) {
  if (!(lo <= hi)) lo = 0, hi = 1;
  const double span = hi - lo;
  const double pad = span > 0 ? 0.04 * span : 0.05 * std::abs(hi) + 0.01;
  if (integers) {
    axis.setRange(std::max(0.0, lo), hi > lo ? hi : lo + 1);
    axis.applyNiceNumbers();
    axis.setLabelFormat(QStringLiteral("%g"));
    return;
  }
  axis.setRange(lo - pad, hi + pad);
  axis.applyNiceNumbers();
  const double step = (axis.max() - axis.min()) / std::max(1, axis.tickCount() - 1);
  const int decimals = step > 0 ? std::clamp(int(-std::floor(std::log10(step) + 1e-9)), 0, 8) : 2;
  axis.setLabelFormat(QStringLiteral("%.%1f").arg(decimals));
}

// A chart title and a y-axis title for a series.
std::pair<QString, QString> metricTitles(const std::string& metric) {
  static const std::map<std::string, std::pair<QString, QString>> titles = {
      {"eval/val_loss", {QStringLiteral("Validation loss"), QStringLiteral("nats per token")}},
      {"eval/val_ppl", {QStringLiteral("Validation perplexity"), QStringLiteral("perplexity")}},
      {"eval/val_kl", {QStringLiteral("KL to the reference"), QStringLiteral("nats per token")}},
      {"train/loss", {QStringLiteral("Training loss (EMA 0.9)"), QStringLiteral("nats per token")}},
      {"train/lr", {QStringLiteral("Learning rate"), QStringLiteral("learning rate")}},
      {"train/grad_norm", {QStringLiteral("Gradient norm"), QStringLiteral("L2 norm")}},
      {"train/tok_per_s", {QStringLiteral("Throughput"), QStringLiteral("tokens/s")}},
  };
  const auto it = titles.find(metric);
  if (it != titles.end()) return it->second;
  const std::string passRate = "eval/pass_rate_";
  if (metric.rfind(passRate, 0) == 0)
    return {QStringLiteral("Pass rate: ") + QString::fromStdString(metric.substr(passRate.size())),
            QStringLiteral("fraction passed")};
  return {QString::fromStdString(metric), QString::fromStdString(metric)};
}
QString metricTitle(const std::string& metric) {
  return metricTitles(metric).first;
}

QString fixed(double v, int decimals) {
  return std::isfinite(v) ? QString::number(v, 'f', decimals) : kNone;
}
QString percent(double v) {
  return std::isfinite(v) ? QString::number(v * 100, 'f', 1) + QStringLiteral("%") : kNone;
}
QString duration(double seconds) {
  if (!std::isfinite(seconds)) return kNone;
  const int64_t s = int64_t(std::llround(seconds));
  if (s < 60) return QStringLiteral("%1 s").arg(s);
  if (s < 3600) return QStringLiteral("%1 min %2 s").arg(s / 60).arg(s % 60, 2, 10, QChar('0'));
  return QStringLiteral("%1 h %2 min").arg(s / 3600).arg((s / 60) % 60, 2, 10, QChar('0'));
}

// Mean of the finite values (NaN when there are none).
double meanOf(const std::vector<double>& values) {
  double sum = 0;
  int n = 0;
  for (double v : values)
    if (std::isfinite(v)) sum += v, ++n;
  return n ? sum / n : kNaN;
}

void setNames(QWidget* w, const QString& objectName, const QString& accessibleName,
              const QString& toolTip) {
  w->setObjectName(objectName);
  w->setAccessibleName(accessibleName);
  w->setToolTip(toolTip);
}

// A label that shows a value: a description, never a name (the name would replace its text).
QLabel* valueLabel(const QString& objectName, const QString& description) {
  auto* label = new QLabel;
  label->setObjectName(objectName);
  label->setAccessibleDescription(description);
  label->setTextInteractionFlags(Qt::TextSelectableByMouse);
  return label;
}

QTableWidgetItem* cell(const QString& text, const QString& toolTip = {}) {
  auto* item = new QTableWidgetItem(text);
  item->setFlags(Qt::ItemIsEnabled | Qt::ItemIsSelectable);
  if (!toolTip.isEmpty()) item->setToolTip(toolTip);
  return item;
}

}  // namespace

struct CompareView::Curve {
  Points line, lo, hi;  // lo and hi: the seeds' min and max (grouped runs only)
  QString label;        // legend entry
  QColor colour;
  int members = 0;
};

// ---- Construction -------------------------------------------------------------------------------

CompareView::CompareView(QWidget* parent) : QWidget(parent) {
  setObjectName(QStringLiteral("compareView"));
  buildUi();
}

QChartView* CompareView::makeChartView(const QString& objectName, const QString& accessibleName) {
  auto* chart = new QChart;
  chart->setTheme(QChart::ChartThemeLight);
  chart->setAnimationOptions(QChart::NoAnimation);
  chart->setBackgroundRoundness(0);
  chart->setBackgroundBrush(Qt::white);
  chart->setMargins(QMargins(4, 4, 12, 4));
  QFont titleFont = chart->titleFont();
  titleFont.setPointSizeF(11);
  titleFont.setBold(true);
  chart->setTitleFont(titleFont);
  chart->legend()->setAlignment(Qt::AlignBottom);
  QFont legendFont = chart->legend()->font();
  legendFont.setPointSizeF(9);
  chart->legend()->setFont(legendFont);
  auto* view = new QChartView(chart);
  view->setRenderHint(QPainter::Antialiasing);
  setNames(view, objectName, accessibleName,
           tr("Right-click to save the chart as PNG or SVG, or to copy its data as CSV"));
  view->setMinimumSize(240, 120);
  return view;
}

void CompareView::addChartActions(QChartView* view, const QString& what) {
  const QString prefix = view->objectName();
  auto add = [&](const QString& name, const QString& text, auto slot) {
    auto* action = new QAction(text, view);
    action->setObjectName(prefix + name);
    action->setToolTip(text);
    connect(action, &QAction::triggered, this, slot);
    view->addAction(action);
  };
  add(QStringLiteral("CopyImage"), tr("Copy &image"), [this, view] { copyChartImage(view); });
  add(QStringLiteral("SavePng"), tr("Save %1 as &PNG\u2026").arg(what),
      [this, view] { saveChart(view, false); });
  add(QStringLiteral("SaveSvg"), tr("Save %1 as &SVG\u2026").arg(what),
      [this, view] { saveChart(view, true); });
  add(QStringLiteral("CopyCsv"), tr("Copy &CSV of the overlaid data"),
      [this] { QGuiApplication::clipboard()->setText(overlayCsv()); });
  view->setContextMenuPolicy(Qt::CustomContextMenu);
  connect(view, &QWidget::customContextMenuRequested, this, [view](const QPoint& pos) {
    QMenu::exec(view->actions(), view->mapToGlobal(pos), nullptr, view);
  });
}

void CompareView::buildUi() {
  auto* root = new QVBoxLayout(this);
  root->setContentsMargins(6, 6, 6, 6);

  // Pickers.
  auto* pickers = new FlowLayout;
  auto picker = [&](const QString& text, const QString& objectName, const QString& name,
                    const QString& toolTip) {
    auto* label = new QLabel(text);
    auto* box = new QComboBox;
    setNames(box, objectName, name, toolTip);
    box->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    box->setMinimumContentsLength(10);
    label->setBuddy(box);
    pickers->addWidget(flowGroup({label, box}), 6);
    return box;
  };
  m_runA = picker(tr("Run &A:"), QStringLiteral("compareRunA"), QStringLiteral("run A"),
                  tr("The first run: the difference chart shows B \u2212 A"));
  m_runB = picker(tr("Run &B:"), QStringLiteral("compareRunB"), QStringLiteral("run B"),
                  tr("The second run: the difference chart shows B \u2212 A"));
  m_metricBox = picker(tr("&Metric:"), QStringLiteral("compareMetric"), QStringLiteral("metric"),
                       tr("The series both charts show, against the optimizer step"));
  m_runA->setPlaceholderText(tr("(pick a run)"));
  m_runB->setPlaceholderText(tr("(pick a run)"));
  m_groupSeeds = new QCheckBox(tr("Group &seeds"));
  setNames(m_groupSeeds, QStringLiteral("compareGroupSeeds"), QStringLiteral("group seeds"),
           tr("Draw each run with the runs that differ from it only by seed as their mean and a "
              "min-max band; the tables then show means"));
  pickers->addWidget(m_groupSeeds, 6);
  root->addLayout(pickers);

  // Charts on the left, numbers on the right.
  auto* split = m_split = new QSplitter(Qt::Horizontal);
  split->setObjectName(QStringLiteral("compareSplitter"));
  split->setChildrenCollapsible(false);
  auto* charts = new QSplitter(Qt::Vertical);
  charts->setObjectName(QStringLiteral("compareChartsSplitter"));
  charts->setChildrenCollapsible(false);
  m_overlayView = makeChartView(QStringLiteral("compareOverlayChart"), QStringLiteral("overlay"));
  m_diffView = makeChartView(QStringLiteral("compareDifferenceChart"),
                             QStringLiteral("difference B minus A"));
  m_overlay = m_overlayView->chart();
  m_diff = m_diffView->chart();
  addChartActions(m_overlayView, tr("chart"));
  addChartActions(m_diffView, tr("difference chart"));
  charts->addWidget(m_overlayView);
  charts->addWidget(m_diffView);
  charts->setStretchFactor(0, 3);
  charts->setStretchFactor(1, 2);
  // Room for the difference's title, axes and labels on a small screen (below this Qt elides its
  // step labels to "..."); the overlay, with its legend, gives way first.
  m_diffView->setMinimumHeight(170);
  split->addWidget(charts);

  auto addAxes = [](QChart* chart, QValueAxis*& x, QValueAxis*& y, const QString& yTitle) {
    x = new QValueAxis;
    styleAxis(*x, tr("optimizer step"));
    x->setLabelFormat(QStringLiteral("%g"));
    chart->addAxis(x, Qt::AlignBottom);
    y = new QValueAxis;
    styleAxis(*y, yTitle);
    chart->addAxis(y, Qt::AlignLeft);
  };
  addAxes(m_overlay, m_overlayX, m_overlayY, QString());
  addAxes(m_diff, m_diffX, m_diffY, tr("B \u2212 A"));
  auto attach = [](QChart* chart, QAbstractSeries* s) {
    chart->addSeries(s);
    for (QAbstractAxis* axis : chart->axes()) s->attachAxis(axis);
  };
  auto band = [&](const QString& name) {
    auto* area = new QAreaSeries;
    area->setObjectName(name);
    auto* upper = new QLineSeries(area);
    auto* lower = new QLineSeries(area);
    area->setUpperSeries(upper);
    area->setLowerSeries(lower);
    attach(m_overlay, area);
    for (QLegendMarker* m : m_overlay->legend()->markers(area)) m->setVisible(false);
    area->setVisible(false);
    return area;
  };
  m_bandA = band(QStringLiteral("bandA"));
  m_bandB = band(QStringLiteral("bandB"));
  m_lineA = new QLineSeries;
  m_lineA->setObjectName(QStringLiteral("runA"));
  m_lineB = new QLineSeries;
  m_lineB->setObjectName(QStringLiteral("runB"));
  attach(m_overlay, m_lineA);
  attach(m_overlay, m_lineB);
  connect(m_lineA, &QLineSeries::clicked, this, [this] {
    if (!m_idA.empty()) Q_EMIT runSelected(m_idA);
  });
  connect(m_lineB, &QLineSeries::clicked, this, [this] {
    if (!m_idB.empty()) Q_EMIT runSelected(m_idB);
  });
  m_zeroLine = new QLineSeries;
  m_zeroLine->setObjectName(QStringLiteral("zero"));
  m_diffLine = new QLineSeries;
  m_diffLine->setObjectName(QStringLiteral("difference"));
  attach(m_diff, m_zeroLine);
  attach(m_diff, m_diffLine);
  QPen zeroPen(QColor(0x88, 0x88, 0x88));
  zeroPen.setStyle(Qt::DashLine);
  zeroPen.setWidthF(1);
  m_zeroLine->setPen(zeroPen);
  QPen diffPen(QColor(0x33, 0x33, 0x33));
  diffPen.setWidthF(2);
  m_diffLine->setPen(diffPen);
  m_diff->legend()->hide();
  // The two plot areas start at the same x, whatever the width of their y labels.
  for (QChart* chart : {m_overlay, m_diff})
    connect(chart, &QChart::plotAreaChanged, this, &CompareView::alignPlotAreas,
            Qt::QueuedConnection);
  auto* side = new QWidget;
  side->setObjectName(QStringLiteral("compareSide"));
  auto* sideLayout = new QVBoxLayout(side);
  sideLayout->setContentsMargins(4, 0, 0, 0);

  auto* gapBox = new QGroupBox(tr("Gap recovered (PTQ \u2212 X) / (PTQ \u2212 BF16)"));
  gapBox->setObjectName(QStringLiteral("compareGapBox"));
  gapBox->setToolTip(
      tr("How much of the validation-loss gap between the PTQ run and the BF16 model a run gets "
         "back: 0% is PTQ's loss, 100% the BF16 model's"));
  auto* gap = new QGridLayout(gapBox);
  auto refBox = [&](int row, const QString& text, const QString& objectName, const QString& name,
                    const QString& toolTip) {
    auto* label = new QLabel(text);
    auto* box = new QComboBox;
    setNames(box, objectName, name, toolTip);
    box->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    box->setMinimumContentsLength(8);
    label->setBuddy(box);
    gap->addWidget(label, row, 0);
    gap->addWidget(box, row, 1, 1, 2);
    return box;
  };
  m_ptqRef = refBox(0, tr("&PTQ reference:"), QStringLiteral("comparePtqReference"),
                    QStringLiteral("PTQ reference"),
                    tr("The PTQ run the gap starts from; automatic: the PTQ run of the same model "
                       "and quantization (same seed first), found for each run"));
  m_bf16Ref = refBox(1, tr("BF1&6 reference:"), QStringLiteral("compareBf16Reference"),
                     QStringLiteral("BF16 reference"),
                     tr("The BF16 model the gap closes on; automatic: the SFT run whose model each "
                        "run started from"));
  for (int side = 0; side < 2; ++side) {
    const QString letter = side == 0 ? QStringLiteral("A") : QStringLiteral("B");
    m_gapName[side] = valueLabel(QStringLiteral("compareGapName") + letter,
                                 tr("run %1 of the gap recovered").arg(letter));
    m_gapBar[side] = new QProgressBar;
    m_gapBar[side]->setObjectName(QStringLiteral("compareGapBar") + letter);
    m_gapBar[side]->setAccessibleName(QStringLiteral("gap recovered ") + letter);
    m_gapBar[side]->setRange(0, 1000);
    m_gapBar[side]->setTextVisible(false);
    m_gapBar[side]->setMaximumHeight(14);
    m_gapBar[side]->setToolTip(tr("Gap recovered by run %1, 0% to 100% (the number beside it "
                                  "may lie outside)")
                                   .arg(letter));
    m_gapValue[side] = valueLabel(QStringLiteral("compareGapValue") + letter,
                                  tr("gap recovered by run %1").arg(letter));
    m_gapValue[side]->setMinimumWidth(
        m_gapValue[side]->fontMetrics().horizontalAdvance(QStringLiteral("-1000.0%")));
    m_gapValue[side]->setAlignment(Qt::AlignRight | Qt::AlignVCenter);
    QFont bold = m_gapValue[side]->font();
    bold.setBold(true);
    m_gapValue[side]->setFont(bold);
    m_gapDetail[side] = valueLabel(QStringLiteral("compareGapDetail") + letter,
                                   tr("references of run %1").arg(letter));
    m_gapDetail[side]->setWordWrap(true);
    QPalette muted = m_gapDetail[side]->palette();
    muted.setColor(QPalette::WindowText, QColor(0x55, 0x55, 0x55));
    m_gapDetail[side]->setPalette(muted);
    const int row = 2 + 3 * side;
    gap->addWidget(m_gapName[side], row, 0, 1, 2);
    gap->addWidget(m_gapValue[side], row, 2);
    gap->addWidget(m_gapBar[side], row + 1, 0, 1, 3);
    gap->addWidget(m_gapDetail[side], row + 2, 0, 1, 3);
  }
  gap->setColumnStretch(1, 1);
  sideLayout->addWidget(gapBox);

  auto table = [](const QString& objectName, const QString& name, const QString& toolTip) {
    auto* t = new QTableWidget;
    setNames(t, objectName, name, toolTip);
    t->setEditTriggers(QAbstractItemView::NoEditTriggers);
    t->setSelectionMode(QAbstractItemView::ExtendedSelection);
    t->verticalHeader()->hide();
    t->verticalHeader()->setDefaultSectionSize(t->fontMetrics().height() + 6);
    t->horizontalHeader()->setHighlightSections(false);
    t->setWordWrap(false);
    t->setAlternatingRowColors(true);
    return t;
  };
  m_metricsTable = table(QStringLiteral("compareMetricsTable"), QStringLiteral("metrics"),
                         tr("Final and best metrics of A and B side by side"));
  m_metricsTable->setColumnCount(4);
  m_metricsTable->setHorizontalHeaderLabels(
      {tr("metric"), QStringLiteral("A"), QStringLiteral("B"),
       tr("B \u2212 A")});  // The tables share one place: at 700 x 500 two of them would show two
                            // rows each.
  m_tables = new QTabWidget;
  setNames(m_tables, QStringLiteral("compareTables"), QStringLiteral("comparison tables"),
           tr("The metrics of A and B side by side, and the config keys that differ"));
  m_tables->setDocumentMode(true);
  m_tables->addTab(m_metricsTable, tr("&Metrics"));
  m_configTable = table(QStringLiteral("compareConfigTable"), QStringLiteral("config differences"),
                        tr("The configuration keys whose values differ between A and B (hover a "
                           "value for where it was set)"));
  m_configTable->setColumnCount(3);
  m_configTable->setHorizontalHeaderLabels({tr("key"), QStringLiteral("A"), QStringLiteral("B")});
  auto* configPage = new QWidget;
  configPage->setObjectName(QStringLiteral("compareConfigPage"));
  auto* configLayout = new QVBoxLayout(configPage);
  configLayout->setContentsMargins(0, 4, 0, 0);
  m_configNote = valueLabel(QStringLiteral("compareConfigNote"), tr("config differences summary"));
  configLayout->addWidget(m_configNote);
  configLayout->addWidget(m_configTable, 1);
  m_tables->addTab(configPage, tr("&Config differences"));
  sideLayout->addWidget(m_tables, 1);
  for (QTableWidget* t : {m_metricsTable, m_configTable}) {
    t->horizontalHeader()->setSectionResizeMode(QHeaderView::Interactive);
    t->horizontalHeader()->setStretchLastSection(true);
  }

  split->addWidget(side);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  root->addWidget(split, 1);

  // Choices.
  connect(m_runA, &QComboBox::activated, this, [this](int i) {
    m_idA = m_runA->itemData(i).toString().toStdString();
    m_dirty = true;
    refresh();
    Q_EMIT runSelected(m_idA);
  });
  connect(m_runB, &QComboBox::activated, this, [this](int i) {
    m_idB = m_runB->itemData(i).toString().toStdString();
    m_dirty = true;
    refresh();
    Q_EMIT runSelected(m_idB);
  });
  connect(m_metricBox, &QComboBox::activated, this, [this](int i) {
    m_metric = m_metricBox->itemData(i).toString().toStdString();
    m_dirty = true;
    refresh();
  });
  connect(m_ptqRef, &QComboBox::activated, this, [this](int i) {
    m_ptqRefId = m_ptqRef->itemData(i).toString().toStdString();
    m_dirty = true;
    refresh();
  });
  connect(m_bf16Ref, &QComboBox::activated, this, [this](int i) {
    m_bf16RefId = m_bf16Ref->itemData(i).toString().toStdString();
    m_dirty = true;
    refresh();
  });
  connect(m_groupSeeds, &QCheckBox::toggled, this, [this] {
    m_dirty = true;
    refresh();
  });
}

// ---- Runs and choices ---------------------------------------------------------------------------

void CompareView::setRuns(RunSnapshotsPtr runs) {
  m_runs = std::move(runs);
  std::vector<std::string> ids;
  if (m_runs) {
    ids.reserve(m_runs->size());
    // The readable-config flag is part of the key: it changes the seed groups.
    for (const RunSnapshot& r : *m_runs) ids.push_back(r.id + (r.folder.hasConfig ? "+" : "-"));
  }
  if (ids != m_ids) {
    m_ids = std::move(ids);
    m_groups = m_runs ? seedGroups(*m_runs) : std::vector<std::vector<std::size_t>>{};
    m_groupOf.assign(m_runs ? m_runs->size() : 0, -1);
    for (size_t g = 0; g < m_groups.size(); ++g)
      for (std::size_t i : m_groups[g]) m_groupOf[i] = int(g);
    if (m_runs && m_idA.empty() && m_idB.empty() && !m_runs->empty()) {
      m_idA = m_runs->front().id;
      m_idB = m_runs->size() > 1 ? (*m_runs)[1].id : m_idA;
    }
    populateRunCombos();
    m_dirty = true;
  }
  refresh();
}

void CompareView::setPair(const std::string& idA, const std::string& idB) {
  m_idA = idA;
  m_idB = idB;
  populateRunCombos();
  m_dirty = true;
  refresh();
}

int CompareView::indexOf(const std::string& id) const {
  if (!m_runs || id.empty()) return -1;
  const auto it =
      std::lower_bound(m_runs->begin(), m_runs->end(), id,
                       [](const RunSnapshot& r, const std::string& v) { return r.id < v; });
  if (it != m_runs->end() && it->id == id) return int(it - m_runs->begin());
  // Not sorted after all (a test, a future caller): a plain search.
  for (size_t i = 0; i < m_runs->size(); ++i)
    if ((*m_runs)[i].id == id) return int(i);
  return -1;
}

void CompareView::populateRunCombos() {
  if (!m_runs) return;
  // Names shown: the folder's name, with its parent where two runs share a name.
  std::map<std::string, int> count;
  for (const RunSnapshot& r : *m_runs) ++count[r.name];
  auto fill = [&](QComboBox* box, const std::string& current, bool automatic) {
    QSignalBlocker block(box);
    box->clear();
    if (automatic) {
      box->addItem(tr("automatic"), QString());
      box->setItemData(0, tr("Found from each run's config"), Qt::ToolTipRole);
    }
    for (const RunSnapshot& r : *m_runs) {
      QString text = QString::fromStdString(r.name);
      if (count[r.name] > 1) {
        const std::string parent = r.id.substr(0, r.id.size() - r.name.size() - 1);
        text = QString::fromStdString(parent.substr(parent.rfind('/') + 1)) + "/" + text;
      }
      box->addItem(text, QString::fromStdString(r.id));
      const QString format =
          r.folder.hasConfig
              ? QString::fromStdString(r.recipe() + ", " + formatLabel(r.folder.config))
              : tr("no readable run.yaml");
      box->setItemData(box->count() - 1, QString::fromStdString(r.id) + "\n" + format,
                       Qt::ToolTipRole);
    }
    box->setCurrentIndex(box->findData(QString::fromStdString(current)));
  };
  fill(m_runA, m_idA, false);
  fill(m_runB, m_idB, false);
  fill(m_ptqRef, m_ptqRefId, true);
  fill(m_bf16Ref, m_bf16RefId, true);
  // A reference that is no longer listed reads as automatic.
  for (QComboBox* box : {m_ptqRef, m_bf16Ref})
    if (box->currentIndex() < 0) box->setCurrentIndex(0);
}

void CompareView::populateMetricCombo() {
  std::vector<std::string> names;
  auto add = [&](const std::string& n) {
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  };
  add("eval/val_loss");
  for (int index : {indexOf(m_idA), indexOf(m_idB)}) {
    if (index < 0) continue;
    const RunCurves* curves = (*m_runs)[size_t(index)].curves.get();
    if (!curves) continue;
    for (const auto& c : curves->evalColumns) add("eval/" + c);
  }
  for (const char* n : {"train/loss", "train/lr", "train/grad_norm", "train/tok_per_s"}) add(n);
  add(m_metric);
  bool same = int(names.size()) == m_metricBox->count();
  for (size_t i = 0; same && i < names.size(); ++i)
    same = m_metricBox->itemData(int(i)).toString().toStdString() == names[i];
  if (!same) {
    QSignalBlocker block(m_metricBox);
    m_metricBox->clear();
    for (const auto& n : names) {
      m_metricBox->addItem(QString::fromStdString(n), QString::fromStdString(n));
      m_metricBox->setItemData(m_metricBox->count() - 1, metricTitle(n), Qt::ToolTipRole);
    }
  }
  m_metricBox->setCurrentIndex(m_metricBox->findData(QString::fromStdString(m_metric)));
}

std::vector<std::size_t> CompareView::membersOf(int index, bool grouped) const {
  if (index < 0) return {};
  if (grouped && size_t(index) < m_groupOf.size() && m_groupOf[size_t(index)] >= 0)
    return m_groups[size_t(m_groupOf[size_t(index)])];
  return {std::size_t(index)};
}

std::string CompareView::fingerprint() const {
  std::string f = m_metric + "|" + (m_groupSeeds->isChecked() ? "g" : "-") + "|" + m_ptqRefId +
                  "|" + m_bf16RefId + "|" + m_idA + "|" + m_idB;
  if (!m_runs) return f;
  const bool grouped = m_groupSeeds->isChecked();
  std::set<int> shown;
  for (int index : {indexOf(m_idA), indexOf(m_idB), indexOf(m_ptqRefId), indexOf(m_bf16RefId)}) {
    for (std::size_t m : membersOf(index, grouped)) {
      shown.insert(int(m));
      const RunReferences refs = findReferences(*m_runs, m);
      shown.insert(refs.ptq);
      shown.insert(refs.bf16);
    }
  }
  for (int i : shown) {
    if (i < 0) continue;
    const RunSnapshot& r = (*m_runs)[size_t(i)];
    char buffer[160];
    std::snprintf(buffer, sizeof buffer, "|%d:%p:%d:%lld:%.17g", i,
                  static_cast<const void*>(r.curves.get()), int(r.state()),
                  static_cast<long long>(r.summary.step), r.summary.lastValLoss);
    f += buffer;
  }
  return f;
}

// ---- Drawing ------------------------------------------------------------------------------------

void CompareView::showEvent(QShowEvent* event) {
  QWidget::showEvent(event);
  if (!m_sized) {  // the charts get 60% of the width (the tables' size hints would take more)
    m_sized = true;
    const int w = std::max(width(), 400);
    m_split->setSizes({w * 3 / 5, w - w * 3 / 5});
  }
  if (m_dirty) refresh();
}

CompareView::Curve CompareView::curveOf(int index, bool grouped) const {
  Curve c;
  if (index < 0) return c;
  const RunSnapshot& run = (*m_runs)[size_t(index)];
  const std::vector<std::size_t> members = membersOf(index, grouped);
  c.members = int(members.size());
  auto pointsOf = [&](const RunSnapshot& r) {
    Points p = r.curves ? detail::cleanPoints(r.curves->series(m_metric)) : Points{};
    if (m_metric == "train/loss" && !p.empty()) {
      std::vector<double> y;
      y.reserve(p.size());
      for (const auto& q : p) y.push_back(q.second);
      const std::vector<double> smooth = detail::debiasedEma(y, 0.9);
      for (size_t i = 0; i < p.size(); ++i) p[i].second = smooth[i];
    }
    return p;
  };
  if (members.size() <= 1) {
    c.line = pointsOf(run);
  } else {
    std::vector<Points> all;
    for (std::size_t m : members) all.push_back(pointsOf((*m_runs)[m]));
    detail::Band band = detail::meanBand(all);
    c.line = std::move(band.mean);
    c.lo = std::move(band.lo);
    c.hi = std::move(band.hi);
  }
  c.label = QString::fromStdString(run.name);
  if (c.members > 1) c.label += QStringLiteral(" \u00d7%1").arg(c.members);  // as RunCharts
  const std::string colourName =
      run.curves && !run.curves->group.empty() ? run.curves->group : run.name;
  c.colour = runColour(colourName);
  return c;
}

void CompareView::refresh() {
  populateMetricCombo();
  if (!m_runs || !isVisible()) {
    m_dirty = true;
    return;
  }
  const std::string f = fingerprint();
  if (!m_dirty && f == m_shown) return;
  m_dirty = false;
  m_shown = f;
  const bool grouped = m_groupSeeds->isChecked();
  const int a = indexOf(m_idA), b = indexOf(m_idB);
  const Curve ca = curveOf(a, grouped), cb = curveOf(b, grouped);
  updateCharts(ca, cb);
  updateConfigTable(a, b);
  const std::vector<std::size_t> ma = membersOf(a, grouped), mb = membersOf(b, grouped);
  updateMetricsTable(ma, mb);
  updateGap(0, ma);
  updateGap(1, mb);
}

void CompareView::updateCharts(const Curve& a, const Curve& b) {
  m_dataA = a.line;
  m_dataB = b.line;
  m_dataDiff = detail::difference(a.line, b.line);
  m_labelA = a.label;
  m_labelB = b.label;
  double xMin = std::numeric_limits<double>::infinity(), xMax = -xMin, yMin = xMin, yMax = -xMin;
  auto extend = [&](const Points& points) {
    for (const auto& [x, y] : points) {
      xMin = std::min(xMin, x), xMax = std::max(xMax, x);
      yMin = std::min(yMin, y), yMax = std::max(yMax, y);
    }
  };
  for (const Points* p : {&a.line, &a.lo, &a.hi, &b.line, &b.lo, &b.hi}) extend(*p);
  // Lines: each run in its colour; B dashed when both have the same colour.
  const bool sameColour = a.colour == b.colour;
  const struct {
    QLineSeries* line;
    QAreaSeries* band;
    const Curve* curve;
    QString letter;
  } sides[] = {{m_lineA, m_bandA, &a, QStringLiteral("A")},
               {m_lineB, m_bandB, &b, QStringLiteral("B")}};
  for (const auto& s : sides) {
    QPen pen(s.curve->colour);
    pen.setWidthF(2.0);
    if (s.line == m_lineB && sameColour) pen.setStyle(Qt::DashLine);
    s.line->setPen(pen);
    s.line->setName(s.letter + QStringLiteral(": ") +
                    (s.curve->label.isEmpty() ? tr("(none)") : s.curve->label));
    s.line->replace(toQPoints(s.curve->line));
    s.line->setPointsVisible(s.curve->line.size() == 1);
    const bool band = !s.curve->lo.empty();
    s.band->upperSeries()->replace(toQPoints(s.curve->hi));
    s.band->lowerSeries()->replace(toQPoints(s.curve->lo));
    QColor fill = s.curve->colour;
    fill.setAlpha(50);
    s.band->setBrush(fill);
    s.band->setPen(Qt::NoPen);
    s.band->setVisible(band);
    for (QLegendMarker* m : m_overlay->legend()->markers(s.band)) m->setVisible(false);
  }
  const bool haveX = xMin <= xMax;
  fitAxis(*m_overlayX, haveX ? xMin : 0, haveX ? xMax : 1, true);
  // Pass rates are fractions: the overlay spans 0 to 1, as on the Curves page (the difference
  // below keeps its own range).
  if (m_metric.rfind("eval/pass_rate_", 0) == 0 && !(yMin < 0 || yMax > 1)) {
    m_overlayY->setRange(0, 1);
    m_overlayY->setTickCount(6);
    m_overlayY->setLabelFormat(QStringLiteral("%.1f"));
  } else {
    fitAxis(*m_overlayY, yMin, yMax, false);
  }
  m_overlayY->setTitleText(metricTitles(m_metric).second);
  QString title = metricTitle(m_metric);
  if (a.line.empty() || b.line.empty())
    title += a.line.empty() && b.line.empty() ? tr(": no points yet")
             : a.line.empty()                 ? tr(": no points for A")
                                              : tr(": no points for B");
  m_overlay->setTitle(title);

  // The difference, on the overlay's x range so that steps line up.
  m_diffLine->replace(toQPoints(m_dataDiff));
  m_diffLine->setPointsVisible(m_dataDiff.size() == 1);
  m_zeroLine->replace(QList<QPointF>{QPointF(m_overlayX->min(), 0), QPointF(m_overlayX->max(), 0)});
  m_diffX->setRange(m_overlayX->min(), m_overlayX->max());
  m_diffX->setTickCount(m_overlayX->tickCount());
  m_diffX->setLabelFormat(QStringLiteral("%g"));
  double dMin = 0, dMax = 0;
  for (const auto& p : m_dataDiff) dMin = std::min(dMin, p.second), dMax = std::max(dMax, p.second);
  fitAxis(*m_diffY, dMin, dMax, false);
  m_diff->setTitle(m_dataDiff.empty() ? tr("B \u2212 A: no common steps yet") : tr("B \u2212 A"));

  auto lastOf = [](const Points& p) {
    return p.empty() ? kNone : QString::number(p.back().second, 'g', 4);
  };
  m_overlayView->setAccessibleDescription(
      tr("%1 against the optimizer step: A %2 (last %3), B %4 (last %5)")
          .arg(metricTitle(m_metric), a.label, lastOf(a.line), b.label, lastOf(b.line)));
  m_diffView->setAccessibleDescription(tr("B minus A of %1 at %2 common steps; last %3")
                                           .arg(QString::fromStdString(m_metric))
                                           .arg(m_dataDiff.size())
                                           .arg(lastOf(m_dataDiff)));
}

void CompareView::updateConfigTable(int a, int b) {
  m_configTable->setRowCount(0);
  const QString nameA = a >= 0 ? QString::fromStdString((*m_runs)[size_t(a)].name) : QString();
  const QString nameB = b >= 0 ? QString::fromStdString((*m_runs)[size_t(b)].name) : QString();
  for (int c = 1; c <= 2; ++c) {
    auto* item = new QTableWidgetItem(c == 1 ? QStringLiteral("A") : QStringLiteral("B"));
    item->setToolTip(c == 1 ? QStringLiteral("A: ") + nameA : QStringLiteral("B: ") + nameB);
    m_configTable->setHorizontalHeaderItem(c, item);
  }
  if (a < 0 || b < 0) {
    m_configNote->setText(tr("pick two runs"));
    return;
  }
  const RunSnapshot &ra = (*m_runs)[size_t(a)], &rb = (*m_runs)[size_t(b)];
  for (const RunSnapshot* r : {&ra, &rb}) {
    if (!r->folder.hasConfig) {
      m_configNote->setText(
          tr("%1 has no readable run.yaml%2")
              .arg(QString::fromStdString(r->name),
                   r->folder.configError.empty()
                       ? QString()
                       : QStringLiteral(": ") + QString::fromStdString(r->folder.configError)));
      return;
    }
  }
  const std::vector<std::string> keys =
      run::differingKeys(ra.folder.config, rb.folder.config, true);
  m_configTable->setRowCount(int(keys.size()));
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string& k = keys[i];
    m_configTable->setItem(int(i), 0, cell(QString::fromStdString(k)));
    m_configTable->setItem(int(i), 1,
                           cell(QString::fromStdString(ra.folder.config.valueOf(k)),
                                QString::fromStdString(ra.folder.config.originOf(k))));
    m_configTable->setItem(int(i), 2,
                           cell(QString::fromStdString(rb.folder.config.valueOf(k)),
                                QString::fromStdString(rb.folder.config.originOf(k))));
  }
  m_configTable->resizeColumnToContents(0);
  m_configTable->resizeColumnToContents(1);
  m_configNote->setText(a == b         ? tr("The same run.")
                        : keys.empty() ? tr("The configs are identical.")
                                       : tr("%n key(s) differ; hover a value for where it was set.",
                                            nullptr, int(keys.size())));
  m_tables->setTabText(1, keys.empty() ? tr("&Config differences")
                                       : tr("&Config differences (%1)").arg(keys.size()));
}

void CompareView::updateMetricsTable(const std::vector<std::size_t>& a,
                                     const std::vector<std::size_t>& b) {
  const RunSnapshots& runs = *m_runs;
  // Short headers (the names are in the pickers and the legend), the names in their tooltips.
  auto header = [&](int column, const QString& letter, const std::vector<std::size_t>& m) {
    auto* item = new QTableWidgetItem(
        m.size() > 1 ? tr("%1 (mean \u00d7%2)").arg(letter).arg(m.size()) : letter);
    QString tip = letter + QStringLiteral(":");
    for (std::size_t i : m) tip += QStringLiteral(" ") + QString::fromStdString(runs[i].name);
    item->setToolTip(tip);
    m_metricsTable->setHorizontalHeaderItem(column, item);
  };
  // The picked run first in a group (its name heads the column).
  auto picked = [&](std::vector<std::size_t> m, const std::string& id) {
    const int i = indexOf(id);
    const auto it = std::find(m.begin(), m.end(), std::size_t(i));
    if (it != m.end()) std::rotate(m.begin(), it, it + 1);
    return m;
  };
  const std::vector<std::size_t> ma = picked(a, m_idA), mb = picked(b, m_idB);
  header(1, QStringLiteral("A"), ma);
  header(2, QStringLiteral("B"), mb);
  struct Row {
    QString name;
    std::function<double(const RunSummary&)> get;
    std::function<QString(double)> show;
    QString toolTip;
    bool significantDifference = true;
  };
  std::vector<Row> rows = {
      {tr("last val loss"), [](const RunSummary& s) { return s.lastValLoss; },
       [](double v) { return fixed(v, 4); }, tr("Validation loss at the last evaluation")},
      {tr("best val loss"), [](const RunSummary& s) { return s.bestValLoss; },
       [](double v) { return fixed(v, 4); }, tr("Lowest validation loss logged")},
      {tr("last val KL"), [](const RunSummary& s) { return s.lastKl; },
       [](double v) { return std::isfinite(v) ? significant(v, 4) : kNone; },
       tr("KL divergence to the reference model at the last evaluation")},
  };
  std::set<std::string> tasks;
  for (const auto* m : {&ma, &mb})
    for (std::size_t i : *m)
      for (const auto& [task, rate] : runs[i].summary.passRates) tasks.insert(task);
  for (const std::string& task : tasks)
    rows.push_back({tr("pass rate %1").arg(QString::fromStdString(task)),
                    [task](const RunSummary& s) {
                      const auto it = s.passRates.find(task);
                      return it == s.passRates.end() ? kNaN : it->second;
                    },
                    [](double v) { return percent(v); }, tr("Last logged pass rate of the task"),
                    false});
  rows.push_back({tr("last train loss"), [](const RunSummary& s) { return s.lastTrainLoss; },
                  [](double v) { return fixed(v, 4); }, tr("Training loss of the last row")});
  rows.push_back({tr("tokens/s"), [](const RunSummary& s) { return s.tokensPerSecond; },
                  [](double v) { return fixed(v, 0); }, tr("Throughput of the last training row"),
                  false});
  rows.push_back({tr("duration"), [](const RunSummary& s) { return s.wallSeconds; },
                  [](double v) { return duration(v); }, tr("Wall time of the last row written"),
                  false});
  rows.push_back({tr("steps"), [](const RunSummary& s) { return double(s.step); },
                  [](double v) { return fixed(v, 0); }, tr("Last training step logged"), false});

  auto value = [&](const std::vector<std::size_t>& m, const Row& row) {
    std::vector<double> v;
    for (std::size_t i : m) v.push_back(row.get(runs[i].summary));
    return meanOf(v);
  };
  auto states = [&](const std::vector<std::size_t>& m) {
    std::map<std::string, int> n;
    for (std::size_t i : m) ++n[toString(runs[i].state())];
    QString s;
    for (const auto& [state, count] : n)
      s += (s.isEmpty() ? QString() : QStringLiteral(", ")) + QString::fromStdString(state) +
           (m.size() > 1 ? QStringLiteral(" \u00d7%1").arg(count) : QString());
    return s.isEmpty() ? kNone : s;
  };
  m_metricsTable->setRowCount(int(rows.size()) + 1);
  m_metricsTable->setItem(0, 0, cell(tr("state")));
  m_metricsTable->setItem(0, 1, cell(states(ma)));
  m_metricsTable->setItem(0, 2, cell(states(mb)));
  m_metricsTable->setItem(0, 3, cell(QString()));
  for (size_t r = 0; r < rows.size(); ++r) {
    const Row& row = rows[r];
    const double va = value(ma, row), vb = value(mb, row);
    const int at = int(r) + 1;
    m_metricsTable->setItem(at, 0, cell(row.name, row.toolTip));
    for (int c = 1; c <= 3; ++c) {
      const double v = c == 1 ? va : c == 2 ? vb : vb - va;
      // B - A: one rule down the column (three significant digits) wherever the values are
      // losses or KLs, which differ by orders of magnitude; counts and rates as their row shows.
      QString text = c == 3 && row.significantDifference ? significant(std::abs(v), 3)
                                                         : row.show(c == 3 ? std::abs(v) : v);
      if (text.isEmpty()) text = kNone;
      if (c == 3 && std::isfinite(v) && v != 0)
        text.prepend(v > 0 ? QChar(QLatin1Char('+')) : QChar(0x2212));
      auto* item = cell(text);
      item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
      m_metricsTable->setItem(at, c, item);
    }
  }
  m_metricsTable->resizeColumnsToContents();
}

void CompareView::updateGap(int side, const std::vector<std::size_t>& members) {
  const QString letter = side == 0 ? QStringLiteral("A") : QStringLiteral("B");
  QLabel *name = m_gapName[side], *value = m_gapValue[side], *detail = m_gapDetail[side];
  QProgressBar* bar = m_gapBar[side];
  if (members.empty()) {
    name->setText(letter + QStringLiteral(":"));
    value->setText(kNone);
    detail->setText(tr("no run picked"));
    bar->setValue(0);
    return;
  }
  const RunSnapshots& runs = *m_runs;
  RunReferences overrides;
  overrides.ptq = indexOf(m_ptqRefId);
  overrides.bf16 = indexOf(m_bf16RefId);
  const std::size_t first = members.front();
  std::vector<double> gaps;
  for (std::size_t m : members) gaps.push_back(gapRecovered(runs, m, overrides));
  const double g = members.size() == 1 ? gaps.front() : meanOf(gaps);
  const int picked = indexOf(side == 0 ? m_idA : m_idB);
  const std::size_t shownRun = picked >= 0 ? std::size_t(picked) : first;
  name->setText(letter + QStringLiteral(": ") + QString::fromStdString(runs[shownRun].name) +
                (members.size() > 1 ? tr(" \u00d7%1").arg(members.size()) : QString()));
  value->setText(percent(g));
  bar->setValue(std::isfinite(g) ? int(std::lround(std::clamp(g, 0.0, 1.0) * 1000)) : 0);
  bar->setAccessibleDescription(tr("gap recovered by run %1: %2").arg(letter, percent(g)));

  // Which references: the picked run's (its group shares them, seed for seed).
  RunReferences refs = findReferences(runs, shownRun);
  if (overrides.ptq >= 0) refs.ptq = overrides.ptq;
  if (overrides.bf16 >= 0) refs.bf16 = overrides.bf16;
  auto nameOf = [&](int i) { return QString::fromStdString(runs[size_t(i)].name); };
  const RunSnapshot& run = runs[shownRun];
  QString text;
  if (!run.folder.hasConfig) {
    text = tr("no readable run.yaml");
  } else if (run.folder.config.quantFormat == "none" && overrides.ptq < 0) {
    text = tr("not a quantized run");
  } else if (run.recipe() == "ptq" && refs.ptq == int(shownRun)) {
    text = tr("a PTQ run: 0% by definition");
  } else if (refs.ptq < 0 || refs.bf16 < 0) {
    text = refs.ptq < 0 && refs.bf16 < 0 ? tr("no PTQ or BF16 reference found")
           : refs.ptq < 0 ? tr("no PTQ reference found (BF16: %1)").arg(nameOf(refs.bf16))
                          : tr("no BF16 reference found (PTQ: %1)").arg(nameOf(refs.ptq));
  } else {
    const double x = run.summary.lastValLoss, p = runs[size_t(refs.ptq)].summary.lastValLoss,
                 f = runs[size_t(refs.bf16)].summary.lastValLoss;
    text = tr("PTQ %1 %2 \u00b7 BF16 %3 %4")
               .arg(nameOf(refs.ptq), fixed(p, 4), nameOf(refs.bf16), fixed(f, 4));
    text += members.size() > 1 ? tr(" \u00b7 mean of %1 seeds").arg(members.size())
                               : tr(" \u00b7 run %1").arg(fixed(x, 4));
    if (!std::isfinite(g)) text += tr(" \u2014 a validation loss is missing, or PTQ equals BF16");
  }
  detail->setText(text);
}

void CompareView::alignPlotAreas() {
  // Each chart's room for its y labels and title is its plot area's left minus its left margin,
  // once its layout has run (setMargins only schedules one: activate() runs it now).
  constexpr qreal kLeft = 4;
  for (QChart* chart : {m_overlay, m_diff})
    if (chart->layout()) chart->layout()->activate();
  const qreal labelsOverlay = m_overlay->plotArea().left() - m_overlay->margins().left();
  const qreal labelsDiff = m_diff->plotArea().left() - m_diff->margins().left();
  const qreal widest = std::max(labelsOverlay, labelsDiff);
  for (auto [chart, labels] :
       {std::pair{m_overlay, labelsOverlay}, std::pair{m_diff, labelsDiff}}) {
    QMargins margins = chart->margins();
    const int left = int(std::lround(kLeft + widest - labels));
    if (margins.left() == left) continue;
    margins.setLeft(left);
    chart->setMargins(margins);
    if (chart->layout()) chart->layout()->activate();
  }
}

// ---- Export -------------------------------------------------------------------------------------

QString CompareView::overlayCsv() const {
  auto quote = [](QString s) {
    if (s.contains(QLatin1Char(',')) || s.contains(QLatin1Char('"')))
      s = QLatin1Char('"') + s.replace(QLatin1String("\""), QLatin1String("\"\"")) +
          QLatin1Char('"');
    return s;
  };
  QString csv = QStringLiteral("step,") + quote(QStringLiteral("A: ") + m_labelA) +
                QLatin1Char(',') + quote(QStringLiteral("B: ") + m_labelB) +
                QStringLiteral(",B - A\n");
  std::map<double, std::array<double, 3>> rows;
  auto put = [&](const Points& points, int column) {
    for (const auto& [x, y] : points) {
      auto it = rows.try_emplace(x, std::array<double, 3>{kNaN, kNaN, kNaN}).first;
      it->second[size_t(column)] = y;
    }
  };
  put(m_dataA, 0);
  put(m_dataB, 1);
  put(m_dataDiff, 2);
  for (const auto& [x, v] : rows) {
    csv += QString::number(x, 'g', 12);
    for (double y : v)
      csv += QLatin1Char(',') + (std::isfinite(y) ? QString::number(y, 'g', 10) : QString());
    csv += QLatin1Char('\n');
  }
  return csv;
}

void CompareView::copyChartImage(QChartView* view) {
  QGuiApplication::clipboard()->setImage(renderWidget(*view));
}

void CompareView::saveChart(QChartView* view, bool svg) {
  const QString name =
      suggestedFileName({QStringLiteral("compare"), m_labelA.section(QLatin1Char(' '), 0, 0),
                         QStringLiteral("vs"), m_labelB.section(QLatin1Char(' '), 0, 0),
                         view == m_diffView ? QStringLiteral("difference") : QString()},
                        svg ? QStringLiteral("svg") : QStringLiteral("png"));
  const QString path =
      QFileDialog::getSaveFileName(this, svg ? tr("Save chart as SVG") : tr("Save chart as PNG"),
                                   name, svg ? tr("SVG images (*.svg)") : tr("PNG images (*.png)"));
  if (path.isEmpty()) return;
  try {
    if (!svg) {
      savePngAtomically(renderWidget(*view), path.toStdString());
      return;
    }
    QSaveFile file(path);
    if (!file.open(QIODevice::WriteOnly))
      throw Error("cannot create the SVG: " + file.errorString().toStdString(), path.toStdString());
    QChart* chart = view->chart();
    const QRectF source = chart->sceneBoundingRect();
    QSvgGenerator generator;
    generator.setOutputDevice(&file);
    generator.setSize(source.size().toSize());
    generator.setViewBox(QRectF(QPointF(0, 0), source.size()));
    generator.setTitle(chart->title());
    generator.setDescription(view->accessibleDescription());
    {
      QPainter painter(&generator);
      painter.setRenderHint(QPainter::Antialiasing);
      chart->scene()->render(&painter, QRectF(QPointF(0, 0), source.size()), source);
    }
    if (!file.commit())
      throw Error("cannot write the SVG: " + file.errorString().toStdString(), path.toStdString());
  } catch (const Error& e) {
    QMessageBox::warning(this, tr("Save chart"), QString::fromStdString(e.what()));
  }
}

}  // namespace fp4lab::widgets
