// The quantization inspector tab: run view, layer view, model view.
#include "fp4lab/widgets/quant_inspector.h"

#include <QAbstractButton>
#include <QAbstractScrollArea>
#include <QCoreApplication>
#include <QApplication>
#include <QChart>
#include <QChartView>
#include <QComboBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineSeries>
#include <QMouseEvent>
#include <QPainter>
#include <QPointer>
#include <QPushButton>
#include <QSplitter>
#include <QTabBar>
#include <QTabWidget>
#include <QTableView>
#include <QThreadPool>
#include <QToolTip>
#include <QVBoxLayout>

#include "fp4lab/widgets/flow_layout.h"
#include <QValueAxis>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <map>

#include "fp4lab/analyze/analyze.h"
#include "fp4lab/common/files.h"
#include "fp4lab/log/run_log.h"
#include "fp4lab/widgets/frontier_chart.h"
#include "fp4lab/widgets/heatmap_widget.h"
#include "fp4lab/widgets/run_charts.h"
#include "fp4lab/widgets/run_table_model.h"

namespace fp4lab::widgets {

namespace {

QString q(const std::string& s) {
  return QString::fromStdString(s);
}

QLabel* noteLabel(const QString& description) {
  auto* l = new QLabel;
  l->setWordWrap(true);
  l->setTextInteractionFlags(Qt::TextSelectableByMouse);
  l->setAccessibleDescription(description);
  return l;
}

template <class W>
W* named(W* w, const QString& name, const QString& tip) {
  w->setObjectName(name);
  w->setAccessibleName(name);
  w->setToolTip(tip);
  return w;
}

// An E4M3 code's value (sign, 4 exponent bits with bias 7, 3 mantissa bits; 0x7f/0xff NaN).
double e4m3Value(int code) {
  const int e = (code >> 3) & 0xf, m = code & 7;
  if ((code & 0x7f) == 0x7f) return NAN;
  const double v = e == 0 ? m / 8.0 * std::ldexp(1.0, -6) : (1 + m / 8.0) * std::ldexp(1.0, e - 7);
  return (code & 0x80) ? -v : v;
}

}  // namespace

// ---- Matrices -----------------------------------------------------------------------------------

namespace detail {

QString shortLayerName(const std::string& module) {
  static const std::string prefix = "model.layers.";
  if (module.rfind(prefix, 0) == 0) return q(module.substr(prefix.size()));
  if (module.rfind("model.", 0) == 0) return q(module.substr(6));
  return q(module);
}

QuantMatrix runMatrix(const RunCurves& run, const std::string& metric) {
  QuantMatrix m;
  const auto it = run.quant.find(metric);
  const size_t layers = run.quantLayers.size(), rows = run.quantSteps.size();
  if (it == run.quant.end() || layers == 0 || rows == 0 || it->second.size() < rows * layers)
    return m;
  m.rows = int(layers);
  m.cols = int(rows);
  m.values.resize(layers * rows);
  for (size_t l = 0; l < layers; ++l)
    for (size_t k = 0; k < rows; ++k) m.values[l * rows + k] = it->second[k * layers + l];
  for (const auto& name : run.quantLayers) m.rowLabels << shortLayerName(name);
  for (int64_t s : run.quantSteps) m.colLabels << QStringLiteral("step %1").arg(s);
  m.steps = run.quantSteps;
  return m;
}

QuantMatrix differenceMatrix(const RunCurves& a, const RunCurves& b, const std::string& metric) {
  QuantMatrix m = runMatrix(a, metric);
  if (m.rows == 0) return m;
  std::map<std::string, size_t> layerInB;
  for (size_t l = 0; l < b.quantLayers.size(); ++l) layerInB.emplace(b.quantLayers[l], l);
  std::map<int64_t, size_t> rowInB;  // the last row of each step
  for (size_t k = 0; k < b.quantSteps.size(); ++k) rowInB[b.quantSteps[k]] = k;
  const auto it = b.quant.find(metric);
  const bool bHas =
      it != b.quant.end() && it->second.size() >= b.quantSteps.size() * b.quantLayers.size();
  std::vector<int> colRow(size_t(m.cols), -1);
  for (int k = 0; k < m.cols; ++k)
    if (const auto r = rowInB.find(m.steps[size_t(k)]); r != rowInB.end())
      colRow[k] = int(r->second);
  m.missingSteps = int(std::count(colRow.begin(), colRow.end(), -1));
  const size_t lb = b.quantLayers.size();
  for (int l = 0; l < m.rows; ++l) {
    const auto found = layerInB.find(a.quantLayers[size_t(l)]);
    if (found == layerInB.end()) ++m.missingLayers;
    for (int k = 0; k < m.cols; ++k) {
      float& v = m.values[size_t(l) * size_t(m.cols) + size_t(k)];
      if (!bHas || found == layerInB.end() || colRow[k] < 0) {
        v = NAN;
        continue;
      }
      const float vb = it->second[size_t(colRow[k]) * lb + found->second];
      v = (std::isfinite(v) && std::isfinite(vb)) ? v - vb : NAN;
    }
  }
  return m;
}

int blockGridColumns(int64_t blocks, int64_t rows) {
  if (blocks <= 0) return 0;
  if (rows > 0 && blocks % rows == 0) return int(blocks / rows);
  int best = 1;
  const int64_t root = int64_t(std::sqrt(double(blocks)));
  for (int64_t d = 1; d <= root; ++d)
    if (blocks % d == 0) best = int(d);
  return int(blocks / best);  // the wider side across
}

}  // namespace detail

// ---- Worst layers -------------------------------------------------------------------------------

WorstLayersModel::WorstLayersModel(QObject* parent) : QAbstractTableModel(parent) {}

void WorstLayersModel::setValues(const std::vector<std::string>& layers,
                                 const std::vector<float>& values, bool higherIsWorse,
                                 const QString& valueHeader) {
  beginResetModel();
  m_rows.clear();
  m_notMeasured = 0;
  m_header = valueHeader;
  for (size_t l = 0; l < layers.size() && l < values.size(); ++l) {
    if (std::isfinite(values[l]))
      m_rows.push_back({int(l), layers[l], values[l]});
    else
      ++m_notMeasured;
  }
  std::stable_sort(m_rows.begin(), m_rows.end(), [higherIsWorse](const Row& x, const Row& y) {
    return higherIsWorse ? x.value > y.value : x.value < y.value;
  });
  endResetModel();
}

void WorstLayersModel::clear() {
  beginResetModel();
  m_rows.clear();
  m_notMeasured = 0;
  endResetModel();
}

int WorstLayersModel::layerOf(int row) const {
  return row >= 0 && row < int(m_rows.size()) ? m_rows[size_t(row)].layer : -1;
}

int WorstLayersModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : int(m_rows.size());
}

int WorstLayersModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : 2;
}

QVariant WorstLayersModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= int(m_rows.size()) || index.column() > 1) return {};
  const Row& r = m_rows[size_t(index.row())];
  if (role == Qt::DisplayRole)
    return index.column() == 0 ? detail::shortLayerName(r.name) : significant(double(r.value), 4);
  if (role == Qt::ToolTipRole) return q(r.name);
  if (role == Qt::UserRole)
    return index.column() == 0 ? QVariant(r.layer) : QVariant(double(r.value));
  if (role == Qt::TextAlignmentRole && index.column() == 1)
    return QVariant(Qt::AlignRight | Qt::AlignVCenter);
  return {};
}

QVariant WorstLayersModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (role != Qt::DisplayRole) return {};
  if (orientation == Qt::Vertical) return section + 1;  // the rank
  if (section == 0) return QStringLiteral("layer");
  if (section == 1) return m_header;
  return {};
}

// ---- Bar charts ---------------------------------------------------------------------------------

BarChartWidget::BarChartWidget(QWidget* parent) : QWidget(parent) {
  setMinimumSize(150, 110);
  setMouseTracking(true);
  setEmptyText(QStringLiteral("No data."));
}

void BarChartWidget::setBars(std::vector<double> values, QStringList labels, const QString& title) {
  m_values = std::move(values);
  m_labels = std::move(labels);
  m_title = title;
  m_empty.clear();
  setAccessibleDescription(QStringLiteral("%1: %2 bars").arg(title).arg(m_values.size()));
  update();
}

void BarChartWidget::setEmptyText(const QString& text) {
  m_values.clear();
  m_labels.clear();
  m_empty = text;
  setAccessibleDescription(text);
  update();
}

