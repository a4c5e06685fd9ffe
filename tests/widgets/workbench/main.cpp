// Catch2's main for the workbench tests: one QApplication for the whole executable (Qt allows one
// per process), on the offscreen platform unless QT_QPA_PLATFORM names another, with settings and
// standard paths isolated from the user's (QStandardPaths test mode, test organisation name).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <QApplication>
#include <QStandardPaths>

#include <clocale>
#include <cstdlib>

int main(int argc, char** argv) {
  if (!std::getenv("QT_QPA_PLATFORM")) setenv("QT_QPA_PLATFORM", "offscreen", 1);
  QStandardPaths::setTestModeEnabled(true);
  QApplication::setOrganizationName(QStringLiteral("fp4lab-tests"));
  QApplication::setApplicationName(QStringLiteral("fp4lab-workbench-tests"));
  QApplication app(argc, argv);
  std::setlocale(LC_NUMERIC, "C");  // as the workbench does (widgets/workbench.cpp)
  return Catch::Session().run(argc, argv);
}
