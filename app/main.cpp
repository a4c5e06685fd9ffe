// fp4lab's entry point: dispatches subcommands; errors print what, where and what to do, and
// exit with code 2.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "cli.h"
#include "fp4lab/common/system.h"
#include "fp4lab/error.h"
#ifdef FP4LAB_WITH_WIDGETS
#include "fp4lab/widgets/workbench.h"
#endif

namespace {

const fp4lab::cli::Command kCommands[] = {
#ifdef FP4LAB_WITH_WIDGETS
    {"gui", "the workbench window: launch runs, plot them live, compare them", fp4lab::cli::runGui},
#endif
    {"experiment",
     "the built-in SFT -> PTQ / QAT / QAD experiment in MXFP4 and NVFP4, with a report",
     fp4lab::cli::runExperiment},
    {"train", "one run (sft, ptq, qat, qad) from a YAML config; a run folder with an HDF5 log",
     fp4lab::cli::runTrain},
    {"inspect", "summarize a run folder from its log", fp4lab::cli::runInspect},
    {"eval", "mean token cross-entropy of a model on a JSONL file", fp4lab::cli::runEval},
    {"generate", "generate a reply from a model", fp4lab::cli::runGenerate},
    {"base-model", "build (once) and locate the built-in tiny base model",
     fp4lab::cli::runBaseModel},
    {"quantize", "quantize the tensors of a safetensors file to MXFP4 or NVFP4",
     fp4lab::cli::runQuantize},
    {"dequantize", "decode a file written by `fp4lab quantize` back to F32",
     fp4lab::cli::runDequantize},
    {"import", "convert a GGUF file or any model folder fp4lab reads into a Hugging Face folder",
     fp4lab::cli::runImport},
    {"tokenize", "the token ids of a text under a model's tokenizer (JSON)",
     fp4lab::cli::runTokenize},
    {"export",
     "write a deployable checkpoint (ModelOpt NVFP4, compressed-tensors NVFP4/MXFP4, BF16)",
     fp4lab::cli::runExport},
    {"analyze", "per-layer FP4 error statistics of a model's weights (MXFP4, NVFP4), no training",
     fp4lab::cli::runAnalyze},
    {"sensitivity",
     "per-layer loss under FP4 and the keep-in-BF16 size/accuracy frontier (PTQ, measured)",
     fp4lab::cli::runSensitivity},
};

// A desktop build cannot link tcmalloc (the window crashes with it under Qt's xcb platform:
// app/CMakeLists.txt), yet the commands that train should run on it, as a headless build does
// (docs/performance.md, "Allocator"): they start themselves again with it preloaded. Where the
// library is missing, or FP4LAB_ALLOCATOR=glibc, or the restart fails, they go on with glibc.
void preloadAllocatorForTraining(int argc, char** argv) {
#ifdef FP4LAB_TCMALLOC_PRELOAD
  static const char* const kTraining[] = {"train", "experiment", "sensitivity"};
  bool trains = false;
  for (const char* name : kTraining) trains = trains || (argc > 1 && !std::strcmp(argv[1], name));
  const char* choice = std::getenv("FP4LAB_ALLOCATOR");
  if (!trains || fp4lab::usingTcmalloc() || (choice && !std::strcmp(choice, "glibc")) ||
      std::getenv("FP4LAB_ALLOCATOR_PRELOADED") || access(FP4LAB_TCMALLOC_PRELOAD, R_OK) != 0)
    return;
  std::string preload = FP4LAB_TCMALLOC_PRELOAD;
  if (const char* other = std::getenv("LD_PRELOAD"); other && *other)
    preload += ":" + std::string(other);
  setenv("LD_PRELOAD", preload.c_str(), 1);
  setenv("FP4LAB_ALLOCATOR_PRELOADED", "1", 1);  // never twice, whatever happens
  execv("/proc/self/exe", argv);
#else
  (void)argc, (void)argv;
#endif
}

void printHelp(FILE* out) {
  std::fprintf(out,
               "fp4lab %s: a workbench for taking language models to 4-bit floating point\n\n"
               "usage: fp4lab <command> [options]   (fp4lab <command> --help for details)\n\n"
               "commands:\n",
               FP4LAB_VERSION);
  for (const auto& c : kCommands) std::fprintf(out, "  %-12s %s\n", c.name, c.summary);
}

}  // namespace

int main(int argc, char** argv) {
  preloadAllocatorForTraining(argc, argv);
#ifdef FP4LAB_WITH_WIDGETS
  // No command and a display: the window, as a desktop launcher starts it.
  if (argc < 2 && fp4lab::widgets::displayAvailable()) {
    try {
      return fp4lab::cli::runGui({});
    } catch (const std::exception& e) {
      std::fprintf(stderr, "fp4lab: error: %s\n", e.what());
      return 2;
    }
  }
#endif
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") ||
      !std::strcmp(argv[1], "help")) {
    if (argc < 2) std::fprintf(stderr, "fp4lab: error: no command given\n\n");
    printHelp(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version")) {
    std::printf("fp4lab %s\n", FP4LAB_VERSION);
    return 0;
  }
  std::vector<std::string> args(argv + 2, argv + argc);
  for (const auto& c : kCommands) {
    if (std::strcmp(argv[1], c.name) != 0) continue;
    try {
      return c.run(args);
    } catch (const fp4lab::Error& e) {
      std::fprintf(stderr, "fp4lab: error: %s\n", e.what());
      return 2;
    } catch (const std::filesystem::filesystem_error& e) {
      // A folder or file of the user's that cannot be made or read: their input, not a bug.
      std::fprintf(stderr, "fp4lab: error: %s (check the path and its permissions)\n", e.what());
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "fp4lab: internal error: %s\n", e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "fp4lab: error: unknown command '%s' (fp4lab --help lists them)\n\n",
               argv[1]);
  printHelp(stderr);
  return 2;
}
