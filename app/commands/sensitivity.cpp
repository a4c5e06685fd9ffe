// `fp4lab sensitivity`: the loss when only one layer is fake-quantized, for every layer the
// recipes would quantize, and the greedy keep-the-k-most-sensitive-in-BF16 frontier
// (engine/run/sensitivity.cpp): a table, an HDF5 or JSON file (fp4lab/analyze/
// sensitivity_file.h), and a plan as a run's quant.exclude.
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cli.h"
#include "fp4lab/common/files.h"
#include "fp4lab/common/system.h"
#include "fp4lab/error.h"
#include "fp4lab/run/sensitivity.h"
#include "progress.h"

namespace fp4lab::cli {
namespace {

const char* kUsage =
    "fp4lab sensitivity MODEL_DIR --data FILE.jsonl [--format nvfp4|nvfp4-2d|mxfp4|mxfp4-floor]\n"
    "                  [--w4a4] [--max-batches N] [--threads N] [--no-kl] [--all-plans]\n"
    "                  [--keep K] [--tolerance F] [--output FILE.h5|FILE.json [--force]]\n"
    "                  [--emit-exclude FILE] [--json] [key=value ...]";

void printHelp() {
  std::printf(
      "usage: %s\n\n"
      "How much each layer loses to FP4 on its own, and what keeping the worst ones in BF16\n"
      "buys. Measures the validation loss (mean token cross-entropy) and KL to the BF16 model\n"
      "of MODEL_DIR's BF16 weights: as they are; with every layer the recipes quantize\n"
      "(quant.include less quant.exclude) fake-quantized, as a PTQ run does; and with only one\n"
      "of those layers fake-quantized, for each. Layers are ranked by their loss (most sensitive\n"
      "first). Then the greedy plans: keep the k most sensitive layers in BF16 and quantize the\n"
      "rest, k = 0..16, then every few, and N (every k with --all-plans), each with its model\n"
      "size (BF16 for what is kept, two FP4 codes a byte plus one scale byte per block, and the\n"
      "NVFP4 FP32 tensor scales, for the rest) and its measured loss.\n"
      "Every measurement is the PTQ recipe's calibration and the trainer's evaluation on a PTQ\n"
      "run configuration with data.train = data.validation = --data: `fp4lab train\n"
      "recipe.name=ptq model.path=MODEL_DIR data.train=FILE data.validation=FILE\n"
      "train.eval_batches=B quant.exclude=\"$(cat PLAN)\"` evaluates to the plan's loss.\n\n"
      "options:\n"
      "  --data FILE        JSONL rows (chat, prompt/completion or input_ids) or builtin:<name>;\n"
      "                     also the calibration batches (quant.calib_batches of them)\n"
      "  --format F         nvfp4 (default), nvfp4-2d (16x16 weight blocks), mxfp4 (ceil\n"
      "                     scales) or mxfp4-floor\n"
      "  --w4a4             quantize the layers' inputs too (default: weights only, W4A16)\n"
      "  --max-batches N    evaluate N batches of train.batch_size sequences of data.seq_len\n"
      "                     tokens (default: every packed sequence of --data)\n"
      "  --threads N        CPU threads (default: the usable cores)\n"
      "  --no-kl            skip the KL to the BF16 model (half the forward passes)\n"
      "  --all-plans        measure the plan of every k = 0..N\n"
      "  --keep K           the plan --emit-exclude writes (also measured when it would not be);\n"
      "                     default: the smallest measured k whose loss is within --tolerance of\n"
      "                     the BF16 loss, loss_k <= bf16 + F * |bf16|\n"
      "  --tolerance F      relative loss tolerance of the default plan (default 0.01: 1%%)\n"
      "  --output FILE      write everything to FILE: HDF5 for .h5/.hdf5 (the analysis file's\n"
      "                     layout: the per-layer losses as /quant/<format>, the rest under\n"
      "                     /sensitivity; docs/log-schema.md), JSON otherwise; atomically,\n"
      "                     --force replaces FILE (the workbench's model view opens either)\n"
      "  --emit-exclude FILE  write the chosen plan's quant.exclude value (the default\n"
      "                     excludes plus the kept layers, comma-separated, one line)\n"
      "  --json             print the JSON instead of the table\n"
      "  key=value          run configuration keys: data.seq_len, train.batch_size,\n"
      "                     quant.include, quant.exclude, quant.calib_batches, ...\n"
      "\nProgress shows on stderr when it is a terminal. SIGINT/SIGTERM cancel between\n"
      "evaluations (exit code 2, no output file).\n",
      kUsage);
}

void checkOutputPath(const std::string& option, const std::string& path, bool force) {
  if (path.empty()) throw Error("--" + option + " is empty", "--" + option, "give a file name");
  files::checkOutputFile(path, force, "sensitivity.h5");
}

}  // namespace

int runSensitivity(const std::vector<std::string>& argv) {
  Args args(
      "sensitivity", argv,
      {"data", "format", "max-batches", "threads", "keep", "tolerance", "output", "emit-exclude"},
      {"w4a4", "no-kl", "all-plans", "json", "force", "help"});
  if (args.has("help")) {
    printHelp();
    return 0;
  }
  run::SensitivityOptions options;
  for (const std::string& p : args.positionals()) {
    if (p.find('=') != std::string::npos && p.find('.') < p.find('='))
      options.overrides.push_back(p);
    else if (options.modelDir.empty())
      options.modelDir = p;
    else
      throw Error("unexpected argument '" + p + "'", "fp4lab sensitivity",
                  "usage: " + std::string(kUsage));
  }
  if (options.modelDir.empty())
    throw Error("no model given", "fp4lab sensitivity", "usage: " + std::string(kUsage));
  if (!args.has("data"))
    throw Error("--data FILE.jsonl is required", "fp4lab sensitivity",
                "usage: " + std::string(kUsage));
  options.data = args.get("data", "");
  if (options.data.empty()) throw Error("--data is empty", "--data", "give a JSONL file");
  if (options.data.rfind("builtin:", 0) != 0 && !files::isRegularFile(options.data))
    throw Error(files::exists(options.data) ? "not a file" : "data file does not exist",
                options.data, "pass a JSONL file of rows");
  options.format = args.choice("format", run::sensitivityFormats(), "nvfp4");
  options.w4a4 = args.has("w4a4");
  options.maxBatches = args.integer("max-batches", 0, 1, int64_t(1) << 40);
  options.threads = int(args.integer("threads", 0, 1, 1024));
  options.kl = !args.has("no-kl");
  options.allPlans = args.has("all-plans");
  const bool keepGiven = args.has("keep");
  const int64_t keep = args.integer("keep", 0, 0, int64_t(1) << 30);
  if (keepGiven) options.extraPlans.push_back(keep);
  const double tolerance = args.number("tolerance", 0.01, 0.0, 1e6);
  const bool force = args.has("force");
  const std::string output = args.get("output", "");
  const std::string emit = args.get("emit-exclude", "");
  if (args.has("output")) checkOutputPath("output", output, force);
  if (args.has("emit-exclude")) checkOutputPath("emit-exclude", emit, force);
  if (force && output.empty() && emit.empty())
    throw Error("--force without --output or --emit-exclude", "--force",
                "it replaces the output files");
  if (!output.empty() && !emit.empty() && files::samePath(output, emit))
    throw Error("--output and --emit-exclude are the same file", emit, "write two files");

  installStopHandlers();
  const bool tty = ::isatty(2);
  auto progress = [&](const run::SensitivityProgress& p) {
    if (!tty) return;
    std::fprintf(stderr, "\rsensitivity %4lld/%-4lld  %-60.60s", (long long)p.done,
                 (long long)p.total, p.what.c_str());
    std::fflush(stderr);
  };
  const run::SensitivityResult r = run::measureSensitivity(options, progress, &stopRequested());
  if (tty) std::fprintf(stderr, "\r%80s\r", "");
  if (stopRequested())
    throw Error("sensitivity cancelled", options.modelDir, "nothing was written");
  const int64_t chosen = keepGiven ? keep : run::chooseKeep(r, tolerance);
  const run::SensitivityPlan& plan = run::planWithKeep(r, chosen);
  const analyze::SensitivityFile file = run::sensitivityFile(r, chosen, tolerance);
  if (!output.empty()) analyze::writeSensitivityFile(file, output, force);
  if (!emit.empty()) files::writeFileAtomically(emit, plan.exclude + "\n");
  if (args.has("json")) {
    std::printf("%s\n", analyze::sensitivityJson(file).c_str());
    return 0;
  }
  std::fputs(run::sensitivityTable(r, chosen).c_str(), stdout);
  char percent[32];
  std::snprintf(percent, sizeof percent, "%g%%", tolerance * 100);
  std::printf(
      "%zu layers, %zu plans in %s on %d threads; chosen: keep %lld (%s)\n", r.layers.size(),
      r.plans.size(), duration(r.seconds).c_str(), r.threads, (long long)chosen,
      keepGiven ? "--keep"
                : ("smallest within " + std::string(percent) + " of the BF16 loss").c_str());
  if (!output.empty()) std::printf("wrote %s\n", output.c_str());
  if (!emit.empty())
    std::printf("wrote %s (quant.exclude for keep %lld)\n", emit.c_str(), (long long)chosen);
  return 0;
}

}  // namespace fp4lab::cli
