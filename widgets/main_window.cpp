// The workbench window: docks, actions, the worker thread and the run queue wired together.
#include "fp4lab/widgets/main_window.h"

#include <signal.h>

#include <QAction>
#include <QApplication>
#include <QClipboard>
#include <QCloseEvent>
#include <QComboBox>
#include <QDesktopServices>
#include <QDir>
#include <QDockWidget>
#include <QResizeEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QInputDialog>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QMenuBar>
#include <QMessageBox>
#include <QScreen>
#include <QScrollArea>
#include <QSettings>
#include <QStatusBar>
#include <QTabBar>
#include <QTabWidget>
#include <QShortcut>
#include <QTableView>
#include <QTimer>
#include <QThread>
#include <QToolBar>
#include <QToolButton>
#include <QUrl>
#include <QVBoxLayout>

#include <cmath>
#include <thread>

#include "fp4lab/common/files.h"
#include "fp4lab/common/time.h"
#include "fp4lab/error.h"
#include "fp4lab/run/run_folder.h"
#include "fp4lab/widgets/charts_page.h"
#include "fp4lab/widgets/compare_view.h"
#include "fp4lab/widgets/export_dialog.h"
#include "fp4lab/widgets/log_poll_worker.h"
#include "fp4lab/widgets/new_run_dialog.h"
#include "fp4lab/widgets/quant_inspector.h"
#include "fp4lab/widgets/run_details.h"
#include "fp4lab/widgets/run_table_model.h"
#include "fp4lab/widgets/runs_table_view.h"
#include "fp4lab/widgets/vector_state.h"