void BarChartWidget::paint(QPainter& p, const QSize& size) const {
  const QFontMetricsF fm(font());
  p.setPen(palette().color(QPalette::WindowText));
  if (m_values.empty()) {
    p.drawText(QRectF(8, 8, size.width() - 16, size.height() - 16),
               Qt::AlignCenter | Qt::TextWordWrap, m_empty);
    return;
  }
  p.drawText(QRectF(0, 0, size.width(), fm.height() + 4), Qt::AlignHCenter | Qt::AlignVCenter,
             fm.elidedText(m_title, Qt::ElideRight, size.width() - 8));
  const double maxV = *std::max_element(m_values.begin(), m_values.end());
  const QString maxText = QString::number(maxV, 'g', 4);
  const double left = fm.horizontalAdvance(maxText) + 8;
  const QRectF plot(left, fm.height() + 6, std::max(1.0, size.width() - left - 8),
                    std::max(1.0, size.height() - 2 * fm.height() - 14));
  p.drawText(QRectF(0, plot.top() - fm.height() / 2, left - 4, fm.height()), Qt::AlignRight,
             maxText);
  p.drawText(QRectF(0, plot.bottom() - fm.height(), left - 4, fm.height()), Qt::AlignRight,
             QStringLiteral("0"));
  const double w = plot.width() / double(m_values.size());
  const QColor bar = palette().color(QPalette::Highlight);
  for (size_t i = 0; i < m_values.size(); ++i) {
    const double h = maxV > 0 ? m_values[i] / maxV * plot.height() : 0;
    p.fillRect(QRectF(plot.left() + i * w + (w > 3 ? 0.5 : 0), plot.bottom() - h,
                      std::max(1.0, w - (w > 3 ? 1 : 0)), h),
               bar);
  }
  p.drawLine(plot.bottomLeft(), plot.bottomRight());
  double lastRight = -1e9;
  for (int i = 0; i < int(m_values.size()) && i < m_labels.size(); ++i) {
    if (m_labels[i].isEmpty()) continue;
    const double tw = fm.horizontalAdvance(m_labels[i]);
    const double x = std::clamp(plot.left() + (i + 0.5) * w - tw / 2, 0.0, size.width() - tw);
    if (x < lastRight + 8) continue;
    p.drawText(QRectF(x, plot.bottom() + 2, tw + 2, fm.height()), Qt::AlignLeft, m_labels[i]);
    lastRight = x + tw;
  }
}

void BarChartWidget::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), palette().color(QPalette::Base));
  paint(p, size());
}

void BarChartWidget::mouseMoveEvent(QMouseEvent* event) {
  if (m_values.empty()) return;
  const QFontMetricsF fm(font());
  const double maxV = *std::max_element(m_values.begin(), m_values.end());
  const double left = fm.horizontalAdvance(QString::number(maxV, 'g', 4)) + 8;
  const double w = std::max(1.0, width() - left - 8) / double(m_values.size());
  const int i = int((event->position().x() - left) / w);
  if (i < 0 || i >= int(m_values.size())) return QToolTip::hideText();
  QToolTip::showText(event->globalPosition().toPoint(),
                     QStringLiteral("%1: %2")
                         .arg(i < m_labels.size() ? m_labels[i] : QString())
                         .arg(m_values[size_t(i)], 0, 'g', 6),
                     this);
}

// ---- The inspector ------------------------------------------------------------------------------

QuantInspector::QuantInspector(QWidget* parent) : QWidget(parent) {
  setObjectName(QStringLiteral("quantization inspector"));
  m_worst = new WorstLayersModel(this);
  m_views = named(new QTabWidget, QStringLiteral("inspector views"),
                  QStringLiteral("the run, layer and model views of the inspector"));
  auto* runPage = new QWidget;
  auto* layerPage = new QWidget;
  auto* modelPage = new QWidget;
  buildRunView(runPage);
  buildLayerView(layerPage);
  buildModelView(modelPage);
  m_views->addTab(runPage, QStringLiteral("&Run view"));
  m_views->addTab(layerPage, QStringLiteral("&Layer view"));
  m_views->addTab(modelPage, QStringLiteral("&Model view"));
  // The views' size is the shown one's: a tab widget otherwise sizes every page to the widest
  // (the layer view's four histograms), making the small run view scroll sideways too.
  const auto sizeToCurrent = [this](int current) {
    for (int i = 0; i < m_views->count(); ++i)
      m_views->widget(i)->setSizePolicy(
          i == current ? QSizePolicy::Preferred : QSizePolicy::Ignored,
          i == current ? QSizePolicy::Preferred : QSizePolicy::Ignored);
    m_views->updateGeometry();
  };
  connect(m_views, &QTabWidget::currentChanged, this, sizeToCurrent);
  sizeToCurrent(m_views->currentIndex());
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addWidget(m_views);
  refreshRunView();
}

QuantInspector::~QuantInspector() = default;

void QuantInspector::buildRunView(QWidget* page) {
  auto* bar = new FlowLayout;
  auto* aLabel = new QLabel(QStringLiteral("Run &A:"));
  m_runA = named(new QComboBox, QStringLiteral("inspector run A"),
                 QStringLiteral("the run whose layers are shown (the runs table's selection)"));
  m_runA->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  m_runA->setMinimumContentsLength(14);
  aLabel->setBuddy(m_runA);
  auto* bLabel = new QLabel(QStringLiteral("minus run &B:"));
  m_runB = named(new QComboBox, QStringLiteral("inspector run B"),
                 QStringLiteral("a second run: the map shows A − B on a diverging scale"));
  m_runB->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  m_runB->setMinimumContentsLength(14);
  bLabel->setBuddy(m_runB);
  auto* mLabel = new QLabel(QStringLiteral("&Metric:"));
  m_metricBox = named(new QComboBox, QStringLiteral("inspector metric"),
                      QStringLiteral("the /quant metric of the heatmap and the worst-layers list"));
  m_metricBox->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  mLabel->setBuddy(m_metricBox);
  bar->addWidget(flowGroup({aLabel, m_runA}));
  bar->addWidget(flowGroup({bLabel, m_runB}), 6);
  bar->addWidget(flowGroup({mLabel, m_metricBox}), 6);

  m_runMap = named(new HeatmapWidget, QStringLiteral("layer heatmap"),
                   QStringLiteral("layers (rows) by evaluations (columns); click a layer for its "
                                  "layer view, wheel to zoom, right-click to export"));
  m_runMap->setCornerLabels(QStringLiteral("layer"), QString());
  auto* worstBox = new QWidget;
  auto* worstLayout = new QVBoxLayout(worstBox);
  worstLayout->setContentsMargins(0, 0, 0, 0);
  auto* worstLabel = m_worstLabel = new QLabel(QStringLiteral("&Worst layers:"));
  worstBox->setMinimumWidth(230);
  m_worstView = named(new QTableView, QStringLiteral("worst layers"),
                      QStringLiteral("the layers sorted worst first at the last evaluation; "
                                     "double-click one for its layer view"));
  m_worstView->setModel(m_worst);
  m_worstView->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_worstView->setSelectionMode(QAbstractItemView::SingleSelection);
  m_worstView->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
  m_worstView->horizontalHeader()->setSectionResizeMode(1, QHeaderView::ResizeToContents);
  m_worstView->verticalHeader()->setDefaultSectionSize(m_worstView->fontMetrics().height() + 4);
  worstLabel->setBuddy(m_worstView);
  // The table's corner button (select all) is Qt's; name it for the accessibility lint.
  for (QAbstractButton* corner : m_worstView->findChildren<QAbstractButton*>())
    named(corner, QStringLiteral("select all worst layers"),
          QStringLiteral("select every row of the worst-layers list"));
  worstLayout->addWidget(worstLabel);
  worstLayout->addWidget(m_worstView, 1);
  auto* split = new QSplitter(Qt::Horizontal);
  m_runSplit = split;
  split->setObjectName(QStringLiteral("inspector run split"));
  split->addWidget(m_runMap);
  split->addWidget(worstBox);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 1);
  split->setSizes({700, 300});
  split->setChildrenCollapsible(false);
  m_runNote = noteLabel(QStringLiteral("run view notes"));
  m_runNote->setObjectName(QStringLiteral("run view note"));

  auto* layout = new QVBoxLayout(page);
  layout->addLayout(bar);
  layout->addWidget(split, 1);
  layout->addWidget(m_runNote);

  connect(m_runA, &QComboBox::activated, this, [this](int i) {
    m_idA = m_runA->itemData(i).toString().toStdString();
    m_layer = -1;
    populateMetricCombo();
    refreshRunView();
    Q_EMIT runSelected(m_idA);
  });
  connect(m_runB, &QComboBox::activated, this,
          [this](int i) { setRunB(m_runB->itemData(i).toString().toStdString()); });
  connect(m_metricBox, &QComboBox::activated, this,
          [this](int i) { setMetric(m_metricBox->itemText(i).toStdString()); });
  connect(m_runMap, &HeatmapWidget::cellActivated, this,
          [this](int row, int col) { showLayer(row, col); });
  connect(m_worstView, &QTableView::doubleClicked, this,
          [this](const QModelIndex& index) { showLayer(m_worst->layerOf(index.row()), -1); });
}

