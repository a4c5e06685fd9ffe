// Curve and per-layer charts of run logs (Qt Charts).
#include "fp4lab/widgets/run_charts.h"

#include <QBarCategoryAxis>
#include <QBarSeries>
#include <QBarSet>
#include <QCategoryAxis>
#include <QFont>
#include <QLegend>
#include <QLegendMarker>
#include <QLineSeries>
#include <QPen>
#include <QPointF>
#include <QStringList>
#include <QValueAxis>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <set>

namespace fp4lab::widgets {

namespace {

// Object names tell a run's series apart from its faint raw curve.
const QString kRunPrefix = QStringLiteral("run:"), kRawPrefix = QStringLiteral("raw:"),
              kLevelPrefix = QStringLiteral("level:");

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

void styleChart(QChart& chart, const QString& title) {
  chart.setTheme(QChart::ChartThemeLight);
  chart.setAnimationOptions(QChart::NoAnimation);
  chart.setBackgroundRoundness(0);
  chart.setBackgroundBrush(Qt::white);
  chart.setMargins(QMargins(8, 8, 16, 8));
  QFont titleFont = chart.titleFont();
  titleFont.setPointSizeF(14);
  titleFont.setBold(true);
  chart.setTitleFont(titleFont);
  chart.setTitle(title);
  chart.legend()->setAlignment(Qt::AlignBottom);
  QFont legendFont = chart.legend()->font();
  legendFont.setPointSizeF(11);
  chart.legend()->setFont(legendFont);
}

void styleAxis(QAbstractAxis& axis, const QString& title) {
  axis.setTitleText(title);
  QFont font = axis.titleFont();
  font.setPointSizeF(11);
  font.setBold(false);
  axis.setTitleFont(font);
  QFont labels = axis.labelsFont();
  labels.setPointSizeF(10);
  axis.setLabelsFont(labels);
  axis.setGridLineColor(QColor(0xdd, 0xdd, 0xdd));
  axis.setLinePenColor(QColor(0x88, 0x88, 0x88));
}

QString formatValue(double v) {
  return QString::number(v, 'g', 3);
}

QList<QPointF> toQPoints(const Points& points) {
  QList<QPointF> out;
  out.reserve(qsizetype(points.size()));
  for (const auto& [x, y] : points) out.append(QPointF(x, y));
  return out;
}

QLineSeries* findSeries(QChart& chart, const QString& objectName) {
  for (QAbstractSeries* s : chart.series())
    if (s->objectName() == objectName) return qobject_cast<QLineSeries*>(s);
  return nullptr;
}

QLineSeries* addLineSeries(QChart& chart, const QString& objectName, const QString& name,
                           const QPen& pen, bool inLegend) {
  auto* series = new QLineSeries;
  series->setObjectName(objectName);
  series->setName(name);
  chart.addSeries(series);  // the chart owns it
  for (QAbstractAxis* axis : chart.axes()) series->attachAxis(axis);
  series->setPen(pen);  // after addSeries: the theme must not recolour it
  for (QLegendMarker* marker : chart.legend()->markers(series)) marker->setVisible(inLegend);
  return series;
}

// Short, unique category labels for layer names: "model.layers.3.self_attn.v_proj" -> "3.v_proj".
QStringList shortLayerNames(const std::vector<std::string>& layers) {
  QStringList out;
  for (const auto& full : layers) {
    QString name = QString::fromStdString(full);
    if (name.startsWith(QLatin1String("model."))) name.remove(0, 6);
    if (name.startsWith(QLatin1String("layers."))) name.remove(0, 7);
    name.replace(QLatin1String(".self_attn."), QLatin1String("."));
    name.replace(QLatin1String(".mlp."), QLatin1String("."));
    out.append(name);
  }
  if (QSet<QString>(out.begin(), out.end()).size() != out.size()) {
    out.clear();
    for (const auto& full : layers) out.append(QString::fromStdString(full));
  }
  return out;
}

// Past this many layers a per-layer chart labels transformer blocks, not layers.
constexpr int kMostLayerLabels = 48;

// Consecutive runs of layers in one transformer block ("12.q_proj", "12.k_proj", ...): each
// block's index and the position of its last layer. Empty when a name has no block index or a
// block's layers are not contiguous (then there is nothing simpler to label).
std::vector<std::pair<QString, int>> layerBlocks(const QStringList& names) {
  std::vector<std::pair<QString, int>> blocks;
  QSet<QString> seen;
  for (int i = 0; i < names.size(); ++i) {
    const int dot = names[i].indexOf(QLatin1Char('.'));
    bool numeric = false;
    if (dot > 0) names[i].left(dot).toInt(&numeric);
    if (!numeric) return {};
    const QString block = names[i].left(dot);
    if (!blocks.empty() && blocks.back().first == block) {
      blocks.back().second = i;
      continue;
    }
    if (seen.contains(block)) return {};
    seen.insert(block);
    blocks.emplace_back(block, i);
  }
  return blocks;
}

}  // namespace

// ---- Specs and colours --------------------------------------------------------------------------

CurveChartSpec trainLossChartSpec() {
  CurveChartSpec spec;
  spec.series = "train/loss";
  spec.title = QStringLiteral("Training loss");
  spec.yTitle = QStringLiteral("loss per token (nats, log scale; QAD: KL to the teacher)");
  spec.smoothing = 0.9;
  return spec;
}

CurveChartSpec valLossChartSpec() {
  CurveChartSpec spec;
  spec.series = "eval/val_loss";
  spec.title = QStringLiteral("Validation loss");
  spec.yTitle = QStringLiteral("cross-entropy per token (nats, log scale)");
  return spec;
}

CurveChartSpec valKlChartSpec() {
  CurveChartSpec spec;
  spec.series = "eval/val_kl";
  spec.title = QStringLiteral("KL divergence to the SFT model (validation)");
  spec.yTitle = QStringLiteral("KL(SFT \u2016 run) per token (nats, log scale)");
  return spec;
}

CurveChartSpec recoveryChartSpec(std::vector<std::string> levels) {
  CurveChartSpec spec;
  spec.series = "eval/val_loss";
  spec.title = QStringLiteral("Validation loss from the SFT model: QAT and QAD against PTQ");
  spec.yTitle = QStringLiteral("cross-entropy per token (nats)");
  spec.logY = false;  // the levels and curves lie within a few percent of each other
  spec.levels = std::move(levels);
  return spec;
}

LayerChartSpec layerErrorChartSpec() {
  LayerChartSpec spec;
  spec.metric = "rel_l2";
  spec.title = QStringLiteral("Weight quantization error per layer");
  spec.yTitle = QStringLiteral(
      "relative L2 error \u2016Q(W) \u2212 W\u2016 / \u2016W\u2016 (lower is better)");
  return spec;
}

QColor runColour(const std::string& runName) {
  // Okabe and Ito's colour-blind safe palette: blues and greens for MXFP4, oranges and purples for
  // NVFP4, black for the BF16 model everything is compared with.
  static const std::map<std::string, QColor> fixed = {
      {"sft", QColor(0x00, 0x00, 0x00)},
      {"base", QColor(0x99, 0x99, 0x99)},
      {"ptq-mxfp4", QColor(0x56, 0xb4, 0xe9)},
      {"qat-mxfp4", QColor(0x00, 0x72, 0xb2)},
      {"qad-mxfp4", QColor(0x00, 0x9e, 0x73)},
      {"ptq-nvfp4", QColor(0xe6, 0x9f, 0x00)},
      {"qat-nvfp4", QColor(0xd5, 0x5e, 0x00)},
      {"qad-nvfp4", QColor(0xcc, 0x79, 0xa7)},
      {"qat-from-base-mxfp4", QColor(0x88, 0x22, 0x55)},
      {"qat-from-base-nvfp4", QColor(0x44, 0xaa, 0x99)},
  };
  const auto it = fixed.find(runName);
  if (it != fixed.end()) return it->second;
  // Paul Tol's "muted" palette, by a hash of the name that does not change between processes.
  static const QColor muted[] = {
      QColor(0x33, 0x22, 0x88), QColor(0x88, 0xcc, 0xee), QColor(0x44, 0xaa, 0x99),
      QColor(0x11, 0x77, 0x33), QColor(0x99, 0x99, 0x33), QColor(0xdd, 0xcc, 0x77),
      QColor(0xcc, 0x66, 0x77), QColor(0x88, 0x22, 0x55), QColor(0xaa, 0x44, 0x99)};
  uint32_t hash = 2166136261u;  // FNV-1a
  for (unsigned char c : runName) hash = (hash ^ c) * 16777619u;
  return muted[hash % (sizeof muted / sizeof muted[0])];
}

// ---- Curve charts -------------------------------------------------------------------------------

std::unique_ptr<QChart> makeCurveChart(const CurveChartSpec& spec,
                                       const std::vector<RunCurves>& runs) {
  auto chart = std::make_unique<QChart>();
  styleChart(*chart, spec.title);
  auto* x = new QValueAxis;
  styleAxis(*x, spec.xTitle);
  x->setLabelFormat(QStringLiteral("%d"));
  chart->addAxis(x, Qt::AlignBottom);
  QValueAxis* y = spec.logY ? new QCategoryAxis : new QValueAxis;
  styleAxis(*y, spec.yTitle);
  if (auto* category = qobject_cast<QCategoryAxis*>(y))
    category->setLabelsPosition(QCategoryAxis::AxisLabelsPositionOnValue);
  chart->addAxis(y, Qt::AlignLeft);
  updateCurveChart(*chart, spec, runs);
  return chart;
}

void updateCurveChart(QChart& chart, const CurveChartSpec& spec,
                      const std::vector<RunCurves>& runs) {
  auto* xAxis = qobject_cast<QValueAxis*>(chart.axes(Qt::Horizontal).value(0));
  auto* yAxis = qobject_cast<QValueAxis*>(chart.axes(Qt::Vertical).value(0));
  if (!xAxis || !yAxis) return;  // not a chart made by makeCurveChart
  double xMax = 0, yMin = std::numeric_limits<double>::infinity(), yMax = -yMin;
  std::set<QString> keep;
  std::map<std::string, int> repeats;                       // group -> repeats drawn
  std::vector<std::pair<const RunCurves*, double>> levels;  // in the order of spec.levels

  for (const std::string& level : spec.levels) {
    for (const RunCurves& run : runs) {
      if (run.name != level || run.isRepeat()) continue;
      const Points points = run.series(spec.series);
      if (points.empty()) continue;
      const double v = points.back().second;
      if (spec.logY && !(v > 0)) continue;
      levels.emplace_back(&run, v);
      yMin = std::min(yMin, spec.logY ? std::log10(v) : v);
      yMax = std::max(yMax, spec.logY ? std::log10(v) : v);
    }
  }
  for (const RunCurves& run : runs) {
    const QString name = QString::fromStdString(run.name);
    if (std::find(spec.levels.begin(), spec.levels.end(), run.name) != spec.levels.end() &&
        !run.isRepeat())
      continue;  // drawn as a level below
    Points raw = run.series(spec.series);
    Points shown = raw;
    if (spec.smoothing > 0) {
      std::vector<double> values;
      values.reserve(raw.size());
      for (const auto& p : raw) values.push_back(p.second);
      const std::vector<double> smooth = detail::debiasedEma(values, spec.smoothing);
      for (size_t i = 0; i < shown.size(); ++i) shown[i].second = smooth[i];
    }
    if (spec.logY) {
      for (Points* points : {&raw, &shown}) {
        Points positive;
        positive.reserve(points->size());
        for (const auto& [px, py] : *points)
          if (py > 0 && std::isfinite(py)) positive.emplace_back(px, std::log10(py));
        *points = std::move(positive);
      }
    }
    // Its old series, if any, is removed below.
    if (shown.empty() || (spec.skipRunsWithoutSteps && run.lastTrainStep() == 0)) continue;
    const bool repeat = run.isRepeat();
    if (repeat) ++repeats[run.group];
    const QColor colour = runColour(repeat ? run.group : run.name);
    if (spec.smoothing > 0 && !repeat) {  // repeats: the smoothed curve only, to keep it legible
      const QString rawKey = kRawPrefix + name;
      keep.insert(rawKey);
      QColor faint = colour;
      faint.setAlpha(60);
      QPen pen(faint);
      pen.setWidthF(1.0);
      QLineSeries* series = findSeries(chart, rawKey);
      if (!series)
        series = addLineSeries(chart, rawKey, name + QStringLiteral(" (raw)"), pen, false);
      series->replace(toQPoints(detail::downsampleLast(raw, spec.buckets)));
    }
    const QString key = kRunPrefix + name;
    keep.insert(key);
    QPen pen(colour);
    pen.setWidthF(repeat ? 1.2 : 2.0);
    if (repeat) pen.setStyle(Qt::DashLine);
    QLineSeries* series = findSeries(chart, key);
    if (!series) series = addLineSeries(chart, key, name, pen, !repeat);
    series->replace(toQPoints(detail::downsampleLast(shown, spec.buckets)));
    series->setPointsVisible(shown.size() == 1);
    for (const Points* points : {&raw, &shown}) {
      for (const auto& [px, py] : *points) {
        xMax = std::max(xMax, px);
        yMin = std::min(yMin, py);
        yMax = std::max(yMax, py);
      }
    }
  }
  // The levels span the curves' steps, and come after them (drawn on top, listed last).
  const double xEnd = xMax > 0 ? xMax : 1;
  for (const auto& [run, v] : levels) {
    const QString name = QString::fromStdString(run->name), key = kLevelPrefix + name;
    keep.insert(key);
    QPen pen(runColour(run->name));
    pen.setWidthF(2.5);
    pen.setDashPattern({4, 2});  // in pen widths: long dashes, so the colour reads at a glance
    QLineSeries* series = findSeries(chart, key);
    if (!series) series = addLineSeries(chart, key, name, pen, true);
    series->setName(name + QStringLiteral(": ") + formatValue(v));
    const double y = spec.logY ? std::log10(v) : v;
    series->replace(QList<QPointF>{QPointF(0, y), QPointF(xEnd, y)});
  }
  for (QAbstractSeries* s : chart.series()) {
    if (!keep.count(s->objectName())) {
      chart.removeSeries(s);
      delete s;
    }
  }
  // A run's legend entry counts its repeats; the title says how they are drawn.
  for (const RunCurves& run : runs) {
    if (run.isRepeat()) continue;
    QLineSeries* series = findSeries(chart, kRunPrefix + QString::fromStdString(run.name));
    if (!series) continue;
    const auto n = repeats.find(run.name);
    series->setName(
        QString::fromStdString(run.name) +
        (n == repeats.end()
             ? QString()
             : QStringLiteral(" \u00d7%1").arg(n->second + 1)));  // "qat-mxfp4 ×3": 3 seeds
  }
  chart.setTitle(spec.title +
                 (repeats.empty() ? QString() : QStringLiteral(" (dashed: other run seeds)")));

  xAxis->setRange(0, xMax > 0 ? xMax : 1);
  xAxis->applyNiceNumbers();
  if (!(yMin <= yMax)) yMin = spec.logY ? -1 : 0, yMax = spec.logY ? 0 : 1;
  const double span = yMax - yMin;
  const double pad = span > 0 ? 0.04 * span : (spec.logY ? 0.05 : 0.05 * std::abs(yMax) + 0.01);
  if (auto* category = qobject_cast<QCategoryAxis*>(yAxis)) {
    // A log axis: the series hold log10(y); labels name the values at 1-2-5 (or finer) steps.
    const double lo = yMin - pad, hi = yMax + pad;
    for (const QString& label : category->categoriesLabels()) category->remove(label);
    category->setStartValue(lo);
    for (double v : detail::logAxisLabels(std::pow(10.0, lo), std::pow(10.0, hi)))
      category->append(formatValue(v), std::log10(v));
    category->setRange(lo, hi);
  } else {
    yAxis->setRange(yMin - pad, yMax + pad);
    yAxis->applyNiceNumbers();
    yAxis->setLabelFormat(QStringLiteral("%g"));
  }
}

std::vector<std::string> chartRuns(const QChart& chart) {
  std::vector<std::string> names, levels;
  for (QAbstractSeries* s : chart.series()) {
    if (auto* bars = qobject_cast<QAbstractBarSeries*>(s)) {
      for (const QBarSet* set : bars->barSets()) names.push_back(set->objectName().toStdString());
      continue;
    }
    if (s->objectName().startsWith(kRawPrefix)) continue;
    QString name = s->objectName();
    if (name.startsWith(kRunPrefix)) name.remove(0, kRunPrefix.size());
    if (name.startsWith(kLevelPrefix)) {
      levels.push_back(name.remove(0, kLevelPrefix.size()).toStdString());
      continue;
    }
    names.push_back(name.toStdString());
  }
  names.insert(names.end(), levels.begin(), levels.end());
  return names;
}

// ---- Per-layer charts ---------------------------------------------------------------------------

std::unique_ptr<QChart> makeLayerChart(const LayerChartSpec& spec,
                                       const std::vector<RunCurves>& runs) {
  auto chart = std::make_unique<QChart>();
  styleChart(*chart, spec.title);
  std::vector<std::string> layers;
  std::vector<const RunCurves*> drawn;
  for (const RunCurves& run : runs) {
    if (run.lastQuantRow(spec.metric).empty()) continue;
    drawn.push_back(&run);
    for (const auto& layer : run.quantLayers)
      if (std::find(layers.begin(), layers.end(), layer) == layers.end()) layers.push_back(layer);
  }
  auto* bars = new QBarSeries;
  bars->setBarWidth(0.8);
  double yMax = 0;
  for (const RunCurves* run : drawn) {
    const std::vector<float> values = run->lastQuantRow(spec.metric);
    auto* set = new QBarSet(QString());
    set->setObjectName(QString::fromStdString(run->name));
    double sum = 0;
    int measured = 0;
    for (const auto& layer : layers) {
      const auto at = std::find(run->quantLayers.begin(), run->quantLayers.end(), layer);
      const double v =
          at == run->quantLayers.end() ? kNaN : values[size_t(at - run->quantLayers.begin())];
      // A layer this run did not quantize (or did not measure) has no bar.
      set->append(std::isfinite(v) ? v : 0.0);
      if (std::isfinite(v)) yMax = std::max(yMax, v), sum += v, ++measured;
    }
    set->setLabel(QString::fromStdString(run->name) + QStringLiteral(" (mean ") +
                  formatValue(measured ? sum / measured : kNaN) + QStringLiteral(")"));
    bars->append(set);
  }
  chart->addSeries(bars);
  // Colours after addSeries, so the theme does not replace them.
  for (QBarSet* set : bars->barSets()) {
    const QColor colour = runColour(set->objectName().toStdString());
    set->setColor(colour);
    set->setBorderColor(colour);
  }
  const QStringList names = shortLayerNames(layers);
  const std::vector<std::pair<QString, int>> blocks = layerBlocks(names);
  QAbstractAxis* x;
  if (names.size() > kMostLayerLabels && !blocks.empty()) {
    // A real model has hundreds of layers: one label each would be an unreadable smear. Label
    // the transformer blocks instead, with a grid line between them.
    auto* byBlock = new QCategoryAxis;
    byBlock->setLabelsPosition(QCategoryAxis::AxisLabelsPositionCenter);
    byBlock->setStartValue(-0.5);
    for (const auto& [block, end] : blocks) byBlock->append(block, end + 0.5);
    byBlock->setRange(-0.5, names.size() - 0.5);
    styleAxis(*byBlock, QStringLiteral("transformer block (bars: its projections in order)"));
    x = byBlock;
  } else {
    auto* byLayer = new QBarCategoryAxis;
    byLayer->append(names);
    styleAxis(*byLayer, QStringLiteral("layer (index.projection)"));
    byLayer->setLabelsAngle(-90);
    byLayer->setGridLineVisible(false);
    x = byLayer;
  }
  chart->addAxis(x, Qt::AlignBottom);
  bars->attachAxis(x);
  auto* y = new QValueAxis;
  styleAxis(*y, spec.yTitle);
  y->setRange(0, yMax > 0 ? yMax * 1.08 : 1);
  y->applyNiceNumbers();
  y->setLabelFormat(QStringLiteral("%g"));
  chart->addAxis(y, Qt::AlignLeft);
  bars->attachAxis(y);
  return chart;
}

// ---- Helpers ------------------------------------------------------------------------------------

namespace detail {

std::vector<double> debiasedEma(const std::vector<double>& y, double weight) {
  std::vector<double> out(y.size());
  double last = 0, power = 1;
  int n = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    if (!std::isfinite(y[i])) {
      out[i] = y[i];
      continue;
    }
    last = last * weight + (1 - weight) * y[i];
    ++n;
    // weight^n underflows after a few thousand points, and pow's underflow path is slow: past
    // 1e-300 the correction is exactly 1.
    if (power > 1e-300) power = std::pow(weight, n);
    const double debias = power > 1e-300 ? 1 - power : 1.0;
    out[i] = debias > 0 ? last / debias : y[i];
  }
  return out;
}

Points downsampleLast(const Points& points, int buckets) {
  if (buckets < 1 || points.size() <= size_t(2 * buckets)) return points;
  const double x0 = points.front().first, x1 = points.back().first;
  const double width = (x1 - x0) / buckets;
  if (!(width > 0)) return {points.back()};
  Points out;
  out.reserve(size_t(buckets) + 1);
  out.push_back(points.front());
  for (size_t i = 1; i < points.size(); ++i) {
    const auto bucket = [&](double x) {
      return std::min(int64_t((x - x0) / width), int64_t(buckets - 1));
    };
    const bool lastOfBucket =
        i + 1 == points.size() || bucket(points[i + 1].first) != bucket(points[i].first);
    if (lastOfBucket) out.push_back(points[i]);
  }
  return out;
}

std::vector<std::pair<double, std::string>> linearAxisLabels(double lo, double hi, int maxLabels,
                                                             double* stepOut) {
  std::vector<std::pair<double, std::string>> out;
  if (!(lo <= hi) || !std::isfinite(lo) || !std::isfinite(hi)) return out;
  maxLabels = std::max(2, maxLabels);
  const double span = hi > lo ? hi - lo : std::max(1.0, std::abs(hi));
  const double rough = span / maxLabels, mag = std::pow(10.0, std::floor(std::log10(rough)));
  const double m = rough / mag * (1 - 1e-9);  // 2.0000000001 is 2
  const double step = (m > 5 ? 10 : m > 2 ? 5 : m > 1 ? 2 : 1) * mag;
  if (stepOut) *stepOut = step;
  const double largest = std::max(std::abs(lo), std::abs(hi));
  double unit = 1;
  const char* suffix = "";
  for (const auto& [u, s] :
       {std::pair<double, const char*>{1e12, "T"}, {1e9, "B"}, {1e6, "M"}, {1e3, "k"}})
    if (largest >= 10 * u || (u > 1e3 && largest >= u)) {
      unit = u, suffix = s;
      break;
    }
  const int decimals = std::clamp(int(std::ceil(-std::log10(step / unit) - 1e-9)), 0, 9);
  for (double k = std::ceil(lo / step - 1e-9); k * step <= hi + step * 1e-9; ++k) {
    double v = k * step;
    if (std::abs(v) < step * 1e-9) v = 0;  // no "-0"
    char text[64];
    std::snprintf(text, sizeof text, "%.*f%s", decimals, v / unit, v == 0 ? "" : suffix);
    out.emplace_back(v, text);
  }
  return out;
}

std::vector<double> logAxisLabels(double lo, double hi, int maxLabels) {
  std::vector<double> labels;
  if (!(lo > 0) || !(hi > lo) || maxLabels < 1) return labels;
  // Mantissas from the finest ladder to the coarsest; the first that fits is used. Neighbours must
  // also be at least 1/(2 * maxLabels) of the axis apart, so labels do not touch.
  const std::vector<std::vector<double>> ladders = {
      {1, 1.5, 2, 2.5, 3, 4, 5, 6, 7, 8, 9}, {1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 2, 5}, {1}};
  const double span = std::log10(hi) - std::log10(lo), minGap = span / (2.0 * maxLabels);
  for (const auto& ladder : ladders) {
    labels.clear();
    for (int e = int(std::floor(std::log10(lo))); e <= int(std::ceil(std::log10(hi))); ++e) {
      for (double m : ladder) {
        // Rounded through the string form, so 3 x 10^-2 is 0.03 and not 0.030000000000000002.
        const double v = QString::number(m * std::pow(10.0, e), 'g', 6).toDouble();
        if (v >= lo && v <= hi) labels.push_back(v);
      }
    }
    bool spaced = int(labels.size()) <= maxLabels;
    for (size_t i = 1; spaced && i < labels.size(); ++i)
      spaced = std::log10(labels[i] / labels[i - 1]) >= minGap;
    if (spaced) break;
  }
  if (labels.size() >= 2) return labels;
  // A range narrower than the finest ladder's steps: evenly spaced values at a 1-2-5 step.
  const double rough = (hi - lo) / 5, magnitude = std::pow(10.0, std::floor(std::log10(rough)));
  const double step = rough / magnitude >= 5   ? 5 * magnitude
                      : rough / magnitude >= 2 ? 2 * magnitude
                                               : magnitude;
  labels.clear();
  for (double k = std::ceil(lo / step); k * step <= hi; ++k)
    labels.push_back(QString::number(k * step, 'g', 6).toDouble());
  return labels;
}

}  // namespace detail

}  // namespace fp4lab::widgets
