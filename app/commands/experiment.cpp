// `fp4lab experiment`: the built-in SFT -> PTQ / QAT / QAD experiment in MXFP4 and NVFP4, with its
// report. The README's main job.
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <filesystem>

#include "cli.h"
#include "fp4lab/common/time.h"
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
  Args args("experiment", argv, {"config", "output-dir", "preset"},
            {"quick", "w4a16", "help", "dry-run", "rerun-changed", "reuse-changed", "list-keys"});
  const char* usage =
      "fp4lab experiment [--preset NAME | --quick] [--w4a16] [--config FILE.yaml]\n"
      "                  [--output-dir DIR] [--dry-run] [--rerun-changed | --reuse-changed]\n"
      "                  [key=value ...]";
  if (args.has("help")) {
    std::printf(
        "usage: %s\n\n"
        "From the built-in base model: SFT in BF16 on the two built-in tasks, then PTQ, QAT and\n"
        "QAD from the SFT model in MXFP4 and NVFP4 (W4A4; --w4a16 for weights only), and QAT\n"
        "straight from the base model. Every stage is a run folder under DIR (default\n"
        "runs/experiment-<utc>); DIR/report.md and DIR/report.csv compare them%s. Running again\n"
        "with the same DIR reuses the runs that finished with the configuration that would run\n"
        "now and resumes unfinished ones; a finished run that ran another configuration stops the\n"
        "experiment before anything runs, unless --rerun-changed (move it to DIR/replaced/ and\n"
        "run it again) or --reuse-changed (report it as it ran). --dry-run prints what would run.\n"
        "--preset names a starting point: tiny (the default), tiny-quick (= --quick, the small\n"
        "variant the tests use), smollm2 (SmolLM2-135M-Instruct on math_in_language and\n"
        "json_answer, with QAT and QAD on off-domain data and QAD on random tokens; hours on two\n"
        "cores) and smollm2-quick (the same runs, small: under 30 minutes); the config file and\n"
        "key=value override it. Keys (YAML or key=value; --list-keys prints\n"
        "them all): sft_steps, sft_lr, qat_steps, qat_lr, qad_steps, qad_lr, batch_size, seq_len,\n"
        "task_items, formats, threads, seed, data_seed, ... repeats=3 runs PTQ, QAT and QAD at\n"
        "three run seeds and reports their means and spread (one seed's gap recovered moves by\n"
        "tens of points).\n",
        usage,
#ifdef FP4LAB_WITH_WIDGETS
        ",\nand DIR/report/ holds PNG plots of the curves (linked from report.md)"
#else
        ""
#endif
    );
    return 0;
  }
  if (args.has("list-keys")) {
    std::printf("%s", keyTable(true).c_str());
    return 0;
  }
  if (args.has("rerun-changed") && args.has("reuse-changed"))
    throw Error("--rerun-changed and --reuse-changed are alternatives", "fp4lab experiment");
  if (args.has("quick") && args.has("preset"))
    throw Error("--quick and --preset are alternatives (--quick is --preset tiny-quick)",
                "fp4lab experiment");
  run::ExperimentConfig config = args.has("quick") ? run::ExperimentConfig::quick()
                                 : args.has("preset")
                                     ? run::ExperimentConfig::preset(args.get("preset", ""))
                                     : run::ExperimentConfig();
  if (args.has("config")) config.applyYamlFile(args.get("config", ""));
  for (const auto& p : args.positionals()) {
    if (p.find('=') == std::string::npos)
      throw Error("unexpected argument '" + p + "'", "fp4lab experiment",
                  std::string("usage: ") + usage);
    config.applyOverride(p);
  }
  if (args.has("w4a16")) config.activations = false;
  config.validate();

  run::ExperimentOptions options;
  options.dir = args.get("output-dir", "");
  if (options.dir.empty()) options.dir = "runs/experiment-" + utcCompactTimestamp();
  options.changedRuns = args.has("rerun-changed")   ? run::ChangedRuns::Rerun
                        : args.has("reuse-changed") ? run::ChangedRuns::Reuse
                                                    : run::ChangedRuns::Refuse;
  if (args.has("dry-run")) {
    for (const auto& p : run::planExperiment(config, options))
      std::printf("%-28s %-14s %s\n", p.name.c_str(), p.action.c_str(), p.detail.c_str());
    return 0;
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
    if (e.kind == EventKind::Checkpoint || e.kind == EventKind::Started)
      return;  // the run folders are known
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