void QuantInspector::buildLayerView(QWidget* page) {
  m_layerTitle = new QLabel;
  m_layerTitle->setAccessibleDescription(QStringLiteral("layer shown"));
  QFont f = m_layerTitle->font();
  f.setBold(true);
  m_layerTitle->setFont(f);
  // A long module path is cut rather than widening the view past a small window (not wrapped: a
  // wrapping label gives the page a height-for-width, and a scroll area then sizes the whole
  // inspector to the tallest page's preferred height).
  m_layerTitle->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  m_layerTitle->setMinimumWidth(120);
  auto* stepLabel = new QLabel(QStringLiteral("&Step:"));
  m_layerStep = named(new QComboBox, QStringLiteral("layer step"),
                      QStringLiteral("the evaluation whose per-block errors are shown (also: "
                                     "click a point of the chart below)"));
  m_layerStep->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  m_layerStep->setEnabled(false);
  stepLabel->setBuddy(m_layerStep);
  auto* bar = new QHBoxLayout;
  bar->addWidget(m_layerTitle, 1);
  bar->addWidget(stepLabel);
  bar->addWidget(m_layerStep);
  m_layerNote = noteLabel(QStringLiteral("layer view notes"));
  m_layerNote->setObjectName(QStringLiteral("layer view note"));
  m_layerBlocks = named(new HeatmapWidget, QStringLiteral("layer block map"),
                        QStringLiteral("each block's mean squared error in run A: weight rows by "
                                       "block columns; wheel to zoom, right-click to export"));
  m_layerBlocks->setCornerLabels(QStringLiteral("row"), QStringLiteral("block MSE"));
  m_layerBlocks->setEmptyText(QStringLiteral("Click a layer in the run view to see its blocks."));
  m_layerBlocksB = named(new HeatmapWidget, QStringLiteral("layer block map B"),
                         QStringLiteral("the same layer's block errors in run B, on the same "
                                        "colour scale as run A's"));
  m_layerBlocksB->setCornerLabels(QStringLiteral("row"), QStringLiteral("block MSE"));
  m_layerBlocksB->hide();  // until a run B is chosen
  m_layerChart = new QChart;
  m_layerChart->legend()->setAlignment(Qt::AlignBottom);
  m_layerChartView = named(new QChartView(m_layerChart), QStringLiteral("layer metric chart"),
                           QStringLiteral("the layer's metric against the optimizer step; click a "
                                          "point of run A for that step's blocks"));
  m_layerChartView->setRenderHint(QPainter::Antialiasing);
  m_layerChartView->setMinimumHeight(240);  // less elides the axis labels
  auto* maps = new QSplitter(Qt::Horizontal);
  maps->setObjectName(QStringLiteral("inspector layer maps"));
  maps->addWidget(m_layerBlocks);
  maps->addWidget(m_layerBlocksB);
  maps->setStretchFactor(0, 1);
  maps->setStretchFactor(1, 1);
  maps->setChildrenCollapsible(false);
  m_layerMaps = maps;
  // The weights of the layer at that step (the run's checkpoint, or its final model), analysed
  // in the run's format: |w| and scale codes, for A and (beside them) B.
  const auto histogram = [](const QString& name, const QString& tip) {
    auto* h = named(new BarChartWidget, name, tip);
    h->setMinimumSize(120, 110);  // four in a row still fit a 1000-pixel window
    return h;
  };
  m_layerWeights = histogram(QStringLiteral("layer weight histogram"),
                             QStringLiteral("run A's weights of the layer at the step shown (its "
                                            "checkpoint), by magnitude (log2 bins)"));
  m_layerScales = histogram(QStringLiteral("layer scale code histogram"),
                            QStringLiteral("run A's block scales of the layer at the step shown"));
  m_layerWeightsB = histogram(QStringLiteral("layer weight histogram B"),
                              QStringLiteral("run B's weights of the layer"));
  m_layerScalesB = histogram(QStringLiteral("layer scale code histogram B"),
                             QStringLiteral("run B's block scales of the layer"));
  for (BarChartWidget* h : {m_layerWeights, m_layerScales})
    h->setEmptyText(QStringLiteral("Click a layer in the run view."));
  m_layerWeightsB->hide();
  m_layerScalesB->hide();
  auto* hists = new QSplitter(Qt::Horizontal);
  hists->setObjectName(QStringLiteral("inspector layer histograms"));
  for (BarChartWidget* h : {m_layerWeights, m_layerScales, m_layerWeightsB, m_layerScalesB}) {
    hists->addWidget(h);
    hists->setStretchFactor(hists->count() - 1, 1);
  }
  hists->setChildrenCollapsible(false);
  m_layerHistograms = hists;
  auto* split = new QSplitter(Qt::Vertical);
  split->setObjectName(QStringLiteral("inspector layer split"));
  split->addWidget(maps);
  split->addWidget(hists);
  split->addWidget(m_layerChartView);
  split->setStretchFactor(0, 4);
  split->setStretchFactor(1, 1);
  split->setStretchFactor(2, 2);
  split->setSizes({520, 150, 260});
  split->setChildrenCollapsible(false);
  auto* layout = new QVBoxLayout(page);
  layout->addLayout(bar);
  layout->addWidget(split, 1);
  layout->addWidget(m_layerNote);
  m_layerTitle->setText(QStringLiteral("No layer chosen"));
  m_layerNote->setText(
      QStringLiteral("Click a layer row of the run view's heatmap, or double-click "
                     "one in the worst-layers list."));
  connect(m_layerStep, &QComboBox::activated, this, [this](int i) {
    m_column = i;
    requestBlocks();
  });
}

void QuantInspector::buildModelView(QWidget* page) {
  auto* bar = new FlowLayout;
  m_openAnalysis = named(new QPushButton(QStringLiteral("&Open analysis\u2026")),
                         QStringLiteral("open analysis"),
                         QStringLiteral("open a file written by fp4lab analyze MODEL --output "
                                        "FILE.h5"));
  m_modelFile = new QLabel(QStringLiteral("no analysis file open"));
  m_modelFile->setAccessibleDescription(QStringLiteral("analysis file"));
  m_modelFile->setTextInteractionFlags(Qt::TextSelectableByMouse);
  // A long path must not set the window's minimum width: it is cut, and whole in the tooltip.
  m_modelFile->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  m_modelFile->setMinimumWidth(120);
  m_modelFile->installEventFilter(this);  // cut in the middle to its width (eventFilter)
  auto* mLabel = new QLabel(QStringLiteral("M&etric:"));
  m_modelMetricBox = named(new QComboBox, QStringLiteral("model metric"),
                           QStringLiteral("the metric of the layers by formats heatmap"));
  m_modelMetricBox->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  for (const auto& m : analyze::metricNames()) m_modelMetricBox->addItem(q(m));
  m_modelMetricBox->setCurrentText(q(m_modelMetric));
  mLabel->setBuddy(m_modelMetricBox);
  m_openSensitivity =
      named(new QPushButton(QStringLiteral("Open &sensitivity\u2026")),
            QStringLiteral("open sensitivity"),
            QStringLiteral("open a file written by fp4lab sensitivity MODEL --data FILE --output "
                           "FILE.h5 (or .json): its size/accuracy frontier under the heatmap"));
  auto* cLabel = new QLabel(QStringLiteral("&Beside:"));
  m_modelCompare = named(new QComboBox, QStringLiteral("model compare format"),
                         QStringLiteral("a second format whose block map and scale codes show "
                                        "beside the clicked cell's, on the same colour scale"));
  m_modelCompare->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  m_modelCompare->addItem(QStringLiteral("(none)"));
  m_modelCompare->setEnabled(false);
  cLabel->setBuddy(m_modelCompare);
  bar->addWidget(m_openAnalysis);
  bar->addWidget(m_openSensitivity);
  bar->addWidget(m_modelFile, 6);
  bar->addWidget(flowGroup({mLabel, m_modelMetricBox}), 6);
  bar->addWidget(flowGroup({cLabel, m_modelCompare}), 6);

  m_modelMap = named(new HeatmapWidget, QStringLiteral("format heatmap"),
                     QStringLiteral("layers (rows) by formats (columns); click a cell for that "
                                    "layer's blocks and histograms"));
  m_modelMap->setCornerLabels(QStringLiteral("layer"), QString());
  m_modelMap->setMinimumHeight(240);  // stacked on a small window, still rows one can read
  m_modelMap->setEmptyText(QStringLiteral(
      "Open an analysis file (File > Open analysis\u2026) written by "
      "`fp4lab analyze MODEL --output FILE.h5` to compare the formats layer by layer."));
  m_modelBlocks = named(new HeatmapWidget, QStringLiteral("model block map"),
                        QStringLiteral("each block's mean squared error in the chosen format"));
  m_modelBlocks->setCornerLabels(QStringLiteral("row"), QStringLiteral("block MSE"));
  m_modelBlocks->setEmptyText(QStringLiteral("Click a cell of the heatmap."));
  m_weightHist = named(new BarChartWidget, QStringLiteral("weight histogram"),
                       QStringLiteral("the layer's weights by magnitude (log2 bins)"));
  m_weightHist->setEmptyText(QStringLiteral("Click a cell of the heatmap."));
  m_scaleHist = named(new BarChartWidget, QStringLiteral("scale code histogram"),
                      QStringLiteral("the blocks by scale code in the chosen format"));
  m_scaleHist->setEmptyText(QStringLiteral("Click a cell of the heatmap."));
  m_modelBlocksB = named(new HeatmapWidget, QStringLiteral("model block map B"),
                         QStringLiteral("the same layer's block errors in the second format"));
  m_modelBlocksB->setCornerLabels(QStringLiteral("row"), QStringLiteral("block MSE"));
  m_modelBlocksB->hide();
  // Two side by side must leave the layers x formats map its room in a small window.
  for (HeatmapWidget* m : {m_modelBlocks, m_modelBlocksB}) m->setMinimumWidth(120);
  m_scaleHistB = named(new BarChartWidget, QStringLiteral("scale code histogram B"),
                       QStringLiteral("the blocks by scale code in the second format"));
  m_scaleHistB->hide();
  const auto pair = [](const char* name, QWidget* a, QWidget* b) {
    auto* split = new QSplitter(Qt::Horizontal);
    split->setObjectName(QString::fromLatin1(name));
    split->addWidget(a);
    split->addWidget(b);
    split->setChildrenCollapsible(false);
    return split;
  };
  auto* right = new QSplitter(Qt::Vertical);
  right->setObjectName(QStringLiteral("inspector model detail split"));
  right->addWidget(pair("inspector model block maps", m_modelBlocks, m_modelBlocksB));
  right->addWidget(m_weightHist);
  right->addWidget(pair("inspector model scale codes", m_scaleHist, m_scaleHistB));
  right->setChildrenCollapsible(false);
  m_frontier = new FrontierChart;
  m_frontier->setObjectName(QStringLiteral("frontier"));
  m_frontier->hide();  // until a sensitivity file is open
  auto* left = new QSplitter(Qt::Vertical);
  left->setObjectName(QStringLiteral("inspector model map split"));
  left->addWidget(m_modelMap);
  left->addWidget(m_frontier);
  left->setChildrenCollapsible(false);
  auto* split = new QSplitter(Qt::Horizontal);
  m_modelSplit = split;
  split->setObjectName(QStringLiteral("inspector model split"));
  split->addWidget(left);
  split->addWidget(right);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  split->setSizes({600, 400});
  split->setChildrenCollapsible(false);
  m_modelNote = noteLabel(QStringLiteral("model view notes"));
  m_modelNote->setObjectName(QStringLiteral("model view note"));
  auto* layout = new QVBoxLayout(page);
  layout->addLayout(bar);
  layout->addWidget(split, 1);
  layout->addWidget(m_modelNote);

  connect(m_openAnalysis, &QPushButton::clicked, this, &QuantInspector::openAnalysisDialog);
  connect(m_openSensitivity, &QPushButton::clicked, this, &QuantInspector::openSensitivityDialog);
  connect(m_modelMetricBox, &QComboBox::activated, this, [this](int i) {
    m_modelMetric = m_modelMetricBox->itemText(i).toStdString();
    refreshModelView();
  });
  connect(m_modelMap, &HeatmapWidget::cellActivated, this,
          [this](int row, int col) { showModelCell(row, col); });
  connect(m_modelCompare, &QComboBox::activated, this, [this](int i) {
    setModelCompareFormat(i > 0 ? m_modelCompare->itemText(i).toStdString() : std::string());
  });
}

