// `fp4lab analyze`: the FP4 error statistics of every linear weight the recipes would quantize,
// per format, without training (engine/analyze/, fp4lab_analyze): a table, or JSON for scripts.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli.h"
#include "fp4lab/analyze/analyze.h"
#include "fp4lab/common/files.h"
#include "fp4lab/error.h"
#include "fp4lab/run/model.h"
#include "progress.h"

namespace fp4lab::cli {
namespace {

const char* kUsage =
    "fp4lab analyze MODEL_DIR [--formats mxfp4,mxfp4-floor,nvfp4,nvfp4-2d] [--include GLOB]...\n"
    "              [--exclude GLOB]... [--threads N] [--json] [--output FILE.h5 [--force]]";

void printHelp() {
  std::printf(
      "usage: %s\n\n"
      "Fake-quantizes every linear weight of MODEL_DIR (a Hugging Face folder) that the recipes\n"
      "would quantize, in each format, with the kernels' fused pass, and prints its error\n"
      "statistics under the run log's /quant metric names (sqnr_db, rel_l2, mse, cosine,\n"
      "max_abs, clip_frac, zero_frac) and its outlier counts (|w| > 3 rms, |w| > 6 rms), one line\n"
      "per layer (Hugging Face module name) and format. NVFP4 uses one tensor scale per fused\n"
      "group (q/k/v, gate/up), the group's largest amax, as training and export do.\n"
      "--output also writes each block's MSE, histograms of the weights (log-spaced |w|, by\n"
      "sign), of the block scale codes (E8M0 exponents, E4M3 codes) and of block amax / tensor\n"
      "amax, and the outlier counts (|w| > 3, 6, 10 rms) to an HDF5 file laid out like a run\n"
      "log's /quant group, one /quant/<format> group per format (docs/log-schema.md).\n\n"
      "options:\n"
      "  --formats LIST   comma-separated, of mxfp4 (ceil scales), mxfp4-floor (OCP floor\n"
      "                   scales), nvfp4, nvfp4-2d (16x16 weight blocks); default: all four\n"
      "  --include GLOB   analyse matching modules (fnmatch, '*' crosses dots; repeatable or\n"
      "                   comma-separated) instead of quant.include's default (model.layers.*)\n"
      "  --exclude GLOB   skip matching modules, on top of quant.exclude's default\n"
      "                   (*lm_head*,*embed*,*router*,*.gate)\n"
      "  --threads N      layers analysed at once (default: the hardware threads)\n"
      "  --json           print the analysis as JSON: {model, formats, seconds, layers: [{module,\n"
      "                   format, rows, cols, sqnr_db, rel_l2, ..., outliers_3rms, ...,\n"
      "                   worst_block, worst_block_mse}]}\n"
      "  --output FILE    write the analysis to FILE (HDF5), atomically (temporary name, rename)\n"
      "  --force          replace FILE if it exists\n"
      "\nProgress shows on stderr when it is a terminal. SIGINT/SIGTERM cancel the analysis\n"
      "(exit code 2, no output file).\n",
      kUsage);
}

std::vector<std::string> splitCommas(const std::string& value) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= value.size()) {
    size_t comma = value.find(',', start);
    if (comma == std::string::npos) comma = value.size();
    if (comma > start) out.push_back(value.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

}  // namespace

int runAnalyze(const std::vector<std::string>& rawArgs) {
  // --include and --exclude may repeat: collected here, the rest goes through Args.
  std::vector<std::string> argv, include, exclude;
  for (size_t i = 0; i < rawArgs.size(); ++i) {
    const std::string& a = rawArgs[i];
    if (a == "--include" || a == "--exclude") {
      if (i + 1 >= rawArgs.size())
        throw Error(a + " needs a value", "fp4lab analyze", "usage: " + std::string(kUsage));
      std::vector<std::string>& into = a == "--include" ? include : exclude;
      for (const std::string& g : splitCommas(rawArgs[++i])) into.push_back(g);
    } else {
      argv.push_back(a);
    }
  }
  Args args("analyze", argv, {"formats", "threads", "output"}, {"json", "force", "help"});
  if (args.has("help")) {
    printHelp();
    return 0;
  }
  args.requirePositionals(1, kUsage);
  analyze::Options options;
  options.modelDir = args.positionals()[0];
  if (args.has("formats")) {
    options.formats = splitCommas(args.get("formats", ""));
    if (options.formats.empty())
      throw Error("--formats is empty", "--formats", "e.g. --formats mxfp4,nvfp4");
    for (const std::string& f : options.formats) analyze::formatConfig(f);  // validates
  }
  options.include = include;
  options.exclude = exclude;
  options.threads = int(args.integer("threads", 0, 0, 1024));
  const bool json = args.has("json");
  const std::string output = args.get("output", "");
  const bool force = args.has("force");
  if (args.has("output") && output.empty())
    throw Error("--output is empty", "--output", "e.g. --output analysis.h5");
  if (force && output.empty())
    throw Error("--force without --output", "--force", "it replaces the --output file");
  if (!output.empty()) files::checkOutputFile(output, force, "analysis.h5");
  // Per-block errors are kept only for the file (they take 4 bytes per block and format).
  options.blocks = !output.empty();

  installStopHandlers();
  const bool tty = ::isatty(2);
  auto progress = [&](const analyze::Progress& p) {
    if (tty)
      std::fprintf(stderr, "\ranalyze %3d%%  %-60.60s", int(100 * p.done / p.total),
                   p.layer.c_str());
  };
  // An export folder: its weights as deployed, decoded exactly into a temporary F32 folder.
  const std::string layout = run::quantizedLayoutOf(options.modelDir);
  std::string decoded;
  struct Cleanup {
    std::string& dir;
    ~Cleanup() {
      if (!dir.empty()) files::removeTree(dir);
    }
  } cleanup{decoded};
  if (!layout.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    decoded =
        files::makeTemporaryDirectory(files::join(tmp && *tmp ? tmp : "/tmp", "fp4lab-analyze-"));
    run::importModelFolder(options.modelDir, files::join(decoded, "model"), /*float32=*/true,
                           false);
    std::fprintf(stderr, "%s: a %s export, analyzed as its decoded weights\n",
                 options.modelDir.c_str(), layout.c_str());
    options.modelDir = files::join(decoded, "model");
  }
  const analyze::Analysis a = analyze::analyzeModel(options, progress, &stopRequested());
  if (tty) std::fprintf(stderr, "\r%80s\r", "");
  if (!output.empty()) {
    if (stopRequested()) throw Error("analysis cancelled", output, "nothing was written");
    analyze::writeAnalysisFile(a, output, force);
  }
  if (json) {
    std::printf("%s\n", analyze::toJson(a).c_str());
  } else {
    std::fputs(analyze::formatTable(a).c_str(), stdout);
    std::printf("%zu layers x %zu formats in %s on %d threads\n", a.layers.size(), a.formats.size(),
                duration(a.seconds).c_str(), a.threads);
    if (!output.empty()) std::printf("wrote %s\n", output.c_str());
  }
  return 0;
}

}  // namespace fp4lab::cli
