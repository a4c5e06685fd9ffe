// `fp4lab gui`: the workbench window over run folders; with --experiment, the built-in experiment
// runs in it (the README's main job on a machine with a display).
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>

#include "cli.h"
#include "fp4lab/error.h"
#include "fp4lab/widgets/workbench.h"

namespace fp4lab::cli {

namespace {

// The executable runs are launched with: this very binary.
std::string selfPath() {
  char buffer[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buffer, sizeof buffer - 1);
  if (n <= 0) return "";
  return std::string(buffer, size_t(n));
}

}  // namespace

int runGui(const std::vector<std::string>& argv) {
  // Arguments after `--` go to `fp4lab experiment`.
  std::vector<std::string> own = argv, experimentArgs;
  for (size_t i = 0; i < argv.size(); ++i) {
    if (argv[i] != "--") continue;
    own.assign(argv.begin(), argv.begin() + std::ptrdiff_t(i));
    experimentArgs.assign(argv.begin() + std::ptrdiff_t(i) + 1, argv.end());
    break;
  }
  Args args("gui", own, {"experiment-dir", "quit-after-experiment"}, {"experiment", "help"});
  const char* usage =
      "fp4lab gui [RUNS_DIR ...] [--experiment [--experiment-dir DIR]] [-- EXPERIMENT_ARGS]";
  if (args.has("help")) {
    std::printf(
        "usage: %s\n\n"
        "Opens the workbench window on the given run folders (default: the ones used last, else\n"
        "./runs). A run folder is any folder whose subfolders hold run.yaml or log.h5; the\n"
        "built-in experiment's folder is one. The window launches runs (File > New run), plots\n"
        "them live, compares them and shows their details. --experiment starts the built-in\n"
        "experiment in the window (its runs appear one by one and the report opens at the end);\n"
        "arguments after -- go to `fp4lab experiment` (e.g. -- --quick). `fp4lab` with no\n"
        "command opens the window when a display is present.\n",
        usage);
    return 0;
  }
  if (!widgets::displayAvailable())
    throw Error("no display to open the window on (DISPLAY and WAYLAND_DISPLAY are unset)", "gui",
                "run it in a desktop session, under xvfb-run, or use the other commands "
                "(fp4lab --help) on a headless machine");
  widgets::WorkbenchLaunch launch;
  launch.roots = args.positionals();
  launch.program = selfPath();
  if (const char* bin = std::getenv("FP4LAB_BIN"); bin && *bin) launch.program = bin;
  launch.runExperiment = args.has("experiment") || args.has("experiment-dir");
  launch.experimentDir = args.get("experiment-dir", "");
  launch.experimentArgs = experimentArgs;
  launch.quitAfterExperimentSeconds = int(args.integer("quit-after-experiment", -1, -1, 86400));
  return widgets::runWorkbench(launch);
}

}  // namespace fp4lab::cli