QString QuantInspector::runNote() const {
  return m_runNote->text();
}
QString QuantInspector::layerNote() const {
  return m_layerNote->text();
}
QString QuantInspector::modelNote() const {
  return m_modelNote->text();
}

const RunSnapshot* QuantInspector::find(const std::string& id) const {
  if (!m_runs || id.empty()) return nullptr;
  for (const auto& r : *m_runs)
    if (r.id == id) return &r;
  return nullptr;
}

std::string QuantInspector::fingerprint() const {
  std::string f = m_idA + '\n' + m_idB + '\n' + m_metric;
  for (const std::string* id : {&m_idA, &m_idB}) {
    const RunSnapshot* r = find(*id);
    f += '\n' + std::to_string(reinterpret_cast<uintptr_t>(r ? r->curves.get() : nullptr));
  }
  return f;
}

void QuantInspector::setRuns(RunSnapshotsPtr runs) {
  m_runs = std::move(runs);
  populateRunCombos();
  if (m_metricBox->count() == 0) populateMetricCombo();
  m_dirty = true;
  if (isVisible()) refreshRunView();
}

void QuantInspector::setSelectedRun(const std::string& id) {
  if (id.empty() || id == m_idA) return;
  m_idA = id;
  m_layer = -1;
  populateRunCombos();
  populateMetricCombo();
  m_dirty = true;
  if (isVisible()) refreshRunView();
}

void QuantInspector::setRunB(const std::string& id) {
  m_idB = id;
  populateRunCombos();
  m_dirty = true;
  refreshRunView();
  if (m_layer >= 0) {
    refreshLayerChart();
    requestBlocks();
  }
}

void QuantInspector::setMetric(const std::string& metric) {
  m_metric = metric;
  populateMetricCombo();
  m_dirty = true;
  refreshRunView();
  if (m_layer >= 0) refreshLayerChart();
}

void QuantInspector::showView(int index) {
  m_views->setCurrentIndex(index);
}

void QuantInspector::refreshNow() {
  m_dirty = true;
  m_shown.clear();
  refreshRunView();
}

void QuantInspector::showEvent(QShowEvent* event) {
  QWidget::showEvent(event);
  // In a scroll area (the window's tab), the room is the area's, not this widget's own width
  // (which never goes below its minimum): follow the viewport's size.
  if (parentWidget() && !m_watchingParent) {
    parentWidget()->installEventFilter(this);
    m_watchingParent = true;
  }
  fitToWidth();
  if (m_dirty) refreshRunView();
}

int QuantInspector::heightForWidth(int width) const {
  // The shown view's, not the tallest: a tab widget asks every page, and a scroll area would size
  // the inspector to the layer view's height while the model view shows.
  QWidget* page = m_views->currentWidget();
  if (!page) return QWidget::heightForWidth(width);
  const int frame = 24;  // the inspector's and the tab widget's margins and frame
  const int pageHeight = page->hasHeightForWidth() ? page->heightForWidth(width - frame)
                                                   : page->minimumSizeHint().height();
  return pageHeight + m_views->tabBar()->sizeHint().height() + frame;
}

void QuantInspector::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  fitToWidth();
}

void QuantInspector::setModelFileText(const QString& text) {
  m_modelFileText = text;
  m_modelFile->setToolTip(text);
  elideModelFile();
}

void QuantInspector::elideModelFile() {
  // The file's name is at the end of its path: cut in the middle, never at the end.
  const QString shown = m_modelFile->fontMetrics().elidedText(
      m_modelFileText.isEmpty() ? m_modelFile->text() : m_modelFileText, Qt::ElideMiddle,
      std::max(40, m_modelFile->width() - 4));
  if (shown != m_modelFile->text()) m_modelFile->setText(shown);
}

bool QuantInspector::eventFilter(QObject* watched, QEvent* event) {
  if (watched == m_modelFile && event->type() == QEvent::Resize) elideModelFile();
  if (watched == parentWidget() && event->type() == QEvent::Resize) fitToWidth();
  return QWidget::eventFilter(watched, event);
}

void QuantInspector::fitToWidth() {
  // Side by side where both halves have room; stacked (and scrolled down) where they do not, so a
  // small window never squeezes the heatmap to a strip or scrolls sideways.
  const int room = parentWidget() ? std::min(width(), parentWidget()->width()) : width();
  const Qt::Orientation o = room < kStackBelowWidth ? Qt::Vertical : Qt::Horizontal;
  bool changed = false;
  for (QSplitter* split : {m_runSplit, m_modelSplit, m_layerMaps, m_layerHistograms}) {
    if (!split || split->orientation() == o) continue;
    split->setOrientation(o);
    // The map keeps the larger share either way (3 : 2), a readable height when stacked; the
    // layer view's histograms share theirs equally.
    const int total = o == Qt::Vertical ? std::max(900, split->height()) : split->width();
    QList<int> sizes;
    if (split->count() == 2)
      sizes = {total * 3 / 5, total * 2 / 5};
    else
      for (int i = 0; i < split->count(); ++i) sizes << total / std::max(1, split->count());
    split->setSizes(sizes);
    changed = true;
  }
  // A scroll area sized this widget for the old orientation: have it size it again.
  if (changed)
    for (QWidget* w = parentWidget(); w; w = w->parentWidget())
      if (auto* area = qobject_cast<QAbstractScrollArea*>(w)) {
        updateGeometry();
        QCoreApplication::postEvent(area, new QEvent(QEvent::LayoutRequest));
        break;
      }
}

void QuantInspector::populateRunCombos() {
  // Only when the runs listed or the picks changed: a rebuild would close an open popup.
  std::string key = m_idA + '\n' + m_idB;
  if (m_runs)
    for (const auto& r : *m_runs) key += '\n' + r.id + '\t' + r.name;
  if (key == m_comboKey) return;
  m_comboKey = key;
  const auto fill = [this](QComboBox* box, const std::string& current, bool none) {
    QSignalBlocker block(box);
    box->clear();
    if (none) box->addItem(QStringLiteral("(none)"), QString());
    int at = -1;
    if (m_runs)
      for (const auto& r : *m_runs) {
        if (r.id == current) at = box->count();
        box->addItem(q(r.name), q(r.id));
        box->setItemData(box->count() - 1, q(r.id), Qt::ToolTipRole);
      }
    if (at < 0 && !current.empty()) {  // not listed (yet): keep it shown
      at = box->count();
      box->addItem(QFileInfo(q(current)).fileName(), q(current));
    }
    box->setCurrentIndex(at < 0 ? (none ? 0 : -1) : at);
  };
  fill(m_runA, m_idA, false);
  fill(m_runB, m_idB, true);
}

void QuantInspector::populateMetricCombo() {
  QSignalBlocker block(m_metricBox);
  m_metricBox->clear();
  const RunSnapshot* a = find(m_idA);
  std::vector<std::string> metrics;
  if (a && a->curves) metrics = a->curves->quantMetrics;
  if (metrics.empty()) metrics = analyze::metricNames();
  for (const auto& m : metrics) m_metricBox->addItem(q(m));
  if (std::find(metrics.begin(), metrics.end(), m_metric) == metrics.end())
    m_metricBox->addItem(q(m_metric));  // kept; the view says the run does not log it
  m_metricBox->setCurrentText(q(m_metric));
}

