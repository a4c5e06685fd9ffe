// The grid of live charts and their shared settings.
#include "fp4lab/widgets/charts_page.h"

#include <QCheckBox>
#include <QComboBox>
#include <QGridLayout>
#include <QLabel>
#include <QScrollArea>
#include <QScrollBar>
#include <QSlider>
#include <QSpinBox>
#include <QVBoxLayout>

#include "fp4lab/widgets/flow_layout.h"

namespace fp4lab::widgets {

ChartsPage::ChartsPage(QWidget* parent)
    : QWidget(parent), m_worker(std::make_shared<CurveWorker>()) {
  auto* bar = new FlowLayout;
  auto* xLabel = new QLabel(QStringLiteral("&x axis:"));
  m_x = new QComboBox;
  m_x->addItems({QStringLiteral("step"), QStringLiteral("tokens"), QStringLiteral("wall time")});
  m_x->setObjectName(QStringLiteral("x axis"));
  m_x->setAccessibleName(QStringLiteral("x axis"));
  m_x->setToolTip(QStringLiteral("plot against the optimizer step, the tokens seen or wall time"));
  xLabel->setBuddy(m_x);
  m_logY = new QCheckBox(QStringLiteral("&log y"));
  m_logY->setChecked(true);
  m_logY->setObjectName(QStringLiteral("log y"));
  m_logY->setAccessibleName(QStringLiteral("log y"));
  m_logY->setToolTip(QStringLiteral("a true log axis for losses, KL and gradient norm"));
  auto* smoothLabel = new QLabel(QStringLiteral("&smoothing:"));
  m_smoothing = new QSlider(Qt::Horizontal);
  m_smoothing->setRange(0, 99);
  m_smoothing->setValue(60);
  m_smoothing->setFixedWidth(140);
  m_smoothing->setObjectName(QStringLiteral("smoothing"));
  m_smoothing->setAccessibleName(QStringLiteral("smoothing"));
  m_smoothing->setToolTip(QStringLiteral(
      "TensorBoard's debiased exponential moving average, on the whole series; the raw curve "
      "stays faint underneath. 0: off"));
  smoothLabel->setBuddy(m_smoothing);
  m_smoothingValue = new QLabel;
  m_smoothingValue->setAccessibleDescription(QStringLiteral("smoothing weight"));
  m_smoothingValue->setMinimumWidth(32);
  auto* avgLabel = new QLabel(QStringLiteral("&moving average:"));
  m_average = new QSpinBox;
  m_average->setRange(1, 10000);
  m_average->setValue(1);
  m_average->setSuffix(QStringLiteral(" pts"));
  m_average->setObjectName(QStringLiteral("moving average"));
  m_average->setAccessibleName(QStringLiteral("moving average"));
  m_average->setToolTip(QStringLiteral("a trailing mean over this many points; 1: off"));
  avgLabel->setBuddy(m_average);
  // Pairs stay together (a label with its control); the row wraps when the page is narrow.
  bar->addWidget(flowGroup({xLabel, m_x}));
  bar->addWidget(m_logY, 12);
  bar->addWidget(flowGroup({smoothLabel, m_smoothing, m_smoothingValue}), 12);
  bar->addWidget(flowGroup({avgLabel, m_average}), 12);

  auto* gridHost = new QWidget;
  m_grid = new QGridLayout(gridHost);
  m_grid->setContentsMargins(0, 0, 0, 0);
  m_grid->setSpacing(6);
  auto* scroll = new QScrollArea;
  scroll->setWidgetResizable(true);
  scroll->setWidget(gridHost);
  scroll->setFrameShape(QFrame::NoFrame);
  scroll->setObjectName(QStringLiteral("charts"));
  // Panels scrolled out of view skip their frames; scrolling brings them up to date.
  connect(scroll->verticalScrollBar(), &QScrollBar::valueChanged, this, [this] {
    for (CurvePanel* p : m_panels) p->markDirty();
  });
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addLayout(bar);
  layout->addWidget(scroll, 1);

  addPanel("eval/val_loss", QStringLiteral("Validation loss"), true);
  addPanel("train/ce_loss", QStringLiteral("Training loss"), true)
      ->setEmptyText(QStringLiteral(
          "No cross-entropy training loss in the checked runs (PTQ trains no steps; QAD's loss is "
          "its distillation loss, in its own chart)."));
  addPanel("train/distill_loss", QStringLiteral("Distillation loss (QAD)"), true)
      ->setEmptyText(QStringLiteral(
          "No QAD run is checked. QAD trains on its KL to the teacher (plus recipe.ce_weight x "
          "cross-entropy): plotted here, apart from the cross-entropies."));
  addPanel("eval/val_kl", QStringLiteral("KL to the reference"), true)
      ->setEmptyText(QStringLiteral(
          "No reference model in the checked runs. QAD measures the KL to its teacher; other "
          "runs need eval.reference=FOLDER (the experiment sets it after SFT)."));
  addPanel("train/grad_norm", QStringLiteral("Gradient norm"), true);
  addPanel("train/lr", QStringLiteral("Learning rate"), false);
  addPanel("train/tok_per_s", QStringLiteral("Tokens per second"), false);
  relayout();

  connect(m_x, &QComboBox::currentIndexChanged, this, &ChartsPage::applySettings);
  connect(m_logY, &QCheckBox::toggled, this, &ChartsPage::applySettings);
  connect(m_smoothing, &QSlider::valueChanged, this, &ChartsPage::applySettings);
  connect(m_average, &QSpinBox::valueChanged, this, &ChartsPage::applySettings);
  applySettings();
}

void ChartsPage::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  // Two columns of charts where two fit side by side, else one (a small window or a narrow pane).
  const int panelWidth = m_panels.empty() ? 0 : m_panels.front()->minimumSizeHint().width();
  const int columns = width() >= 2 * panelWidth + m_grid->horizontalSpacing() + 24 ? 2 : 1;
  if (columns != m_columns) {
    m_columns = columns;
    relayout();
  }
}

