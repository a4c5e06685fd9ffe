// A QApplication on demand, on the offscreen platform when no display is there.
#include "fp4lab/widgets/qt_application.h"

#include <QApplication>
#include <QCoreApplication>
#include <QGuiApplication>
#include <QString>
#include <QtGlobal>

#include <cstdlib>

#include "fp4lab/error.h"

namespace fp4lab::widgets {

namespace {

bool envSet(const char* name) {
  const char* value = std::getenv(name);
  return value && *value;
}

QtMessageHandler previousHandler = nullptr;

// Drops Qt's notice that XDG_RUNTIME_DIR is unset (normal for a batch job on a server, and
// harmless here: it only names a fallback folder); everything else goes to the previous handler.
void messageFilter(QtMsgType type, const QMessageLogContext& context, const QString& message) {
  if (type == QtWarningMsg &&
      message.startsWith(QLatin1String("QStandardPaths: XDG_RUNTIME_DIR not set")))
    return;
  if (previousHandler) previousHandler(type, context, message);
}

}  // namespace

void ensureApplication(QtPlatform platform) {
  if (QCoreApplication* existing = QCoreApplication::instance()) {
    if (!qobject_cast<QApplication*>(existing))
      throw Error("the process has a QCoreApplication, and charts need a QApplication",
                  "fp4lab widgets", "create a QApplication in main() instead");
    return;
  }
  const bool forced = envSet("QT_QPA_PLATFORM");
  const bool display = envSet("DISPLAY") || envSet("WAYLAND_DISPLAY");
  const bool offscreen = !forced && (platform == QtPlatform::Offscreen || !display);
  // QApplication keeps references to argc and argv for its whole life. "-platform" on the command
  // line rather than QT_QPA_PLATFORM in the environment, so child processes are not affected.
  static int argc = 0;
  static char arg0[] = "fp4lab", arg1[] = "-platform", arg2[] = "offscreen";
  static char* argv[] = {arg0, arg1, arg2, nullptr};
  argc = offscreen ? 3 : 1;
  previousHandler = qInstallMessageHandler(messageFilter);  // Qt's default handler if none was set
  // Kept for the life of the process on purpose (see the header); never deleted.
  new QApplication(argc, argv);
}

std::string qtPlatformName() {
  if (!QCoreApplication::instance() ||
      !qobject_cast<QGuiApplication*>(QCoreApplication::instance()))
    return {};
  return QGuiApplication::platformName().toStdString();
}

}  // namespace fp4lab::widgets
