// The built-in experiment's plots as PNG files: training loss, validation loss and KL to the SFT
// model against the step (one curve per run); the validation loss of QAT and QAD from the SFT
// model against the levels of the SFT model and of PTQ (the gap each recovers); and the per-layer
// weight error of the PTQ runs (MXFP4 against NVFP4; from the runs that are not repeats). Plain C++
// interface, so the app can call it without Qt headers.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace fp4lab::widgets {

struct PlotRun {
  PlotRun() = default;
  PlotRun(std::string runName, std::string folder, std::string repeatOf = {},
          std::string startedFrom = {})
      : name(std::move(runName)),
        runDir(std::move(folder)),
        group(std::move(repeatOf)),
        from(std::move(startedFrom)) {}

  std::string name;    // sft, qat-mxfp4, qat-mxfp4-seed1235, ... (legend entry)
  std::string runDir;  // the run folder, holding log.h5
  // The run it repeats at another seed (qat-mxfp4 for qat-mxfp4-seed1235): drawn in that run's
  // colour, thin and dashed, without a legend entry of its own. Empty: the run itself.
  std::string group;
  // The model it started from: "sft", "base" (QAT straight from the base model, left out of the
  // recovery chart), or empty (unknown: treated as from the SFT model).
  std::string from;
};

struct RenderedPlot {
  std::string path;      // the PNG written
  std::string fileName;  // its name inside the output folder, e.g. "training_loss.png"
  std::string title;
  std::vector<std::string> runs;  // the runs drawn in it
  int width = 0, height = 0;      // image size in pixels
  // The plot area inside the image (where the data is drawn), in pixels.
  int plotX = 0, plotY = 0, plotWidth = 0, plotHeight = 0;
};

struct ExperimentPlots {
  std::vector<RenderedPlot> plots;    // in report order; a chart with nothing to draw is skipped
  std::vector<std::string> warnings;  // runs skipped (missing or unreadable log), charts skipped
};

// Reads every run's log and writes the PNGs into outDir (created if missing). All images are drawn
// before the first file is replaced, and each PNG goes to a temporary name first and is renamed
// over the old one: a file is never half written, and a failure to read the logs or to draw leaves
// the files of an earlier rendering as they were.
//
// A run whose log is missing or unreadable is skipped with a warning (the other runs are still
// worth plotting, and the experiment's tables do not depend on the plots). When no run's log can be
// read, or outDir cannot be written, it throws fp4lab::Error naming the file and what to do.
// Creates the process's QApplication if there is none (offscreen unless QT_QPA_PLATFORM is set).
ExperimentPlots renderExperimentPlots(const std::string& outDir, const std::vector<PlotRun>& runs);

}  // namespace fp4lab::widgets