void QuantInspector::refreshRunView() {
  const std::string f = fingerprint();
  if (!m_dirty && f == m_shown) return;
  m_dirty = false;
  m_shown = f;
  const auto nothing = [this](const QString& why) {
    m_runMap->setTitle(QString());
    m_runMap->setEmptyText(why);
    m_worst->clear();
    m_worstLabel->setText(QStringLiteral("&Worst layers:"));
    m_runNote->setText(why);
  };
  const RunSnapshot* a = find(m_idA);
  if (!a)
    return nothing(
        QStringLiteral("Select a run in the runs table (or pick run A above) to see "
                       "its per-layer quantization errors."));
  const QString nameA = q(a->name);
  if (!a->curves)
    return nothing(
        QStringLiteral("%1 has no readable log yet%2.")
            .arg(nameA, a->logError.empty() ? QString() : QStringLiteral(": ") + q(a->logError)));
  const RunCurves& ca = *a->curves;
  if (ca.quantLayers.empty())
    return nothing(QStringLiteral("%1's log has no /quant data: the run quantizes no layer (a "
                                  "BF16 run, or a log written before layers were measured), so "
                                  "there are no per-layer errors to show.")
                       .arg(nameA));
  if (ca.quantSteps.empty())
    return nothing(QStringLiteral("%1 has not measured its %2 quantized layers yet: the first "
                                  "evaluation writes the first /quant row.")
                       .arg(nameA)
                       .arg(ca.quantLayers.size()));
  if (!ca.quant.count(m_metric))
    return nothing(QStringLiteral("%1 does not log %2 (it logs %3).")
                       .arg(nameA, q(m_metric))
                       .arg(QStringList([&] {
                              QStringList l;
                              for (const auto& m : ca.quantMetrics) l << q(m);
                              return l;
                            }())
                                .join(QStringLiteral(", "))));
  const RunSnapshot* b = find(m_idB);
  const bool diff = b != nullptr;
  detail::QuantMatrix m;
  QStringList notes;
  if (diff) {
    const QString nameB = q(b->name);
    if (!b->curves || b->curves->quantLayers.empty() || b->curves->quantSteps.empty())
      return nothing(QStringLiteral("Run B (%1) has no /quant data, so A − B cannot be shown. "
                                    "Set run B to (none) to see %2 alone.")
                         .arg(nameB, nameA));
    if (!b->curves->quant.count(m_metric))
      return nothing(QStringLiteral("Run B (%1) does not log %2, so A − B cannot be shown.")
                         .arg(nameB, q(m_metric)));
    m = detail::differenceMatrix(ca, *b->curves, m_metric);
    if (m.missingLayers > 0)
      notes << QStringLiteral(
                   "%1 of %2's layers are not in %3: their rows are grey (not "
                   "measured).")
                   .arg(m.missingLayers)
                   .arg(nameA, nameB);
    if (m.missingSteps > 0)
      notes << QStringLiteral(
                   "%1 of %2's evaluation steps were not measured by %3: those "
                   "columns are grey.")
                   .arg(m.missingSteps)
                   .arg(nameA, nameB);
    m_runMap->setTitle(QStringLiteral("%1: %2 \u2212 %3").arg(q(m_metric), nameA, nameB));
  } else {
    m = detail::runMatrix(ca, m_metric);
    m_runMap->setTitle(QStringLiteral("%1 of %2").arg(q(m_metric), nameA));
  }
  if (m.rows == 0) return nothing(QStringLiteral("%1's /quant rows are incomplete.").arg(nameA));
  const bool anyFinite =
      std::any_of(m.values.begin(), m.values.end(), [](float v) { return std::isfinite(v); });
  if (!anyFinite)
    return nothing(diff ? QStringLiteral("No layer and step of %1 was measured by both runs: "
                                         "A − B of %2 is not defined anywhere.")
                              .arg(nameA, q(m_metric))
                        : QStringLiteral("%1 was not measured in %2 (every value is NaN; e.g. "
                                         "activation metrics of a W4A16 run).")
                              .arg(q(m_metric), nameA));
  m_runMap->setCornerLabels(QStringLiteral("layer"),
                            diff ? QStringLiteral("A \u2212 B") : q(m_metric));
  m_runMap->setData(m.rows, m.cols, m.values, m.rowLabels, m.colLabels,
                    diff ? heatmap::ColorMap::RdBu : heatmap::ColorMap::Viridis);
  // The worst layers at the last evaluation that measured anything.
  int col = m.cols - 1;
  for (; col > 0; --col) {
    bool any = false;
    for (int l = 0; l < m.rows && !any; ++l)
      any = std::isfinite(m.values[size_t(l) * size_t(m.cols) + size_t(col)]);
    if (any) break;
  }
  std::vector<float> last(size_t(m.rows));
  for (int l = 0; l < m.rows; ++l)
    last[size_t(l)] = m.values[size_t(l) * size_t(m.cols) + size_t(col)];
  m_worst->setValues(ca.quantLayers, last, heatmap::higherIsWorse(m_metric),
                     diff ? QStringLiteral("A \u2212 B") : q(m_metric));
  m_worstLabel->setText(QStringLiteral("&Worst layers at step %1:").arg(m.steps[size_t(col)]));
  notes << QStringLiteral("Worst first: %1 (%2).")
               .arg(heatmap::higherIsWorse(m_metric) ? QStringLiteral("highest")
                                                     : QStringLiteral("lowest"),
                    diff ? QStringLiteral("A \u2212 B, where A is worse than B by the most")
                         : q(m_metric));
  if (m_worst->notMeasured() > 0)
    notes << QStringLiteral("%1 layers not measured at step %2 are not listed.")
                 .arg(m_worst->notMeasured())
                 .arg(m.steps[size_t(col)]);
  m_runNote->setText(notes.join(QLatin1Char(' ')));
}

// ---- Layer view ---------------------------------------------------------------------------------

void QuantInspector::showLayer(int layer, int column) {
  const RunSnapshot* a = find(m_idA);
  if (!a || !a->curves || layer < 0 || layer >= int(a->curves->quantLayers.size())) return;
  m_layer = layer;
  m_column = column;
  m_layerName = a->curves->quantLayers[size_t(layer)];
  refreshLayerChart();
  requestBlocks();
  showView(1);
}

void QuantInspector::refreshLayerChart() {
  const RunSnapshot* a = find(m_idA);
  m_layerChart->removeAllSeries();
  for (QAbstractAxis* axis : m_layerChart->axes()) {
    m_layerChart->removeAxis(axis);
    delete axis;
  }
  if (!a || !a->curves) return;
  int points = 0;
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  const auto addRun = [&](const RunSnapshot* r) {
    if (!r || !r->curves) return;
    const RunCurves& c = *r->curves;
    const auto it = std::find(c.quantLayers.begin(), c.quantLayers.end(), m_layerName);
    const auto values = c.quant.find(m_metric);
    if (it == c.quantLayers.end() || values == c.quant.end()) return;
    const size_t l = size_t(it - c.quantLayers.begin()), L = c.quantLayers.size();
    auto* s = new QLineSeries;
    s->setName(q(r->name));
    s->setPointsVisible(true);
    // The run's colour in every view (the runs table's square, the curves).
    QPen pen(runColour(r->name));
    pen.setWidthF(2.0);
    s->setPen(pen);
    s->setColor(pen.color());
    if (r == a)  // a point of run A picks that evaluation's block map
      connect(s, &QLineSeries::clicked, this, [this](const QPointF& point) {
        const RunSnapshot* ra = find(m_idA);
        if (!ra || !ra->curves) return;
        m_column = detail::nearestColumn(ra->curves->quantSteps, std::llround(point.x()));
        requestBlocks();
      });
    for (size_t k = 0; k < c.quantSteps.size() && (k + 1) * L <= values->second.size(); ++k)
      if (const float v = values->second[k * L + l]; std::isfinite(v)) {
        s->append(double(c.quantSteps[k]), double(v));
        x0 = std::min(x0, double(c.quantSteps[k]));
        x1 = std::max(x1, double(c.quantSteps[k]));
        y0 = std::min(y0, double(v));
        y1 = std::max(y1, double(v));
        ++points;
      }
    m_layerChart->addSeries(s);
  };
  addRun(a);
  if (const RunSnapshot* b = find(m_idB); b && b != a) addRun(b);
  m_layerChart->createDefaultAxes();
  const auto xs = m_layerChart->axes(Qt::Horizontal), ys = m_layerChart->axes(Qt::Vertical);
  if (!xs.isEmpty()) xs.front()->setTitleText(QStringLiteral("step"));
  if (!ys.isEmpty()) ys.front()->setTitleText(q(m_metric));
  // A single evaluation (or a flat line) still gets a readable range around it.
  if (points > 0 && !xs.isEmpty() && !ys.isEmpty()) {
    const double xp = x1 > x0 ? 0.03 * (x1 - x0) : std::max(1.0, 0.1 * std::fabs(x0));
    const double yp = y1 > y0 ? 0.08 * (y1 - y0) : std::max(1e-6, 0.05 * std::fabs(y0));
    xs.front()->setRange(x0 - xp, x1 + xp);
    ys.front()->setRange(y0 - yp, y1 + yp);
    // Ticks on round steps and values, not at the padded range's ends (-0.45, 3.525, ...).
    for (QAbstractAxis* axis : {xs.front(), ys.front()})
      if (auto* v = qobject_cast<QValueAxis*>(axis)) v->applyNiceNumbers();
    if (auto* x = qobject_cast<QValueAxis*>(xs.front())) x->setLabelFormat(QStringLiteral("%g"));
    if (auto* y = qobject_cast<QValueAxis*>(ys.front())) y->setLabelFormat(QStringLiteral("%.4g"));
  }
  m_layerChart->setTitle(
      points > 0 ? QStringLiteral("%1 of %2 against the step").arg(q(m_metric), q(m_layerName))
                 : QStringLiteral("%1 of %2: not measured").arg(q(m_metric), q(m_layerName)));
}

