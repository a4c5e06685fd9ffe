// `fp4lab experiment`: the built-in SFT -> PTQ / QAT / QAD experiment in MXFP4 and NVFP4, with its
// report. The README's main job.
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <filesystem>

#include "cli.h"
#include "fp4lab/error.h"
#include "fp4lab/run/experiment.h"
#include "progress.h"
#ifdef FP4LAB_WITH_WIDGETS
#include "fp4lab/widgets/experiment_plots.h"
#endif

namespace fp4lab::cli {

#ifdef FP4LAB_WITH_WIDGETS
namespace {

// Draws the runs' curves into DIR/report/*.png; returns report.md's "## Plots" section linking
// them (paths relative to DIR), and any run left out.
std::string plotsSection(const run::ExperimentResult& result, const std::string& dir) {
  std::vector<widgets::PlotRun> runs;
  for (const auto& r : result.runs) runs.push_back({r.name, r.runDir, r.group, r.from});
  const widgets::ExperimentPlots plots =
      widgets::renderExperimentPlots((std::filesystem::path(dir) / "report").string(), runs);
  std::string md = "\n## Plots\n";
  for (const auto& p : plots.plots) md += "\n![" + p.title + "](report/" + p.fileName + ")\n";
  if (!plots.warnings.empty()) md += "\n";
  for (const auto& w : plots.warnings) {
    std::fprintf(stderr, "fp4lab: warning: %s\n", w.c_str());
    md += "- " + w + "\n";
  }
  return md;
}

}  // namespace
#endif

int runExperiment(const std::vector<std::string>& argv) {
  Args args("experiment", argv, {"config", "output-dir"}, {"quick", "w4a16", "help"});
  const char* usage =
      "fp4lab experiment [--quick] [--w4a16] [--config FILE.yaml] [--output-dir DIR] "
      "[key=value ...]";
  if (args.has("help")) {
    std::printf(
        "usage: %s\n\n"
        "From the built-in base model: SFT in BF16 on the two built-in tasks, then PTQ, QAT and\n"
        "QAD from the SFT model in MXFP4 and NVFP4 (W4A4; --w4a16 for weights only), and QAT\n"
        "straight from the base model. Every stage is a run folder under DIR (default\n"
        "runs/experiment-<utc>); DIR/report.md and DIR/report.csv compare them%s. Running again\n"
        "with the same DIR reuses the runs that finished. --quick is the small variant the tests\n"
        "use. Keys (YAML or key=value): sft_steps, sft_lr, qat_steps, qat_lr, qad_steps, qad_lr,\n"
        "batch_size, seq_len, task_items, formats, threads, seed, data_seed, ...\n"
        "(docs/user-guide.md). repeats=3 runs PTQ, QAT and QAD at three run seeds and reports\n"
        "their means and spread (one seed's gap recovered moves by tens of points).\n",
        usage,
#ifdef FP4LAB_WITH_WIDGETS
        ",\nand DIR/report/ holds PNG plots of the curves (linked from report.md)"
#else
        ""
#endif
    );
    return 0;
  }
  run::ExperimentConfig config =
      args.has("quick") ? run::ExperimentConfig::quick() : run::ExperimentConfig();
  if (args.has("config")) config.applyYamlFile(args.get("config", ""));
  for (const auto& p : args.positionals()) {
    if (p.find('=') == std::string::npos)
      throw Error("unexpected argument '" + p + "'", "fp4lab experiment",
                  std::string("usage: ") + usage);
    config.applyOverride(p);
  }
  if (args.has("w4a16")) config.activations = false;

  run::ExperimentOptions options;
  options.dir = args.get("output-dir", "");
  if (options.dir.empty()) {
    std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[64];
    std::strftime(buf, sizeof buf, "runs/experiment-%Y%m%d-%H%M%S", &tm);
    options.dir = buf;
  }
  options.commandLine = "fp4lab experiment";
  for (const auto& a : argv) options.commandLine += " " + a;
  installStopHandlers();
  options.stopRequested = &stopRequested();
  const bool tty = isatty(fileno(stderr));
  std::string current;
  Progress progress(tty);
  options.onEvent = [&](const std::string& name, const run::RunEvent& e) {
    if (name != current) {
      current = name;
      progress = Progress(tty, "[" + name + "] ");
    }
    if (e.kind == "checkpoint" || e.kind == "started") return;  // the run folders are known
    progress(e);
  };
  std::fprintf(stderr, "experiment folder: %s\n", options.dir.c_str());
#ifdef FP4LAB_WITH_WIDGETS
  options.reportAppendix = [&](const run::ExperimentResult& r) {
    return plotsSection(r, options.dir);
  };
#endif
  run::ExperimentResult result = run::runExperiment(config, options);
  std::printf("%s\n", result.reportMarkdown.c_str());
  std::fprintf(stderr, "report: %s/report.md and %s/report.csv (%s)\n", options.dir.c_str(),
               options.dir.c_str(), duration(result.seconds).c_str());
#ifdef FP4LAB_WITH_WIDGETS
  std::fprintf(stderr, "plots: %s/report/*.png\n", options.dir.c_str());
#endif
  return 0;
}

}  // namespace fp4lab::cli
