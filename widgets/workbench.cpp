// The workbench's application object and main window.
#include "fp4lab/widgets/workbench.h"

#include <QApplication>
#include <QIcon>
#include <QTimer>

#include <clocale>
#include <cstdlib>

#include "fp4lab/widgets/main_window.h"
#include "fp4lab/widgets/run_queue.h"

namespace fp4lab::widgets {

bool displayAvailable() {
  for (const char* name : {"DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"}) {
    const char* v = std::getenv(name);
    if (v && *v) return true;
  }
  return false;
}

int runWorkbench(const WorkbenchLaunch& launch) {
  static int argc = 1;
  static char name[] = "fp4lab";
  static char* argv[] = {name, nullptr};
  QApplication::setOrganizationName(QStringLiteral("fp4lab"));
  QApplication::setApplicationName(QStringLiteral("fp4lab"));
  QApplication::setDesktopFileName(QStringLiteral("org.fp4lab.Workbench"));
  QApplication app(argc, argv);
  // QApplication adopts the user's locale for C too; the engine parses numbers with the C
  // library ("0.001" must not depend on a comma-decimal locale).
  std::setlocale(LC_NUMERIC, "C");
  app.setWindowIcon(QIcon::fromTheme(QStringLiteral("org.fp4lab.Workbench")));
  WorkbenchOptions options;
  for (const auto& r : launch.roots) options.roots << QString::fromStdString(r);
  options.program = QString::fromStdString(launch.program);
  MainWindow window(options);
  window.show();
  if (launch.runExperiment) {
    QStringList args;
    for (const auto& a : launch.experimentArgs) args << QString::fromStdString(a);
    const QString dir = window.runExperiment(args, QString::fromStdString(launch.experimentDir));
    if (launch.quitAfterExperimentSeconds >= 0 && !dir.isEmpty()) {
      QObject::connect(window.queue(), &RunQueue::jobFinished, &window,
                       [&window, dir, launch](const QString& id, JobState, const QString&) {
                         if (id == dir)
                           QTimer::singleShot(launch.quitAfterExperimentSeconds * 1000, &window,
                                              &QWidget::close);
                       });
    }
  }
  return app.exec();
}

}  // namespace fp4lab::widgets