namespace {

// One row of /quant/blocks/<layer> of one run, read on a worker thread.
struct BlockSource {
  std::string path;  // the run's log.h5
  size_t layer = 0;  // index into that run's /quant/layers
  int column = -1;   // the /quant row
  int64_t step = -1;
};

detail::BlockRow readBlockRow(const BlockSource& s) {
  detail::BlockRow out;
  out.step = s.step;
  try {
    log::RunLogReader reader(s.path);
    const log::RunLogSchema schema = reader.schema();
    if (schema.blocksPerLayer.empty())
      out.error = QStringLiteral(
          "This run's log has no /quant/blocks: the run did not log per-block errors.");
    else if (s.layer >= schema.blocksPerLayer.size() || schema.blocksPerLayer[s.layer] == 0)
      out.error = QStringLiteral("This layer has no per-block data in the log.");
    else if (s.column < 0)
      out.error = QStringLiteral("No /quant row yet.");
    else {
      out.values = reader.readBlocks(s.layer, s.column, s.column + 1);
      if (s.layer < schema.blockRowsPerLayer.size()) out.rows = schema.blockRowsPerLayer[s.layer];
    }
  } catch (const std::exception& e) {
    out.error =
        QStringLiteral("Cannot read the per-block errors: %1").arg(QString::fromUtf8(e.what()));
  }
  if (out.error.isEmpty() &&
      std::none_of(out.values.begin(), out.values.end(), [](float v) { return std::isfinite(v); }))
    out.error =
        QStringLiteral("No per-block errors were logged for this layer at step %1 (not measured).")
            .arg(s.step);
  if (!out.error.isEmpty()) out.values.clear();
  return out;
}

}  // namespace

namespace detail {

int nearestColumn(const std::vector<int64_t>& steps, int64_t step) {
  int best = -1;
  for (size_t k = 0; k < steps.size(); ++k)
    if (best < 0 || std::llabs(steps[k] - step) < std::llabs(steps[size_t(best)] - step))
      best = int(k);
  return best;
}

bool showBlockMap(HeatmapWidget* map, std::vector<float> values, int64_t weightRows,
                  const QString& title) {
  const int64_t blocks = int64_t(values.size());
  const int cols = blockGridColumns(blocks, weightRows);
  const int rows = cols > 0 ? int(blocks / cols) : 0;
  QStringList rowLabels, colLabels;
  for (int r = 0; r < rows; ++r) rowLabels << QStringLiteral("row %1").arg(r);
  for (int c = 0; c < cols; ++c) colLabels << QStringLiteral("block %1").arg(c);
  map->setTitle(title);
  map->setFixedScale(false);
  map->setData(rows, cols, std::move(values), rowLabels, colLabels);
  return weightRows > 0 && blocks % weightRows == 0;
}

bool shareScale(HeatmapWidget* a, HeatmapWidget* b) {
  a->setFixedScale(false);
  b->setFixedScale(false);
  if (!a->hasData() || !b->hasData()) return false;
  const heatmap::Scale s{std::min(a->scale().lo, b->scale().lo),
                         std::max(a->scale().hi, b->scale().hi)};
  a->setFixedScale(true, s);
  b->setFixedScale(true, s);
  return true;
}

void drawScaleHistogram(BarChartWidget* chart, const analyze::Entry* entry,
                        const std::string& format, const QString& who) {
  if (!entry || !entry->measured || entry->scaleHist.size() != 256) {
    chart->setEmptyText(QStringLiteral("%1: no scale codes (not measured).").arg(who));
    return;
  }
  int lo = 0, hi = 256;
  while (lo < hi && entry->scaleHist[size_t(lo)] == 0) ++lo;
  while (hi > lo && entry->scaleHist[size_t(hi - 1)] == 0) --hi;
  const bool mx = format.rfind("mxfp4", 0) == 0;
  std::vector<double> shown;
  QStringList labels;
  for (int c = lo; c < hi; ++c) {
    shown.push_back(double(entry->scaleHist[size_t(c)]));
    if (mx)
      labels << (c == 0xff ? QStringLiteral("NaN") : QStringLiteral("2^%1").arg(c - 127));
    else
      labels << QString::number(e4m3Value(c), 'g', 3);
  }
  if (shown.empty())
    chart->setEmptyText(QStringLiteral("%1: no blocks.").arg(who));
  else
    chart->setBars(std::move(shown), labels,
                   QStringLiteral("%1 block scales of %2")
                       .arg(mx ? QStringLiteral("E8M0") : QStringLiteral("E4M3"), who));
}

void drawWeightHistogram(BarChartWidget* chart, const analyze::Analysis& a, size_t layer,
                         const QString& suffix) {
  if (layer >= a.outliers.size() || layer >= a.layers.size()) {
    chart->setEmptyText(QStringLiteral("No weights analysed."));
    return;
  }
  const QString module = q(a.layers[layer].module);
  const auto& o = a.outliers[layer];
  const auto& bins = analyze::weightBins();
  std::vector<double> counts(size_t(bins.size()), 0);
  for (size_t i = 0; i < counts.size(); ++i)
    counts[i] = double((i < o.negative.size() ? o.negative[i] : 0) +
                       (i < o.positive.size() ? o.positive[i] : 0));
  size_t lo = 0, hi = counts.size();
  while (lo < hi && counts[lo] == 0) ++lo;
  while (hi > lo && counts[hi - 1] == 0) --hi;
  if (lo == hi) {
    chart->setEmptyText(QStringLiteral("%1: no weights counted.").arg(module));
    return;
  }
  std::vector<double> shown(counts.begin() + long(lo), counts.begin() + long(hi));
  QStringList labels;
  for (size_t i = lo; i < hi; ++i) {
    const double edge = bins.lowerEdge(int(i));
    if (i == 0)
      labels << QStringLiteral("0");
    else if (i == 1)
      labels << QStringLiteral("<2^%1").arg(bins.minExp);
    else if (std::isnan(edge))
      labels << QStringLiteral("NaN");
    else if (const double e = std::log2(edge); e == std::floor(e))
      labels << QStringLiteral("2^%1").arg(int(e));
    else
      labels << QString();  // between octaves: the bar only
  }
  chart->setBars(std::move(shown), labels,
                 QStringLiteral("|w| of %1%2 (log2 bins), rms %3, %4 over 6 rms")
                     .arg(HeatmapWidget::shortModule(module), suffix)
                     .arg(o.rms, 0, 'g', 3)
                     .arg(o.over6));
}

std::string analysisFormatOf(const run::RunConfig& c) {
  if (c.quantFormat == "mxfp4") return c.scaleRule == "floor" ? "mxfp4-floor" : "mxfp4";
  if (c.quantFormat == "nvfp4") return c.blocks2d ? "nvfp4-2d" : "nvfp4";
  return {};
}

std::string weightsAtStep(const std::string& runDir, int64_t step, bool last) {
  const auto holdsWeights = [](const std::string& dir) {
    return files::isRegularFile(files::join(dir, "model.safetensors")) ||
           files::isRegularFile(files::join(dir, "model.safetensors.index.json"));
  };
  const std::string checkpoint =
      files::join(files::join(runDir, "checkpoints"), "step-" + std::to_string(step));
  if (holdsWeights(checkpoint)) return checkpoint;
  const std::string model = files::join(runDir, "model");
  if (last && holdsWeights(model)) return model;
  return {};
}

}  // namespace detail

