// `fp4lab export`: a model folder (BF16, or a run's model/checkpoint with its quant_state.json)
// written as a checkpoint the deployment stacks load, checked after writing, with a summary.
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "fp4lab/common/files.h"
#include "fp4lab/error.h"
#include "fp4lab/export/export.h"
#include "fp4lab/run/runner.h"
#include "progress.h"

namespace fp4lab::cli {
namespace {

const char* kUsage =
    "fp4lab export MODEL_DIR --format FORMAT --output-dir OUT [--exclude GLOB]...\n"
    "              [--scale-rule ceil|floor] [--max-shard-size SIZE] [--force] [--no-verify]\n"
    "              [--calib-data FILE.jsonl [--calib-batches N]] [--events jsonl]\n"
    "       fp4lab export --list-formats";

void printHelp() {
  std::printf(
      "usage: %s\n\n"
      "Writes MODEL_DIR (a BF16 Hugging Face folder, or a run's model/ or checkpoint folder with\n"
      "its quant_state.json: the quantized layers, their options and calibrated amaxes) as a\n"
      "deployable checkpoint. The linear layers the recipes quantize are quantized (those the\n"
      "quant_state.json names, else quant.include/quant.exclude's defaults); embeddings, lm_head\n"
      "and norms keep their names, dtypes and bytes. NVFP4 shares one tensor scale per fused\n"
      "group (q/k/v, gate/up): the group's largest amax. The files are written into a temporary\n"
      "folder, read back, every quantized weight decoded and compared bit for bit with the\n"
      "kernels' fake quantization, and only then renamed to OUT.\n\n"
      "formats:\n",
      kUsage);
  for (const std::string& name : exporter::formatNames())
    std::printf("  %-26s %s\n", name.c_str(),
                exporter::formatDescription(*exporter::parseFormat(name)));
  std::printf(
      "\noptions:\n"
      "  --format FORMAT         one of the formats above (required)\n"
      "  --output-dir OUT        the folder to create (refused if it is not empty)\n"
      "  --exclude GLOB          keep matching modules in high precision (fnmatch, '*' crosses\n"
      "                          dots; repeatable, or comma-separated); listed in the format's\n"
      "                          exclude/ignore list\n"
      "  --scale-rule ceil|floor MXFP4 block scales (default: the run's, else ceil)\n"
      "  --max-shard-size SIZE   shard above this size (default 5GB; 500MB, 2GiB, ...)\n"
      "  --force                 replace a non-empty OUT\n"
      "  --no-verify             skip the read-back check\n"
      "  --calib-data FILE       a model without quant_state.json (a BF16 folder): calibrate\n"
      "                          the input amaxes on FILE's rows (JSONL, as data.train) and\n"
      "                          export W4A4 with input scales (quant_algo NVFP4 / MXFP4)\n"
      "  --calib-batches N       batches of 8 rows for that calibration (default 8)\n"
      "  --events jsonl          one JSON object per line on stdout (progress: stage, tensor,\n"
      "                          done, total; then finished with the summary, failed or\n"
      "                          cancelled with a message); the summary text goes to stderr\n"
      "  --list-formats          one JSON object per line: {\"format\", \"description\"}\n"
      "\nSIGINT/SIGTERM cancel the export: nothing is left in OUT.\n");
}

std::string megabytes(uint64_t bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.2f MB", double(bytes) / 1e6);
  return s;
}

// One JSON object on its own line of stdout, flushed (the workbench reads it as it comes).
void emit(const nlohmann::json& event) {
  std::printf("%s\n", event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  std::fflush(stdout);
}

nlohmann::json summaryEvent(const exporter::Summary& s, bool verify) {
  return {{"event", "finished"},
          {"output_dir", s.outputDir},
          {"format", s.format},
          {"quant_algo", s.quantAlgo},
          {"source", s.source},
          {"tensors", s.tensors},
          {"quantized_layers", s.quantizedLayers},
          {"verified", verify},
          {"verified_tensors", s.verifiedTensors},
          {"shards", s.shards},
          {"input_bytes", s.inputBytes},
          {"output_bytes", s.outputBytes},
          {"compression", s.compression},
          {"max_abs_error", s.maxAbsError},
          {"worst_layer", s.worstLayer},
          {"shared_tensor_scales", s.sharedTensorScales},
          {"exclude", s.excludeList}};
}

}  // namespace

int runExport(const std::vector<std::string>& argvIn) {
  // --exclude repeats: collect it before the generic parser (which keeps one value per option).
  std::vector<std::string> argv, exclude;
  for (size_t i = 0; i < argvIn.size(); ++i) {
    std::string value;
    if (argvIn[i] == "--exclude") {
      if (i + 1 >= argvIn.size())
        throw Error("option --exclude needs a value", "fp4lab export", "e.g. --exclude '*.0.*'");
      value = argvIn[++i];
    } else if (argvIn[i].rfind("--exclude=", 0) == 0) {
      value = argvIn[i].substr(10);
    } else {
      argv.push_back(argvIn[i]);
      continue;
    }
    size_t start = 0;
    while (start <= value.size()) {
      size_t comma = value.find(',', start);
      if (comma == std::string::npos) comma = value.size();
      const std::string glob = value.substr(start, comma - start);
      if (!glob.empty()) exclude.push_back(glob);
      start = comma + 1;
    }
  }
  Args args("export", argv,
            {"format", "output-dir", "scale-rule", "max-shard-size", "events", "calib-data",
             "calib-batches"},
            {"force", "no-verify", "help", "list-formats"});
  if (args.has("help")) {
    printHelp();
    return 0;
  }
  if (args.has("list-formats")) {
    for (const std::string& name : exporter::formatNames())
      emit({{"format", name},
            {"description", exporter::formatDescription(*exporter::parseFormat(name))}});
    return 0;
  }
  const bool jsonl = args.choice("events", {"none", "jsonl"}, "none") == "jsonl";
  args.requirePositionals(1, kUsage);
  if (!args.has("format"))
    throw Error("--format is required", "fp4lab export", "usage: " + std::string(kUsage));
  if (!args.has("output-dir"))
    throw Error("--output-dir is required", "fp4lab export", "usage: " + std::string(kUsage));
  exporter::Options options;
  options.modelDir = args.positionals()[0];
  options.outputDir = args.get("output-dir", "");
  options.format =
      *exporter::parseFormat(args.choice("format", exporter::formatNames(), "modelopt-nvfp4"));
  options.exclude = exclude;
  if (args.has("scale-rule")) options.scaleRule = args.choice("scale-rule", {"ceil", "floor"}, "");
  if (args.has("max-shard-size"))
    options.maxShardBytes = exporter::parseByteSize(args.get("max-shard-size", ""));
  options.force = args.has("force");
  options.verify = !args.has("no-verify");

  installStopHandlers();
  const std::string source = options.modelDir;
  // --calib-data: a PTQ run (W4A4, max calibration) of the model into a hidden folder next to OUT,
  // whose model/ (the same weights, with quant_state.json) is what gets exported.
  std::string calibration;
  struct Cleanup {
    std::string& dir;
    ~Cleanup() {
      if (!dir.empty()) files::removeTree(dir);
    }
  } cleanup{calibration};
  if (args.has("calib-batches") && !args.has("calib-data"))
    throw Error("--calib-batches without --calib-data", "--calib-batches",
                "pass --calib-data FILE.jsonl with the rows to calibrate on");
  if (args.has("calib-data")) {
    const std::string data = args.get("calib-data", "");
    const exporter::Format f = options.format;
    if (f == exporter::Format::Bf16 || f == exporter::Format::GptOssMxfp4)
      throw Error(std::string("--calib-data calibrates input scales, and ") +
                      exporter::formatName(f) + " has none (it is weight-only)",
                  "--calib-data", "leave --calib-data out, or choose an NVFP4 or MXFP4 layout");
    if (files::exists(files::join(options.modelDir, "quant_state.json")))
      throw Error(
          "the model already carries its quantizers and calibrated amaxes "
          "(quant_state.json)",
          options.modelDir, "export it without --calib-data");
    run::RunConfig c;
    c.name = "export-calibration";
    c.recipe = "ptq";
    c.modelPath = options.modelDir;
    c.trainData = data;
    c.quantFormat = f == exporter::Format::CompressedTensorsMxfp4 ? "mxfp4" : "nvfp4";
    c.quantActivations = true;
    if (!options.scaleRule.empty()) c.scaleRule = options.scaleRule;
    c.calibBatches = args.integer("calib-batches", 8, 1, 100000);
    for (const std::string& g : exclude) c.quantExclude += "," + g;
    c.evalBatches = 1;
    c.validationMax = 8;
    c.validate();
    const std::string out = files::withoutTrailingSlash(options.outputDir);
    const std::string parent = files::parentOf(out);
    files::createDirectories(parent);
    calibration =
        files::makeTemporaryDirectory(files::join(parent, "." + files::baseName(out) + ".calib-"));
    run::RunOptions ro;
    ro.runDir = files::join(calibration, "run");
    ro.stopRequested = &stopRequested();
    std::fprintf(stderr, "calibrating the input amaxes on %s (%lld batches of %d rows)\n",
                 data.c_str(), static_cast<long long>(c.calibBatches), c.batchSize);
    const run::RunResult r = run::executeRun(c, ro);
    if (r.state != RunState::Finished)
      throw Error("the calibration did not finish: " + r.message, data,
                  "check the rows (chat or input_ids JSONL, as data.train)");
    options.modelDir = files::join(ro.runDir, "model");
  }
  const bool tty = ::isatty(2);
  std::string lastStage;
  int lastPercent = -1;
  auto progress = [&](const exporter::Progress& p) {
    const int percent = p.total > 0 ? int(100 * p.done / p.total) : 0;
    if (p.stage != lastStage) {
      if (tty && !lastStage.empty()) std::fprintf(stderr, "\n");
      lastStage = p.stage;
      lastPercent = -1;
    }
    if (tty) {
      std::fprintf(stderr, "\r%-7s %3d%%  %-60.60s", p.stage.c_str(), percent, p.tensor.c_str());
    } else if (lastPercent < 0) {
      std::fprintf(stderr, "%s: %" PRId64 " tensors\n", p.stage.c_str(), p.total);
    }
    lastPercent = percent;
    if (jsonl)
      emit({{"event", "progress"},
            {"stage", p.stage},
            {"tensor", p.tensor},
            {"done", p.done},
            {"total", p.total}});
  };
  // The stop flag (SIGINT/SIGTERM) is the exporter's cancel flag: checked between tensors, and a
  // cancelled export removes its temporary folder and leaves OUT as it was.
  exporter::Summary s;
  try {
    s = exporter::exportModel(options, progress, &stopRequested());
  } catch (const std::exception& e) {
    if (jsonl) emit({{"event", stopRequested() ? "cancelled" : "failed"}, {"message", e.what()}});
    throw;
  }
  if (tty && !lastStage.empty()) std::fprintf(stderr, "\n");

  FILE* out = jsonl ? stderr : stdout;
  std::fprintf(out, "exported %s -> %s\n", source.c_str(), s.outputDir.c_str());
  if (!calibration.empty())
    std::fprintf(out, "  calibrated on    %s (input amaxes by max calibration)\n",
                 args.get("calib-data", "").c_str());
  std::fprintf(out, "  format           %s (%s)\n", s.format.c_str(), s.quantAlgo.c_str());
  std::fprintf(out, "  from             %s\n", s.source.c_str());
  std::fprintf(
      out, "  tensors          %" PRId64 " in %" PRId64 " shard%s, %" PRId64 " quantized layers\n",
      s.tensors, s.shards, s.shards == 1 ? "" : "s", s.quantizedLayers);
  std::fprintf(out, "  bytes            %s -> %s (compression %.2fx)\n",
               megabytes(s.inputBytes).c_str(), megabytes(s.outputBytes).c_str(), s.compression);
  if (s.quantizedLayers > 0) {
    if (s.sharedTensorScales)
      std::fprintf(out, "  tensor scales    shared per fused group (q/k/v, gate/up)\n");
    std::string list;
    for (const std::string& e : s.excludeList) list += (list.empty() ? "" : ", ") + e;
    std::fprintf(out, "  kept in BF16     %s\n", list.c_str());
  }
  if (options.verify) {
    std::fprintf(
        out, "  verified         %" PRId64 " tensors read back%s\n", s.verifiedTensors,
        s.quantizedLayers ? ", every quantized weight == fake quantization bit for bit" : "");
    if (s.quantizedLayers)
      std::fprintf(out, "  max dequant err  %.6g (vs the BF16 weight, in %s)\n", s.maxAbsError,
                   s.worstLayer.c_str());
  } else {
    std::fprintf(out, "  verified         no (--no-verify)\n");
  }
  if (jsonl) emit(summaryEvent(s, options.verify));
  return 0;
}

}  // namespace fp4lab::cli