CurvePanel* ChartsPage::addPanel(const std::string& series, const QString& title, bool logAllowed) {
  auto* panel = new CurvePanel(series, title, m_worker);
  if (!logAllowed) m_linearOnly.insert(series);
  connect(panel, &CurvePanel::runSelected, this, &ChartsPage::runSelected);
  // Staggered frames: each panel paints in its own turn of the event loop.
  panel->setFrameDelayMs(33 + 40 * int(m_panels.size()));
  m_panels.push_back(panel);
  return panel;
}

void ChartsPage::relayout() {
  for (CurvePanel* p : m_panels) m_grid->removeWidget(p);
  // A grid keeps the rows and columns it once had: the old ones are emptied of their minimums.
  for (int r = 0; r < m_grid->rowCount(); ++r) m_grid->setRowMinimumHeight(r, 0);
  for (int c = 0; c < m_grid->columnCount(); ++c) m_grid->setColumnStretch(c, 0);
  for (size_t i = 0; i < m_panels.size(); ++i)
    m_grid->addWidget(m_panels[i], int(i) / m_columns, int(i) % m_columns);
  const int rows = (int(m_panels.size()) + m_columns - 1) / m_columns;
  for (int r = 0; r < rows; ++r) m_grid->setRowMinimumHeight(r, 260);
  for (int c = 0; c < m_columns; ++c) m_grid->setColumnStretch(c, 1);
}

CurvePanel* ChartsPage::panel(const std::string& series) const {
  for (CurvePanel* p : m_panels)
    if (p->series() == series) return p;
  return nullptr;
}

CurveSettings ChartsPage::settings() const {
  CurveSettings s;
  s.x = XAxis(m_x->currentIndex());
  s.logY = m_logY->isChecked();
  s.smoothing = m_smoothing->value() / 100.0;
  s.movingAverage = m_average->value();
  return s;
}

void ChartsPage::setSettings(const CurveSettings& s) {
  m_x->setCurrentIndex(int(s.x));
  m_logY->setChecked(s.logY);
  m_smoothing->setValue(int(std::lround(s.smoothing * 100)));
  m_average->setValue(s.movingAverage);
  applySettings();
}

void ChartsPage::applySettings() {
  const CurveSettings s = settings();
  m_smoothingValue->setText(QString::number(s.smoothing, 'f', 2));
  for (CurvePanel* p : m_panels) {
    CurveSettings own = s;
    if (m_linearOnly.count(p->series())) own.logY = false;
    // Evaluations are few: smoothing them would only lag the curve.
    // Nor is the learning rate noisy: smoothed, a schedule would end above where it ends.
    if (p->series().rfind("eval/", 0) == 0 || p->series() == "train/lr")
      own.smoothing = 0, own.movingAverage = 1;
    p->setSettings(own);
  }
  Q_EMIT settingsChanged();
}

void ChartsPage::setRuns(RunSnapshotsPtr runs, const std::set<std::string>& shown) {
  // A panel per graded task, added when the first run that grades it appears.
  if (runs) {
    bool added = false;
    for (const RunSnapshot& r : *runs) {
      if (!r.curves) continue;
      for (const std::string& column : r.curves->evalColumns) {
        if (column.rfind("pass_rate_", 0) != 0 || panel("eval/" + column)) continue;
        addPanel("eval/" + column,
                 QStringLiteral("Pass rate: %1").arg(QString::fromStdString(column.substr(10))),
                 false);
        panel("eval/" + column)->setValueBounds(0, 1);
        added = true;
      }
    }
    if (added) relayout(), applySettings();
  }
  for (CurvePanel* p : m_panels) {
    p->setRuns(runs, shown);
    p->setSelectedRun(m_selected);
  }
}

void ChartsPage::setSelectedRun(const std::string& id) {
  m_selected = id;
  for (CurvePanel* p : m_panels) p->setSelectedRun(id);
}

void ChartsPage::resetZoom() {
  for (CurvePanel* p : m_panels) p->resetZoom();
}

}  // namespace fp4lab::widgets