void QuantInspector::requestBlocks() {
  const RunSnapshot* a = find(m_idA);
  if (!a || !a->curves || m_layer < 0) return;
  const RunCurves& c = *a->curves;
  const int rows = int(c.quantSteps.size());
  const int column = m_column < 0 || m_column >= rows ? rows - 1 : m_column;
  const int64_t step = column >= 0 ? c.quantSteps[size_t(column)] : -1;
  {
    QSignalBlocker block(m_layerStep);
    m_layerStep->clear();
    for (int64_t s : c.quantSteps) m_layerStep->addItem(QStringLiteral("step %1").arg(s));
    m_layerStep->setCurrentIndex(column);
    m_layerStep->setEnabled(rows > 1);
  }
  m_layerTitle->setText(
      QStringLiteral("%1 \u2014 %2 at step %3").arg(q(m_layerName), q(a->name)).arg(step));
  m_layerBlocks->setTitle(QString());
  m_layerBlocks->setEmptyText(QStringLiteral("Reading the per-block errors\u2026"));
  m_layerNote->setText(QString());
  const BlockSource sa{files::join(a->id, "log.h5"), size_t(m_layer), column, step};

  // Run B: the same layer (by name) at the same step, or at B's nearest evaluation.
  std::optional<BlockSource> sb;
  QString bName, bWhy;
  const RunSnapshot* b = find(m_idB);
  const bool withB = b && b != a;
  m_layerBlocksB->setVisible(withB);
  m_layerWeightsB->setVisible(withB);
  m_layerScalesB->setVisible(withB);
  if (withB) {
    const int w = std::max(2, m_layerMaps->width() / 2);
    m_layerMaps->setSizes({w, w});
    const int h = std::max(4, m_layerHistograms->width() / 4);
    m_layerHistograms->setSizes({h, h, h, h});
  }
  if (withB) {
    bName = q(b->name);
    m_layerBlocksB->setTitle(QString());
    m_layerBlocksB->setEmptyText(QStringLiteral("Reading run B's per-block errors\u2026"));
    const RunCurves* cb = b->curves.get();
    const auto it = cb ? std::find(cb->quantLayers.begin(), cb->quantLayers.end(), m_layerName)
                       : std::vector<std::string>::const_iterator{};
    if (!cb || it == cb->quantLayers.end())
      bWhy = QStringLiteral("Run B (%1) has no layer %2.").arg(bName, q(m_layerName));
    else if (cb->quantSteps.empty())
      bWhy = QStringLiteral("Run B (%1) has no /quant row yet.").arg(bName);
    else {
      const int kb = detail::nearestColumn(cb->quantSteps, step);
      sb = BlockSource{files::join(b->id, "log.h5"), size_t(it - cb->quantLayers.begin()), kb,
                       cb->quantSteps[size_t(kb)]};
    }
    if (!bWhy.isEmpty()) m_layerBlocksB->setEmptyText(bWhy);
  }
  requestHistograms(*a, column, withB ? b : nullptr, sb ? sb->column : -1);
  const uint64_t serial = ++m_blockRequest;
  QPointer<QuantInspector> self(this);
  const QString aName = q(a->name);
  QThreadPool::globalInstance()->start([self, serial, sa, sb, aName, bName, bWhy] {
    detail::BlockRow ra = readBlockRow(sa);
    std::optional<detail::BlockRow> rb;
    if (sb) rb = readBlockRow(*sb);
    QMetaObject::invokeMethod(
        qApp,
        [self, serial, ra = std::move(ra), rb = std::move(rb), aName, bName, bWhy]() mutable {
          if (!self || self->m_blockRequest != serial) return;
          self->applyBlocks(std::move(ra), std::move(rb), aName, bName, bWhy);
        },
        Qt::QueuedConnection);
  });
}

void QuantInspector::applyBlocks(detail::BlockRow a, std::optional<detail::BlockRow> b,
                                 const QString& aName, const QString& bName, const QString& bWhy) {
  // The weight's row count: from the log; else from an open analysis naming the same module.
  int64_t analysisRows = 0;
  if (m_analysis)
    for (const auto& l : m_analysis->layers)
      if (l.module == m_layerName) analysisRows = l.rows;
  QStringList notes;
  const bool withB = !bName.isEmpty();
  const auto show = [&](HeatmapWidget* map, detail::BlockRow& r, const QString& who) {
    if (!r.error.isEmpty()) {
      map->setEmptyText(r.error);
      notes << (withB ? QStringLiteral("%1: %2").arg(who, r.error) : r.error);
      return;
    }
    const int64_t blocks = int64_t(r.values.size());
    const int64_t rows = r.rows > 0 ? r.rows : analysisRows;
    const QString title = withB ? QStringLiteral("%1: block MSE at step %2").arg(who).arg(r.step)
                                : QStringLiteral("block MSE at step %1").arg(r.step);
    const bool known = detail::showBlockMap(map, std::move(r.values), rows, title);
    const QString prefix = withB ? who + QStringLiteral(": ") : QString();
    if (known)
      notes << prefix + QStringLiteral("%1 blocks: %2 weight rows of %3 blocks%4.")
                            .arg(blocks)
                            .arg(map->rows())
                            .arg(map->cols())
                            .arg(r.rows > 0 ? QString()
                                            : QStringLiteral(" (the shape from the open "
                                                             "analysis file)"));
    else
      notes << prefix + QStringLiteral(
                            "%1 blocks, drawn %2 per line: this log does not record "
                            "the weight's shape (written before fp4lab logged it; "
                            "open an analysis of the same model for the real "
                            "rows x blocks layout).")
                            .arg(blocks)
                            .arg(map->cols());
  };
  show(m_layerBlocks, a, aName);
  if (b) {
    show(m_layerBlocksB, *b, bName);
    if (b->error.isEmpty() && a.error.isEmpty() && b->step != a.step)
      notes << QStringLiteral(
                   "%1 did not measure step %2: its nearest evaluation, step %3, "
                   "is shown.")
                   .arg(bName)
                   .arg(a.step)
                   .arg(b->step);
  } else if (withB && !bWhy.isEmpty()) {
    notes << bWhy;
  }
  if (withB && detail::shareScale(m_layerBlocks, m_layerBlocksB))
    notes << QStringLiteral("Both maps share one colour scale.");
  m_layerNote->setText(notes.join(QLatin1Char(' ')));
  Q_EMIT layerBlocksLoaded();
}

namespace {

// One run's weights of one layer at one step, analysed in the run's format.
struct HistogramSource {
  std::string runDir, runName, layer, format;
  int64_t step = -1;
  bool last = false;  // the run's last evaluation (its final model/ counts)
};

detail::LayerWeights analyseLayerWeights(const HistogramSource& s) {
  detail::LayerWeights out;
  out.format = s.format;
  if (s.format.empty()) {
    out.error = QStringLiteral("%1 does not quantize: no scale codes.").arg(q(s.runName));
    return out;
  }
  const std::string folder = detail::weightsAtStep(s.runDir, s.step, s.last);
  if (folder.empty()) {
    out.error = QStringLiteral(
                    "%1 kept no weights of step %2 (it keeps its newest checkpoints and its "
                    "final model): no histograms.")
                    .arg(q(s.runName))
                    .arg(s.step);
    return out;
  }
  try {
    analyze::Options o;
    o.modelDir = folder;
    o.formats = {s.format};
    o.include = {s.layer};
    o.threads = 1;
    o.blocks = false;
    auto a = std::make_shared<analyze::Analysis>(analyze::analyzeModel(o));
    if (a->layers.empty())
      out.error = QStringLiteral("%1 has no weight for %2.").arg(q(folder), q(s.layer));
    else
      out.analysis = std::move(a);
  } catch (const std::exception& e) {
    out.error = QStringLiteral("Cannot analyse %1: %2").arg(q(folder), QString::fromUtf8(e.what()));
  }
  out.folder = folder;
  return out;
}

}  // namespace

void QuantInspector::requestHistograms(const RunSnapshot& a, int column, const RunSnapshot* b,
                                       int columnB) {
  const auto source = [&](const RunSnapshot& r, int col) {
    HistogramSource s;
    s.runDir = r.id;
    s.runName = r.name;
    s.layer = m_layerName;
    s.format = detail::analysisFormatOf(r.folder.config);
    const auto& steps = r.curves->quantSteps;
    if (col >= 0 && col < int(steps.size())) {
      s.step = steps[size_t(col)];
      s.last = col + 1 == int(steps.size());
    }
    return s;
  };
  const HistogramSource sa = source(a, column);
  std::optional<HistogramSource> sb;
  if (b && b->curves && columnB >= 0) sb = source(*b, columnB);
  for (BarChartWidget* h : {m_layerWeights, m_layerScales, m_layerWeightsB, m_layerScalesB})
    h->setEmptyText(QStringLiteral("Reading the weights\u2026"));
  if (b && !sb)
    for (BarChartWidget* h : {m_layerWeightsB, m_layerScalesB})
      h->setEmptyText(QStringLiteral("Run B has no such layer."));
  const uint64_t serial = ++m_histogramRequest;
  QPointer<QuantInspector> self(this);
  QThreadPool::globalInstance()->start([self, serial, sa, sb] {
    detail::LayerWeights wa = analyseLayerWeights(sa);
    std::optional<detail::LayerWeights> wb;
    if (sb) wb = analyseLayerWeights(*sb);
    QMetaObject::invokeMethod(
        qApp,
        [self, serial, wa = std::move(wa), wb = std::move(wb)]() mutable {
          if (!self || self->m_histogramRequest != serial) return;
          self->applyHistograms(wa, wb);
        },
        Qt::QueuedConnection);
  });
}

void QuantInspector::applyHistograms(const detail::LayerWeights& a,
                                     const std::optional<detail::LayerWeights>& b) {
  const auto show = [](BarChartWidget* weights, BarChartWidget* scales,
                       const detail::LayerWeights& w) {
    if (!w.analysis) {
      weights->setEmptyText(w.error);
      scales->setEmptyText(w.error);
      return;
    }
    const analyze::Analysis& an = *w.analysis;
    const QString at = QStringLiteral(" in %1").arg(q(files::baseName(w.folder)));
    detail::drawWeightHistogram(weights, an, 0, at);
    const analyze::Entry* entry = an.entries.empty() ? nullptr : &an.entries[0];
    detail::drawScaleHistogram(scales, entry, w.format,
                               QStringLiteral("%1 in %2").arg(q(an.layers[0].module), q(w.format)));
  };
  show(m_layerWeights, m_layerScales, a);
  if (b) show(m_layerWeightsB, m_layerScalesB, *b);
  Q_EMIT layerHistogramsLoaded();
}

// ---- Model view ---------------------------------------------------------------------------------

void QuantInspector::openAnalysisDialog() {
  const QString path =
      QFileDialog::getOpenFileName(this, QStringLiteral("Open analysis"), QString(),
                                   QStringLiteral("fp4lab analysis (*.h5 *.hdf5);;All files (*)"));
  if (!path.isEmpty()) openAnalysis(path);
}

