// Opening the workbench window from the fp4lab executable: plain C++, so app/ needs no Qt header.
#pragma once

#include <string>
#include <vector>

namespace fp4lab::widgets {

struct WorkbenchLaunch {
  std::vector<std::string> roots;  // run roots; empty: the remembered ones, else ./runs
  std::string program;             // the fp4lab executable that runs are launched with
  // Start the built-in experiment in the window (the README's main job with a display): its runs
  // appear one by one, and the report opens at the end.
  bool runExperiment = false;
  std::string experimentDir;                // "" : <first root>/experiment-<utc>
  std::vector<std::string> experimentArgs;  // passed to `fp4lab experiment`
  // Quit when the experiment has ended (scripts and the screenshot tool); 0: stay open.
  int quitAfterExperimentSeconds = -1;
};

// True when a window can be shown: DISPLAY or WAYLAND_DISPLAY is set, or QT_QPA_PLATFORM names
// a platform.
bool displayAvailable();

// Creates the application and the main window and runs the event loop; returns its exit code.
int runWorkbench(const WorkbenchLaunch& launch);

}  // namespace fp4lab::widgets