namespace fp4lab::widgets {

namespace {

QString q(const std::string& s) {
  return QString::fromStdString(s);
}

}  // namespace

MainWindow::MainWindow(const WorkbenchOptions& options, QWidget* parent)
    : QMainWindow(parent), m_options(options) {
  guardVectorState();  // every event handler of the GUI thread starts with clean vector state
  setObjectName(QStringLiteral("fp4lab workbench"));
  setWindowTitle(QStringLiteral("fp4lab workbench"));
  qRegisterMetaType<RunSnapshotsPtr>();

  m_queue = new RunQueue(this);
  m_queue->setProgram(options.program);
  m_options.cpuSlots =
      std::max(1, QSettings().value(QStringLiteral("queue/cpuSlots"), options.cpuSlots).toInt());
  m_queue->setSlots(QStringLiteral("cpu"), m_options.cpuSlots);
  m_model = new RunTableModel(this);
  m_proxy = new RunFilterProxy(this);
  m_proxy->setSourceModel(m_model);

  // Centre: the message bar over the tab area.
  m_messageBar = new QWidget;
  m_messageBar->setObjectName(QStringLiteral("message bar"));
  m_messageBar->setStyleSheet(QStringLiteral("#message\\ bar { background: #fff1e6; }"));
  auto* messageLayout = new QHBoxLayout(m_messageBar);
  messageLayout->setContentsMargins(8, 4, 4, 4);
  m_message = new QLabel;
  m_message->setObjectName(QStringLiteral("message"));
  m_message->setAccessibleDescription(QStringLiteral("the latest problem or notice"));
  m_message->setWordWrap(true);
  m_message->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_messageClose = new QToolButton;
  m_messageClose->setText(QStringLiteral("\u2715"));
  m_messageClose->setObjectName(QStringLiteral("dismiss message"));
  m_messageClose->setAccessibleName(QStringLiteral("dismiss message"));
  m_messageClose->setToolTip(QStringLiteral("hide this message"));
  connect(m_messageClose, &QToolButton::clicked, m_messageBar, &QWidget::hide);
  messageLayout->addWidget(m_message, 1);
  messageLayout->addWidget(m_messageClose);
  m_messageBar->hide();

  m_tabs = new QTabWidget;
  m_tabs->setObjectName(QStringLiteral("central tabs"));
  m_tabs->setAccessibleName(QStringLiteral("views"));
  m_tabs->setDocumentMode(true);
  m_charts = new ChartsPage;
  m_compare = new CompareView;
  m_inspector = new QuantInspector;
  // Compare and Quantization need more room than a small screen has beside the docks: they scroll
  // there instead of setting the window's minimum size (Curves scrolls its own grid).
  auto scrolled = [](QWidget* view) {
    auto* area = new QScrollArea;
    area->setObjectName(view->objectName() + QStringLiteral(" scroll"));
    area->setFrameShape(QFrame::NoFrame);
    area->setWidgetResizable(true);
    area->setWidget(view);
    return area;
  };
  m_tabs->addTab(m_charts, QStringLiteral("C&urves"));
  m_tabs->addTab(scrolled(m_compare), QStringLiteral("Com&pare"));
  m_tabs->addTab(scrolled(m_inspector), QStringLiteral("&Quantization"));
  m_tabs->setTabsClosable(true);
  // Curves, Compare and Quantization stay; tabs added later (reports) can be closed.
  for (int i = 0; i < 3; ++i) m_tabs->tabBar()->setTabButton(i, QTabBar::RightSide, nullptr);
  connect(m_tabs, &QTabWidget::tabCloseRequested, this, [this](int index) {
    if (index >= 3) delete m_tabs->widget(index);  // reports; the fixed tabs stay
  });
  auto* centre = new QWidget;
  auto* centreLayout = new QVBoxLayout(centre);
  centreLayout->setContentsMargins(0, 0, 0, 0);
  centreLayout->setSpacing(0);
  centreLayout->addWidget(m_messageBar);
  centreLayout->addWidget(m_tabs, 1);
  setCentralWidget(centre);

  buildActions();
  buildDocks();
  buildMenus();

  m_progress = new QLabel;
  m_progress->setObjectName(QStringLiteral("selected run progress"));
  m_progress->setAccessibleDescription(QStringLiteral("the selected run's progress"));
  m_pollInfo = new QLabel;
  m_pollInfo->setObjectName(QStringLiteral("queue summary"));
  m_pollInfo->setAccessibleDescription(QStringLiteral("runs queued and running"));
  statusBar()->addWidget(m_progress, 1);
  statusBar()->addPermanentWidget(m_pollInfo);

  // The worker thread: every folder scan and HDF5 read happens there.
  m_thread = new QThread(this);
  m_thread->setObjectName(QStringLiteral("fp4lab log worker"));
  m_worker = new LogPollWorker;
  m_worker->setIntervalMs(options.pollMs);
  m_worker->moveToThread(m_thread);
  connect(m_thread, &QThread::finished, m_worker, &QObject::deleteLater);
  connect(this, &MainWindow::requestRoots, m_worker, &LogPollWorker::setRoots);
  connect(this, &MainWindow::requestPoll, m_worker, &LogPollWorker::pollSoon);
  connect(this, &MainWindow::requestPaused, m_worker, &LogPollWorker::setPaused);
  connect(m_worker, &LogPollWorker::snapshotsReady, this, &MainWindow::onSnapshots);
  connect(m_worker, &LogPollWorker::rootProblem, this,
          [this](const QString& root, const QString& problem) {
            if (!problem.isEmpty())
              showMessage(QStringLiteral("Run folder %1: %2").arg(root, problem));
          });
  m_thread->start();

  connect(m_queue, &RunQueue::jobFinished, this, &MainWindow::onJobFinished);
  connect(m_queue, &RunQueue::jobStarted, this, [this](const QString&) {
    if (m_rawSnapshots) onSnapshots(m_rawSnapshots);  // "starting" at once
    Q_EMIT requestPoll();
    updateActions();
  });
  connect(m_queue, &RunQueue::jobEvent, this, [this](const QString& id, const JobEvent&) {
    if (q(selectedRun()) == id) updateStatusBar();
  });
  connect(m_queue, &RunQueue::consoleAppended, this,
          [this](const QString& id, const QString& text) {
            if (q(m_details->runId()) == id) m_details->appendConsole(text);
          });
  connect(m_charts, &ChartsPage::runSelected, this, &MainWindow::selectRun);
  connect(m_compare, &CompareView::runSelected, this, &MainWindow::selectRun);
  connect(m_inspector, &QuantInspector::runSelected, this, &MainWindow::selectRun);

  m_defaultState = saveState(kLayoutVersion);
  restoreSettings();
  QStringList roots = options.roots;
  if (roots.isEmpty()) roots = QSettings().value(QStringLiteral("runs/roots")).toStringList();
  if (roots.isEmpty()) roots << QDir::current().absoluteFilePath(QStringLiteral("runs"));
  for (QString& r : roots) r = QDir::cleanPath(QDir::current().absoluteFilePath(r));
  roots.removeDuplicates();
  m_roots = roots;
  Q_EMIT requestRoots(m_roots);
  updateActions();
}

MainWindow::~MainWindow() {
  m_thread->quit();
  m_thread->wait();
}

// ---- Actions and menus --------------------------------------------------------------------------

QAction* MainWindow::action(const QString& objectName) const {
  return findChild<QAction*>(objectName);
}

void MainWindow::buildActions() {
  const auto make = [this](const QString& name, const QString& text, const QString& tip,
                           const QKeySequence& keys, auto slot) {
    auto* a = new QAction(text, this);
    a->setObjectName(name);
    a->setToolTip(tip);
    a->setStatusTip(tip);
    if (!keys.isEmpty()) a->setShortcut(keys);
    connect(a, &QAction::triggered, this, slot);
    addAction(a);
    return a;
  };
  make(QStringLiteral("new run"), QStringLiteral("&New run\u2026"),
       QStringLiteral("configure a run and queue it"), QKeySequence(Qt::CTRL | Qt::Key_N),
       [this] { newRun(); });
  make(QStringLiteral("open config"), QStringLiteral("&Open config\u2026"),
       QStringLiteral("open a run.yaml in the New run dialog"), QKeySequence::Open, [this] {
         const QString path =
             QFileDialog::getOpenFileName(this, QStringLiteral("Open run config"), QString(),
                                          QStringLiteral("YAML (*.yaml *.yml)"));
         if (!path.isEmpty()) newRun(nullptr, path);
       });
  make(QStringLiteral("add run folder"), QStringLiteral("&Add run folder\u2026"),
       QStringLiteral("watch another folder of runs"), QKeySequence(), [this] {
         const QString dir =
             QFileDialog::getExistingDirectory(this, QStringLiteral("Add run folder"));
         if (!dir.isEmpty()) addRoot(dir);
       });
  make(QStringLiteral("run experiment"), QStringLiteral("Run the built-in &experiment"),
       QStringLiteral("SFT, then PTQ, QAT and QAD in MXFP4 and NVFP4, with its report"),
       QKeySequence(), [this] { runExperiment(); });
  make(QStringLiteral("open analysis"), QStringLiteral("Open &analysis\u2026"),
       QStringLiteral("open a file of fp4lab analyze --output in the Quantization tab"),
       QKeySequence(), [this] {
         showView(m_inspector);
         m_inspector->openAnalysisDialog();
       });
  make(QStringLiteral("quit"), QStringLiteral("&Quit"), QStringLiteral("close the workbench"),
       QKeySequence::Quit, [this] { close(); });
  make(QStringLiteral("find"), QStringLiteral("&Filter runs"),
       QStringLiteral("focus the runs filter"), QKeySequence::Find, [this] {
         m_filter->setFocus();
         m_filter->selectAll();
       });
  make(QStringLiteral("copy path"), QStringLiteral("&Copy path"),
       QStringLiteral("copy the selected run's folder"), QKeySequence(),
       [this] { QApplication::clipboard()->setText(q(selectedRun())); });
  make(QStringLiteral("open folder"), QStringLiteral("Open &folder"),
       QStringLiteral("open the selected run's folder in the file manager"), QKeySequence(),
       [this] { QDesktopServices::openUrl(QUrl::fromLocalFile(q(selectedRun()))); });
  make(QStringLiteral("stop"), QStringLiteral("&Stop"),
       QStringLiteral("SIGTERM: the run checkpoints and stops (or leaves the queue)"),
       QKeySequence(Qt::CTRL | Qt::Key_Period), [this] { stopRun(selectedRun()); });
  make(QStringLiteral("kill"), QStringLiteral("&Kill"),
       QStringLiteral("SIGKILL: ends the run at once, without a checkpoint"), QKeySequence(),
       [this] { killRun(selectedRun()); });
  make(QStringLiteral("resume"), QStringLiteral("&Resume"),
       QStringLiteral("continue a crashed or cancelled run from its latest checkpoint"),
       QKeySequence(), [this] { resumeRun(selectedRun()); });
  make(QStringLiteral("duplicate"), QStringLiteral("&Duplicate as new run\u2026"),
       QStringLiteral("the New run dialog with this run's config"), QKeySequence(), [this] {
         if (const RunSnapshot* r = snapshot(selectedRun()); r && r->folder.hasConfig) {
           run::RunConfig c = r->folder.config;
           c.name += "-copy";
           newRun(&c);
         }
       });
  make(QStringLiteral("compare formats"), QStringLiteral("Compare &formats"),
       QStringLiteral("PTQ, QAT and QAD in MXFP4 and NVFP4 from the selected BF16 run's model"),
       QKeySequence(), [this] { compareFormats(selectedRun()); });
  make(QStringLiteral("compare formats on folder"),
       QStringLiteral("Compare formats on a model &folder\u2026"),
       QStringLiteral("PTQ, QAT and QAD in MXFP4 and NVFP4 from a BF16 Hugging Face folder"),
       QKeySequence(), [this] {
         const QString dir =
             QFileDialog::getExistingDirectory(this, QStringLiteral("BF16 model folder"));
         if (!dir.isEmpty()) compareFormats(dir.toStdString());
       });
  make(QStringLiteral("export"), QStringLiteral("&Export checkpoint\u2026"),
       QStringLiteral("write the selected run's model (or any model folder) as a checkpoint "
                      "vLLM, SGLang, TensorRT-LLM or transformers load"),
       QKeySequence(Qt::CTRL | Qt::Key_E), [this] {
         ExportDialog dialog(m_options.program, this);
         if (const RunSnapshot* r = snapshot(selectedRun()))
           dialog.setModelDir(ExportDialog::modelDirOfRun(q(r->id), q(r->folder.latestCheckpoint)));
         dialog.exec();
       });
  make(QStringLiteral("compare with"), QStringLiteral("Compare &with\u2026"),
       QStringLiteral("the selected run as B in the Compare tab"), QKeySequence(), [this] {
         m_compare->setPair(m_compare->runA(), selectedRun());
         showView(m_compare);
       });
  make(QStringLiteral("delete"), QStringLiteral("&Delete\u2026"),
       QStringLiteral("delete the selected run's folder (never a running run)"),
       QKeySequence::Delete, [this] {
         const std::string id = selectedRun();
         if (id.empty()) return;
         const auto answer = QMessageBox::question(
             this, QStringLiteral("Delete run"),
             QStringLiteral("Delete the run folder %1 with its log and checkpoints?").arg(q(id)));
         deleteRun(id, answer == QMessageBox::Yes);
       });
  make(QStringLiteral("parallel runs"), QStringLiteral("&Parallel runs on the CPU\u2026"),
       QStringLiteral("how many queued runs may train on the CPU at the same time"), QKeySequence(),
       [this] {
         bool ok = false;
         const int n = QInputDialog::getInt(
             this, QStringLiteral("Parallel runs"),
             QStringLiteral("Runs training on the CPU at once (each uses train.threads cores):"),
             m_options.cpuSlots, 1, 64, 1, &ok);
         if (!ok) return;
         m_options.cpuSlots = n;
         m_queue->setSlots(QStringLiteral("cpu"), n);
         QSettings().setValue(QStringLiteral("queue/cpuSlots"), n);
       });
  make(QStringLiteral("refresh"), QStringLiteral("&Refresh"), QStringLiteral("read the runs now"),
       QKeySequence::Refresh, [this] { refresh(); });
  QAction* live = make(QStringLiteral("live"), QStringLiteral("&Live updates"),
                       QStringLiteral("follow the logs about once a second"),
                       QKeySequence(Qt::CTRL | Qt::Key_L), [this](bool on) { setLive(on); });
  live->setCheckable(true);
  live->setChecked(true);
  make(QStringLiteral("reset zoom"), QStringLiteral("Reset &zoom"),
       QStringLiteral("every chart follows its data again"), QKeySequence(Qt::CTRL | Qt::Key_0),
       [this] { m_charts->resetZoom(); });
  make(QStringLiteral("reset layout"), QStringLiteral("Reset &layout"),
       QStringLiteral("docks, sizes and columns as they were at first start"), QKeySequence(),
       [this] { resetLayout(); });
}

void MainWindow::buildMenus() {
  QMenu* file = menuBar()->addMenu(QStringLiteral("&File"));
  for (const char* name :
       {"new run", "open config", "add run folder", "run experiment", "compare formats on folder"})
    file->addAction(action(QString::fromLatin1(name)));
  file->addAction(action(QStringLiteral("export")));
  file->addAction(action(QStringLiteral("open analysis")));
  file->addSeparator();
  file->addAction(action(QStringLiteral("quit")));
  QMenu* edit = menuBar()->addMenu(QStringLiteral("&Edit"));
  edit->addAction(action(QStringLiteral("find")));
  edit->addAction(action(QStringLiteral("copy path")));
  QMenu* run = menuBar()->addMenu(QStringLiteral("&Run"));
  for (const char* name : {"stop", "kill", "resume", "duplicate", "compare formats", "compare with",
                           "open folder", "delete"})
    run->addAction(action(QString::fromLatin1(name)));
  run->addSeparator();
  run->addAction(action(QStringLiteral("parallel runs")));
  QMenu* view = menuBar()->addMenu(QStringLiteral("&View"));
  for (QDockWidget* dock : findChildren<QDockWidget*>()) view->addAction(dock->toggleViewAction());
  view->addSeparator();
  for (const char* name : {"refresh", "live", "reset zoom", "reset layout"})
    view->addAction(action(QString::fromLatin1(name)));

  QToolBar* bar = addToolBar(QStringLiteral("Main toolbar"));
  bar->setObjectName(QStringLiteral("main toolbar"));
  bar->setAccessibleName(QStringLiteral("main toolbar"));
  for (const char* name :
       {"new run", "run experiment", "stop", "resume", "compare formats", "refresh", "live"})
    bar->addAction(action(QString::fromLatin1(name)));
}

void MainWindow::buildDocks() {
  auto* runs = new QWidget;
  auto* layout = new QVBoxLayout(runs);
  layout->setContentsMargins(4, 4, 4, 4);
  auto* filters = new QHBoxLayout;
  m_filter = new QLineEdit;
  m_filter->setObjectName(QStringLiteral("runs filter"));
  m_filter->setAccessibleName(QStringLiteral("runs filter"));
  m_filter->setPlaceholderText(QStringLiteral("Filter runs (Ctrl+F)"));
  m_filter->setToolTip(
      QStringLiteral("every word must match the name, recipe, format, state or folder"));
  m_filter->setClearButtonEnabled(true);
  connect(m_filter, &QLineEdit::textChanged, this, [this](const QString& text) {
    m_proxy->setText(text);
    onFilterChanged();
  });
  // Esc in the filter clears it.
  auto* clearFilter =
      new QShortcut(QKeySequence(Qt::Key_Escape), m_filter, nullptr, nullptr, Qt::WidgetShortcut);
  connect(clearFilter, &QShortcut::activated, m_filter, &QLineEdit::clear);
  m_recipeFacet = new QComboBox;
  m_recipeFacet->setObjectName(QStringLiteral("recipe facet"));
  m_recipeFacet->setAccessibleName(QStringLiteral("recipe facet"));
  m_recipeFacet->setToolTip(QStringLiteral("show only runs of this recipe"));
  m_recipeFacet->addItem(QStringLiteral("all recipes"), QString());
  for (const char* r : {"sft", "ptq", "qat", "qad"})
    m_recipeFacet->addItem(QString::fromLatin1(r), QString::fromLatin1(r));
  connect(m_recipeFacet, &QComboBox::currentIndexChanged, this, [this] {
    m_proxy->setRecipe(m_recipeFacet->currentData().toString());
    onFilterChanged();
  });
  m_formatFacet = new QComboBox;
  m_formatFacet->setObjectName(QStringLiteral("format facet"));
  m_formatFacet->setAccessibleName(QStringLiteral("format facet"));
  m_formatFacet->setToolTip(QStringLiteral("show only runs of this number format"));
  m_formatFacet->addItem(QStringLiteral("all formats"), QString());
  for (const char* f : {"BF16", "MXFP4", "NVFP4"})
    m_formatFacet->addItem(QString::fromLatin1(f), QString::fromLatin1(f));
  connect(m_formatFacet, &QComboBox::currentIndexChanged, this, [this] {
    m_proxy->setFormat(m_formatFacet->currentData().toString());
    onFilterChanged();
  });
  auto* facetLabel = new QLabel(QStringLiteral("S&how:"));
  facetLabel->setBuddy(m_recipeFacet);
  m_filter->setMinimumWidth(160);
  layout->addWidget(m_filter);
  filters->addWidget(facetLabel);
  filters->addWidget(m_recipeFacet);
  filters->addWidget(m_formatFacet);
  filters->addStretch(1);
  m_table = new RunsTableView;
  m_table->setObjectName(QStringLiteral("runs table"));
  m_table->setAccessibleName(QStringLiteral("runs table"));
  m_table->setToolTip(QStringLiteral("every run under the run folders; right-click for actions"));
  m_table->setModel(m_proxy);
  m_table->setSortingEnabled(true);
  m_table->sortByColumn(RunTableModel::Name, Qt::AscendingOrder);
  m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_table->setSelectionMode(QAbstractItemView::SingleSelection);
  m_table->verticalHeader()->hide();
  m_table->verticalHeader()->setDefaultSectionSize(22);
  m_table->horizontalHeader()->setSectionsMovable(true);
  m_table->horizontalHeader()->setContextMenuPolicy(Qt::CustomContextMenu);
  m_table->setContextMenuPolicy(Qt::CustomContextMenu);
  m_table->setAlternatingRowColors(true);
  m_table->setColumnWidth(RunTableModel::Name, 190);
  connect(m_table, &QTableView::customContextMenuRequested, this, &MainWindow::runsContextMenu);
  connect(m_table->selectionModel(), &QItemSelectionModel::selectionChanged, this,
          &MainWindow::onSelectionChanged);
  // Column choices: the header's context menu.
  connect(m_table->horizontalHeader(), &QHeaderView::customContextMenuRequested, this,
          [this](const QPoint& pos) {
            QMenu menu(this);
            for (int c = 1; c < RunTableModel::ColumnCount; ++c) {
              QAction* a = menu.addAction(
                  m_model->headerData(c, Qt::Horizontal, Qt::DisplayRole).toString());
              a->setCheckable(true);
              a->setChecked(!m_table->isColumnHidden(c));
              connect(a, &QAction::toggled, this,
                      [this, c](bool on) { m_table->setColumnHidden(c, !on); });
            }
            menu.exec(m_table->horizontalHeader()->mapToGlobal(pos));
          });
  connect(m_model, &RunTableModel::checkedChanged, this, &MainWindow::pushChartRuns);
  m_filterHint = new QLabel;
  m_filterHint->setObjectName(QStringLiteral("filter hint"));
  m_filterHint->setAccessibleDescription(QStringLiteral("why the runs table is empty"));
  m_filterHint->setWordWrap(true);
  m_filterHint->setStyleSheet(QStringLiteral("QLabel { color: #8a4b00; padding: 2px; }"));
  m_filterHint->hide();
  layout->addLayout(filters);
  layout->addWidget(m_filterHint);
  layout->addWidget(m_table, 1);

  auto* runsDock = new QDockWidget(QStringLiteral("Runs"), this);
  runsDock->setObjectName(QStringLiteral("runsDock"));
  runsDock->setWidget(runs);
  addDockWidget(Qt::LeftDockWidgetArea, runsDock);

  m_details = new RunDetails;
  auto* detailsDock = new QDockWidget(QStringLiteral("Run details"), this);
  detailsDock->setObjectName(QStringLiteral("detailsDock"));
  detailsDock->setWidget(m_details);
  addDockWidget(Qt::RightDockWidgetArea, detailsDock);
}

// The default layout on the window's width: the runs take 37% of it and the details 21% (560
// and 320 px of 1500); below 1200 px the details go under the runs, so that the charts keep the
// middle (a 1366x768 laptop, a small VNC screen).
void MainWindow::fitDefaultLayout() {
  auto* runs = findChild<QDockWidget*>(QStringLiteral("runsDock"));
  auto* details = findChild<QDockWidget*>(QStringLiteral("detailsDock"));
  if (width() < 1200) {
    splitDockWidget(runs, details, Qt::Vertical);
    resizeDocks({runs}, {width() * 40 / 100}, Qt::Horizontal);
  } else {
    resizeDocks({runs, details}, {width() * 37 / 100, width() * 21 / 100}, Qt::Horizontal);
  }
}

// Narrowing the window takes its width from the middle first (the docks keep theirs), so a
// window made smaller by hand would end with wide docks around a strip of charts. Past the point
// where the middle has 40% of the width (about what the default layout gives it) the side docks
// narrow in proportion instead.
void MainWindow::resizeEvent(QResizeEvent* event) {
  QMainWindow::resizeEvent(event);
  if (event->oldSize().isValid() && event->size().width() < event->oldSize().width())
    keepMiddleWide();
}

// A layout saved on a wider window (or screen) comes back with docks sized for it: once the
// restored layout has settled at this window's size, the same rule applies.
void MainWindow::showEvent(QShowEvent* event) {
  QMainWindow::showEvent(event);
  if (m_shownOnce) return;
  m_shownOnce = true;
  QTimer::singleShot(0, this, &MainWindow::keepMiddleWide);
}

void MainWindow::keepMiddleWide() {
  QList<QDockWidget*> docks;
  QList<int> widths;
  int left = 0, right = 0;
  for (QDockWidget* dock : findChildren<QDockWidget*>()) {
    if (dock->isHidden() || dock->isFloating()) continue;
    const Qt::DockWidgetArea area = dockWidgetArea(dock);
    if (area == Qt::LeftDockWidgetArea)
      left = std::max(left, dock->width());
    else if (area == Qt::RightDockWidgetArea)
      right = std::max(right, dock->width());
    else
      continue;
    docks << dock;
    widths << dock->width();
  }
  const int sides = left + right, room = width() * 60 / 100;
  if (sides <= room || sides <= 0) return;
  for (int& w : widths) w = std::max(1, w * room / sides);
  resizeDocks(docks, widths, Qt::Horizontal);
}

int MainWindow::tabOf(const QWidget* view) const {
  for (int i = 0; i < m_tabs->count(); ++i)
    if (m_tabs->widget(i) == view || m_tabs->widget(i)->isAncestorOf(view)) return i;
  return -1;
}

void MainWindow::showView(QWidget* view) {
  m_tabs->setCurrentIndex(tabOf(view));
}

// ---- Settings -----------------------------------------------------------------------------------

void MainWindow::restoreSettings() {
  QSettings s;
  if (!restoreGeometry(s.value(QStringLiteral("mainWindow/geometry")).toByteArray())) {
    // The default size never exceeds the screen: a 1366x768 laptop gets the whole of it.
    QSize size(1500, 900);
    if (const QScreen* screen = this->screen())
      size = size.boundedTo(screen->availableGeometry().size() * 0.95);
    resize(size);
  }
  const QByteArray state = s.value(QStringLiteral("mainWindow/state")).toByteArray();
  // Another layout version (or a damaged value) gives the default layout, never half of one.
  if (state.isEmpty() || !restoreState(state, kLayoutVersion)) {
    restoreState(m_defaultState, kLayoutVersion);
    fitDefaultLayout();
  }
  const QByteArray header = s.value(QStringLiteral("runs/header")).toByteArray();
  if (!header.isEmpty()) m_table->horizontalHeader()->restoreState(header);
  m_filter->setText(s.value(QStringLiteral("runs/filter")).toString());
  for (QComboBox* facet : {m_recipeFacet, m_formatFacet}) {
    const int i = facet->findData(s.value(QStringLiteral("runs/") + facet->objectName()));
    facet->setCurrentIndex(std::max(0, i));
  }
  CurveSettings c = m_charts->settings();
  c.x = XAxis(std::clamp(s.value(QStringLiteral("charts/x"), int(c.x)).toInt(), 0, 2));
  c.logY = s.value(QStringLiteral("charts/logY"), c.logY).toBool();
  c.smoothing =
      std::clamp(s.value(QStringLiteral("charts/smoothing"), c.smoothing).toDouble(), 0.0, 0.99);
  c.movingAverage =
      std::max(1, s.value(QStringLiteral("charts/movingAverage"), c.movingAverage).toInt());
  m_charts->setSettings(c);
}

void MainWindow::saveSettings() {
  QSettings s;
  s.setValue(QStringLiteral("mainWindow/geometry"), saveGeometry());
  s.setValue(QStringLiteral("mainWindow/state"), saveState(kLayoutVersion));
  s.setValue(QStringLiteral("runs/header"), m_table->horizontalHeader()->saveState());
  s.setValue(QStringLiteral("runs/filter"), m_filter->text());
  for (QComboBox* facet : {m_recipeFacet, m_formatFacet})
    s.setValue(QStringLiteral("runs/") + facet->objectName(), facet->currentData());
  s.setValue(QStringLiteral("runs/roots"), m_roots);
  const CurveSettings c = m_charts->settings();
  s.setValue(QStringLiteral("charts/x"), int(c.x));
  s.setValue(QStringLiteral("charts/logY"), c.logY);
  s.setValue(QStringLiteral("charts/smoothing"), c.smoothing);
  s.setValue(QStringLiteral("charts/movingAverage"), c.movingAverage);
}

void MainWindow::resetLayout() {
  restoreState(m_defaultState, kLayoutVersion);
  for (QDockWidget* dock : findChildren<QDockWidget*>()) dock->show();
  fitDefaultLayout();
  for (int c = 0; c < RunTableModel::ColumnCount; ++c) m_table->setColumnHidden(c, false);
  m_filter->clear();
  m_recipeFacet->setCurrentIndex(0);
  m_formatFacet->setCurrentIndex(0);
  QHeaderView* header = m_table->horizontalHeader();
  for (int c = 0; c < RunTableModel::ColumnCount; ++c)
    header->moveSection(header->visualIndex(c), c);
  m_charts->setSettings(CurveSettings{XAxis::Step, true, 0.6, 1});
}

void MainWindow::closeEvent(QCloseEvent* event) {
  const int running = m_queue->runningCount();
  if (running > 0 && isVisible() && !qEnvironmentVariableIsSet("FP4LAB_NO_CONFIRM")) {
    const auto answer = QMessageBox::question(
        this, QStringLiteral("Runs still running"),
        QStringLiteral("%1 run(s) launched here are still running. Stop them (each writes a "
                       "checkpoint and can be resumed) and quit?")
            .arg(running));
    if (answer != QMessageBox::Yes) {
      event->ignore();
      return;
    }
  }
  saveSettings();
  // Queued runs that never started say so; running ones checkpoint and stop.
  for (const QString& id : m_queue->activeIds())
    if (!m_queue->isRunning(id)) m_queue->stop(id);
  m_queue->shutdown(60000);
  event->accept();
}

// ---- Runs ---------------------------------------------------------------------------------------

void MainWindow::addRoot(const QString& root) {
  const QString clean = QDir::cleanPath(QDir::current().absoluteFilePath(root));
  if (m_roots.contains(clean)) return;
  m_roots << clean;
  Q_EMIT requestRoots(m_roots);
}

void MainWindow::removeRoot(const QString& root) {
  m_roots.removeAll(root);
  Q_EMIT requestRoots(m_roots);
}

void MainWindow::refresh() {
  Q_EMIT requestPoll();
}

void MainWindow::setLive(bool live) {
  m_live = live;
  if (QAction* a = action(QStringLiteral("live")); a && a->isChecked() != live) a->setChecked(live);
  Q_EMIT requestPaused(!live);
}

const RunSnapshot* MainWindow::snapshot(const std::string& id) const {
  const int row = m_model->rowOf(id);
  return row < 0 ? nullptr : m_model->run(row);
}

void MainWindow::onSnapshots(RunSnapshotsPtr snapshots) {
  m_rawSnapshots = snapshots;
  snapshots = markStarting(snapshots);
  m_snapshots = snapshots;
  const std::string selected = selectedRun();
  m_model->setSnapshots(snapshots);
  fitColumns();
  onFilterChanged();  // the charts, and the hint when the filter matches none of them
  m_compare->setRuns(snapshots);
  m_inspector->setRuns(snapshots);
  m_details->setRun(snapshot(selected.empty() ? m_details->runId() : selected));
  updateStatusBar();
  updateActions();
  Q_EMIT snapshotsApplied();
}

void MainWindow::fitColumns() {
  // A column is never narrower than what it shows ("finished (damaged)", a date, "1 h 05 min"):
  // widened when its text grows, never narrowed under the user's hand.
  for (int c = RunTableModel::Name; c < RunTableModel::ColumnCount; ++c) {
    if (m_table->isColumnHidden(c)) continue;
    int wanted = std::max(static_cast<QAbstractItemView*>(m_table)->sizeHintForColumn(c),
                          m_table->horizontalHeader()->sectionSizeHint(c));
    // The frozen name column up to a third of the dock: long names are in the tooltip.
    if (c == RunTableModel::Name) wanted = std::min(wanted, std::max(190, m_table->width() / 3));
    if (wanted > m_table->columnWidth(c)) m_table->setColumnWidth(c, wanted);
  }
}

RunSnapshotsPtr MainWindow::markStarting(RunSnapshotsPtr snapshots) const {
  // status.json says "queued" until the run's process has loaded and says "running"; a process
  // this window started in the meantime is "starting" in every view (not a state of status.json).
  if (!snapshots) return snapshots;
  auto isStarting = [&](const RunSnapshot& r) {
    return r.state() == RunState::Queued && m_queue->isRunning(q(r.id));
  };
  if (std::none_of(snapshots->begin(), snapshots->end(),
                   [&](const RunSnapshot& r) { return isStarting(r) != r.starting; }))
    return snapshots;
  auto marked = std::make_shared<RunSnapshots>(*snapshots);  // curves are shared, not copied
  for (RunSnapshot& r : *marked) r.starting = isStarting(r);
  return marked;
}

void MainWindow::pushChartRuns() {
  // The charts show what the table shows: checked runs the filter lets through.
  std::set<std::string> shown;
  const std::set<std::string> checked = m_model->checkedIds();
  for (int row = 0; row < m_proxy->rowCount(); ++row) {
    const std::string id =
        m_proxy->index(row, 0).data(RunTableModel::IdRole).toString().toStdString();
    if (checked.count(id)) shown.insert(id);
  }
  m_charts->setRuns(m_snapshots, shown);
}

void MainWindow::onFilterChanged() {
  pushChartRuns();
  // A filter that matches nothing says so (the table alone would just look empty).
  const int all = m_model->rowCount(), matching = m_proxy->rowCount();
  m_filterHint->setVisible(all > 0 && matching == 0);
  if (all > 0 && matching == 0)
    m_filterHint->setText(QStringLiteral("No run of %1 matches the filter. Esc in the filter box "
                                         "clears it; \"all recipes\" and \"all formats\" show "
                                         "every kind.")
                              .arg(all));
  // The run selected before the filter hid it is selected again once the filter shows it.
  if (selectedRun().empty() && !m_lastSelected.empty()) {
    const int row = m_model->rowOf(m_lastSelected);
    const QModelIndex shown =
        row < 0 ? QModelIndex() : m_proxy->mapFromSource(m_model->index(row, 0));
    if (shown.isValid())
      m_table->selectionModel()->select(
          shown, QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
  }
}

std::string MainWindow::selectedRun() const {
  const QModelIndexList rows = m_table->selectionModel()->selectedRows();
  if (rows.isEmpty()) return {};
  return rows.front().data(RunTableModel::IdRole).toString().toStdString();
}

void MainWindow::selectRun(const std::string& id) {
  const int row = m_model->rowOf(id);
  if (row < 0) return;
  const QModelIndex index = m_proxy->mapFromSource(m_model->index(row, 0));
  if (!index.isValid()) {  // filtered out: show it anyway
    m_filter->clear();
    m_recipeFacet->setCurrentIndex(0);
    m_formatFacet->setCurrentIndex(0);
  }
  const QModelIndex shown = m_proxy->mapFromSource(m_model->index(row, 0));
  m_table->selectionModel()->select(
      shown, QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
  m_table->scrollTo(shown);
}

void MainWindow::onSelectionChanged() {
  const std::string id = selectedRun();
  // A filter that hides the selected run keeps it as the run whose details show, and selects it
  // again when it shows it again; only another choice replaces it.
  if (id.empty() && !m_lastSelected.empty() && m_model->rowOf(m_lastSelected) >= 0 &&
      !m_proxy->accepts(m_model->rowOf(m_lastSelected)))
    return;
  m_lastSelected = id;
  m_details->setRun(snapshot(id));
  m_details->setConsole(m_queue->console(q(id)));
  m_charts->setSelectedRun(id);
  m_inspector->setSelectedRun(id);
  updateStatusBar();
  updateActions();
}

void MainWindow::updateStatusBar() {
  int running = 0, queued = 0, starting = 0;
  if (m_snapshots)
    for (const auto& r : *m_snapshots) {
      running += r.state() == RunState::Running;
      (r.starting ? starting : queued) += r.state() == RunState::Queued;
    }
  m_pollInfo->setText(starting > 0
                          ? QStringLiteral("%1 running, %2 starting, %3 queued")
                                .arg(running)
                                .arg(starting)
                                .arg(queued)
                          : QStringLiteral("%1 running, %2 queued").arg(running).arg(queued));
  const RunSnapshot* r = snapshot(selectedRun());
  if (!r) {
    m_progress->setText(QStringLiteral("Select a run to see its progress."));
    return;
  }
  const RunSummary& s = r->summary;
  QStringList parts;
  parts << QStringLiteral("%1: %2").arg(q(r->name), QString::fromStdString(stateLabel(*r)));
  if (s.maxSteps > 0) parts << QStringLiteral("step %1/%2").arg(s.step).arg(s.maxSteps);
  if (std::isfinite(s.lastTrainLoss))
    parts << QStringLiteral("loss %1").arg(significant(s.lastTrainLoss));
  if (std::isfinite(s.lastValLoss))
    parts << QStringLiteral("val loss %1").arg(significant(s.lastValLoss));
  if (std::isfinite(s.tokensPerSecond))
    parts << QStringLiteral("%1 tok/s").arg(s.tokensPerSecond, 0, 'f', 0);
  double eta = NAN;
  if (const JobEvent* e = m_queue->lastEvent(q(r->id));
      e && e->etaSeconds > 0 && r->state() == RunState::Running)
    eta = e->etaSeconds;
  else if (r->state() == RunState::Running && s.step > 0 && s.maxSteps > s.step &&
           std::isfinite(s.wallSeconds))
    eta = s.wallSeconds / double(s.step) * double(s.maxSteps - s.step);
  if (std::isfinite(eta)) parts << QStringLiteral("ETA %1").arg(formatDuration(eta));
  m_progress->setText(parts.join(QStringLiteral("  \u00b7  ")));
}

void MainWindow::updateActions() {
  const RunSnapshot* r = snapshot(selectedRun());
  const bool any = r != nullptr;
  const RunState s = r ? r->state() : RunState::Unknown;
  const bool here = r && m_queue->contains(q(r->id));
  action(QStringLiteral("stop"))->setEnabled(here || s == RunState::Running);
  action(QStringLiteral("kill"))->setEnabled(here || s == RunState::Running);
  action(QStringLiteral("resume"))
      ->setEnabled(r && !here &&
                   (s == RunState::Crashed || s == RunState::Cancelled || s == RunState::Failed) &&
                   !r->folder.latestCheckpoint.empty());
  action(QStringLiteral("duplicate"))->setEnabled(r && r->folder.hasConfig);
  action(QStringLiteral("compare formats"))
      ->setEnabled(r && r->folder.hasConfig && r->folder.config.quantFormat == "none" &&
                   s == RunState::Finished);
  action(QStringLiteral("delete"))->setEnabled(any && !here && !isActive(s));
  // Export: a selected run needs a model/ or a checkpoint; with none selected, any folder.
  action(QStringLiteral("export"))
      ->setEnabled(!r ||
                   !ExportDialog::modelDirOfRun(q(r->id), q(r->folder.latestCheckpoint)).isEmpty());
  for (const char* name : {"copy path", "open folder", "compare with"})
    action(QString::fromLatin1(name))->setEnabled(any);
}

void MainWindow::showMessage(const QString& text, bool error) {
  m_message->setText(text);
  m_messageBar->setStyleSheet(error ? QStringLiteral("background: #fde7e1;")
                                    : QStringLiteral("background: #e8f3ea;"));
  m_messageBar->show();
}

QString MainWindow::messageText() const {
  return m_messageBar->isVisible() ? m_message->text() : QString();
}

void MainWindow::runsContextMenu(const QPoint& pos) {
  const QModelIndex index = m_table->indexAt(pos);
  if (index.isValid())
    m_table->selectionModel()->select(
        index, QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
  QMenu menu(this);
  for (const char* name : std::initializer_list<const char*>{
           "open folder", "copy path", nullptr, "stop", "kill", "resume", nullptr, "duplicate",
           "compare formats", "compare with", "export", nullptr, "delete"}) {
    if (!name)
      menu.addSeparator();
    else
      menu.addAction(action(QString::fromLatin1(name)));
  }
  menu.exec(m_table->viewport()->mapToGlobal(pos));
}

}  // namespace fp4lab::widgets