void QuantInspector::openAnalysis(const QString& path) {
  showView(2);
  setModelFileText(path);
  m_modelNote->setText(QStringLiteral("Reading %1\u2026").arg(path));
  const uint64_t serial = ++m_analysisRequest;
  QPointer<QuantInspector> self(this);
  const std::string file = path.toStdString();
  QThreadPool::globalInstance()->start([self, serial, file, path] {
    std::shared_ptr<const analyze::Analysis> analysis;
    QString error;
    try {
      analysis = std::make_shared<const analyze::Analysis>(analyze::readAnalysisFile(file));
    } catch (const std::exception& e) {
      error = QString::fromUtf8(e.what());
    }
    QMetaObject::invokeMethod(
        qApp,
        [self, serial, analysis, path, error] {
          if (!self || self->m_analysisRequest != serial) return;
          self->applyAnalysis(analysis, path, error);
        },
        Qt::QueuedConnection);
  });
}

void QuantInspector::openSensitivityDialog() {
  const QString path = QFileDialog::getOpenFileName(
      this, QStringLiteral("Open sensitivity"), QString(),
      QStringLiteral("fp4lab sensitivity (*.h5 *.hdf5 *.json);;All files (*)"));
  if (!path.isEmpty()) openSensitivity(path);
}

bool QuantInspector::openSensitivity(const QString& path, QString* error) {
  showView(2);
  SensitivityFile file;
  QString why;
  m_frontier->show();
  if (!readSensitivityFile(path, &file, &why)) {
    m_frontier->clear();
    m_modelNote->setText(QStringLiteral("Cannot open the sensitivity file %1").arg(why));
    if (error) *error = why;
    return false;
  }
  m_frontier->setFile(file);
  QString chosen;
  for (const auto& p : file.plans)
    if (p.keep == file.chosenKeep)
      chosen = QStringLiteral("; chosen: keep %1 in BF16, %2 MiB, loss %3 (BF16 %4)")
                   .arg(p.keep)
                   .arg(p.bytes / (1024.0 * 1024.0), 0, 'f', 2)
                   .arg(p.loss, 0, 'g', 5)
                   .arg(file.bf16Loss, 0, 'g', 5);
  m_modelNote->setText(
      QStringLiteral("Frontier of %1: %2 plans%3.").arg(path).arg(file.plans.size()).arg(chosen));
  return true;
}

void QuantInspector::applyAnalysis(std::shared_ptr<const analyze::Analysis> analysis,
                                   const QString& path, const QString& error) {
  if (!analysis) {
    m_analysis.reset();
    m_modelMap->setEmptyText(QStringLiteral("Cannot open %1: %2").arg(path, error));
    m_modelNote->setText(QStringLiteral("Cannot open %1: %2").arg(path, error));
    for (BarChartWidget* w : {m_weightHist, m_scaleHist}) w->setEmptyText(QString());
    m_modelBlocks->setEmptyText(QString());
    Q_EMIT analysisLoaded(false);
    return;
  }
  m_analysis = std::move(analysis);
  m_analysisPath = path;
  m_modelLayer = m_modelFormat = -1;
  {
    QSignalBlocker block(m_modelCompare);
    m_modelCompare->clear();
    m_modelCompare->addItem(QStringLiteral("(none)"));
    int at = 0;
    for (const auto& f : m_analysis->formats) {
      if (f == m_modelCompareFormat) at = m_modelCompare->count();
      m_modelCompare->addItem(q(f));
    }
    m_modelCompare->setCurrentIndex(at);
    if (at == 0) m_modelCompareFormat.clear();
    m_modelCompare->setEnabled(m_analysis->formats.size() > 1);
  }
  m_modelBlocksB->hide();
  m_scaleHistB->hide();
  // The file's name first: a label cut in the middle keeps it.
  setModelFileText(QStringLiteral("%1 in %2 (model %3)")
                       .arg(QFileInfo(path).fileName(), QFileInfo(path).absolutePath(),
                            q(m_analysis->modelDir)));
  refreshModelView();
  m_modelBlocks->setEmptyText(
      QStringLiteral("Click a cell of the heatmap for that layer's "
                     "blocks in that format."));
  m_weightHist->setEmptyText(QStringLiteral("Click a cell of the heatmap."));
  m_scaleHist->setEmptyText(QStringLiteral("Click a cell of the heatmap."));
  Q_EMIT analysisLoaded(true);
}

void QuantInspector::refreshModelView() {
  if (!m_analysis) return;
  const analyze::Analysis& a = *m_analysis;
  const auto& names = analyze::metricNames();
  const auto mi = std::find(names.begin(), names.end(), m_modelMetric);
  const int L = int(a.layers.size()), F = int(a.formats.size());
  if (mi == names.end() || L == 0 || F == 0) {
    m_modelMap->setEmptyText(QStringLiteral("The analysis has no layers or formats."));
    return;
  }
  const size_t metric = size_t(mi - names.begin());
  std::vector<float> values(size_t(L) * size_t(F), NAN);
  int unmeasured = 0;
  for (const auto& e : a.entries) {
    const auto f = std::find(a.formats.begin(), a.formats.end(), e.format);
    if (f == a.formats.end() || e.layer >= size_t(L)) continue;
    if (!e.measured) {
      ++unmeasured;
      continue;
    }
    values[e.layer * size_t(F) + size_t(f - a.formats.begin())] =
        float(analyze::metricValues(e.stats)[metric]);
  }
  QStringList rows, cols;
  for (const auto& l : a.layers) rows << detail::shortLayerName(l.module);
  for (const auto& f : a.formats) cols << q(f);
  m_modelMap->setTitle(QStringLiteral("%1 by layer and format").arg(q(m_modelMetric)));
  m_modelMap->setCornerLabels(QStringLiteral("layer"), q(m_modelMetric));
  m_modelMap->setData(L, F, std::move(values), rows, cols);
  QString note = QStringLiteral("%1 layers, %2 formats, analysed in %3 s on %4 threads.")
                     .arg(L)
                     .arg(F)
                     .arg(a.seconds, 0, 'f', 2)
                     .arg(a.threads);
  if (unmeasured > 0)
    note += QStringLiteral(
                " %1 layer/format pairs were not measured (the weight's columns are "
                "not a multiple of the block): grey.")
                .arg(unmeasured);
  m_modelNote->setText(note);
}

void QuantInspector::setModelCompareFormat(const std::string& format) {
  m_modelCompareFormat = format;
  {
    QSignalBlocker block(m_modelCompare);
    const int at = format.empty() ? 0 : m_modelCompare->findText(q(format));
    m_modelCompare->setCurrentIndex(std::max(at, 0));
  }
  showModelCell(m_modelLayer, m_modelFormat);
}

void QuantInspector::showModelCell(int layer, int format) {
  if (!m_analysis || layer < 0 || format < 0) return;
  const analyze::Analysis& a = *m_analysis;
  if (size_t(layer) >= a.layers.size() || size_t(format) >= a.formats.size()) return;
  m_modelLayer = layer;
  m_modelFormat = format;
  const analyze::Layer& L = a.layers[size_t(layer)];
  const auto entryOf = [&](const std::string& fmt) -> const analyze::Entry* {
    for (const auto& e : a.entries)
      if (e.layer == size_t(layer) && e.format == fmt) return &e;
    return nullptr;
  };
  // Block map at the weight's own layout: rows x (blocks per row).
  const auto blocks = [&](HeatmapWidget* map, const std::string& fmt) {
    const analyze::Entry* entry = entryOf(fmt);
    const QString who = QStringLiteral("%1 in %2").arg(q(L.module), q(fmt));
    // The format first: a title cut at its end keeps what tells the two maps apart.
    const QString title =
        QStringLiteral("%1 block MSE, %2").arg(q(fmt), HeatmapWidget::shortModule(q(L.module)));
    if (!entry || !entry->measured)
      map->setEmptyText(QStringLiteral("%1: not measured (the weight's columns are not a "
                                       "multiple of the block).")
                            .arg(who));
    else if (entry->blockMse.empty())
      map->setEmptyText(
          QStringLiteral("%1: the analysis was written without per-block errors.").arg(who));
    else
      detail::showBlockMap(map, entry->blockMse, L.rows, title);
  };
  const auto scales = [&](BarChartWidget* chart, const std::string& fmt) {
    detail::drawScaleHistogram(
        chart, entryOf(fmt), fmt,
        QStringLiteral("%1 in %2").arg(HeatmapWidget::shortModule(q(L.module)), q(fmt)));
  };
  const std::string& fmt = a.formats[size_t(format)];
  blocks(m_modelBlocks, fmt);
  scales(m_scaleHist, fmt);
  const bool beside = !m_modelCompareFormat.empty() && m_modelCompareFormat != fmt;
  m_modelBlocksB->setVisible(beside);
  m_scaleHistB->setVisible(beside);
  if (beside) {
    blocks(m_modelBlocksB, m_modelCompareFormat);
    scales(m_scaleHistB, m_modelCompareFormat);
  }
  if (beside && detail::shareScale(m_modelBlocks, m_modelBlocksB))
    m_modelNote->setText(QStringLiteral("%1: %2 beside %3, block maps on one colour scale.")
                             .arg(q(L.module), q(fmt), q(m_modelCompareFormat)));

  detail::drawWeightHistogram(m_weightHist, a, size_t(layer));
}

}  // namespace fp4lab::widgets
