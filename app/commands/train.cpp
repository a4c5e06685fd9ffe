// `fp4lab train`, `fp4lab inspect`, `fp4lab eval`, `fp4lab generate`, `fp4lab base-model`: the
// engine from the command line, the same code the GUI drives through `train --events jsonl`.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli.h"
#include "progress.h"
#include "fp4lab/error.h"
#include "fp4lab/log/run_log.h"
#include "fp4lab/run/runner.h"
#include "model/generate.h"
#include "run/model_source.h"
#include "run/task_eval.h"
#include "train/recipe.h"

namespace fp4lab::cli {
namespace {

namespace fs = std::filesystem;

const char* kTrainUsage =
    "fp4lab train --config RUN.yaml [key=value ...] [--output-dir DIR]\n"
    "             [--resume-from-checkpoint PATH|latest] [--seed N] [--events jsonl]";

}  // namespace

int runTrain(const std::vector<std::string>& argv) {
  Args args("train", argv, {"config", "output-dir", "resume-from-checkpoint", "events", "seed"},
            {"help"});
  if (args.has("help")) {
    std::printf(
        "usage: %s\n\nRuns one run (recipe.name: sft, ptq, qat or qad). key=value overrides any "
        "config key,\n"
        "e.g. optim.lr=1e-4 train.max_steps=200. --events jsonl prints one JSON object per line\n"
        "(started, step, eval, checkpoint, warning, finished, failed, cancelled) instead of the\n"
        "progress bar. Ctrl-C or SIGTERM checkpoints and stops cleanly. Keys: "
        "docs/user-guide.md.\n",
        kTrainUsage);
    return 0;
  }
  std::vector<std::string> overrides;
  for (const auto& p : args.positionals()) {
    if (p.find('=') == std::string::npos)
      throw Error("unexpected argument '" + p + "'", "fp4lab train",
                  std::string("usage: ") + kTrainUsage);
    overrides.push_back(p);
  }
  if (args.has("seed")) overrides.push_back("run.seed=" + args.get("seed", ""));
  std::string events = args.choice("events", {"none", "jsonl"}, "none");
  run::RunConfig config = args.has("config")
                              ? run::RunConfig::fromYamlFile(args.get("config", ""), overrides)
                              : run::RunConfig::fromYamlText("", overrides, "defaults");
  run::RunOptions options;
  options.runDir = args.get("output-dir", "");
  options.resumeFrom = args.get("resume-from-checkpoint", "");
  options.stopRequested = &stopRequested();
  Progress progress(isatty(fileno(stderr)));
  if (events == "jsonl") {
    options.onEvent = [](const run::RunEvent& e) {
      std::printf("%s\n", e.toJson().c_str());
      std::fflush(stdout);
    };
  } else {
    options.onEvent = [&](const run::RunEvent& e) { progress(e); };
  }
  installStopHandlers();
  run::RunResult r;
  try {
    r = run::executeRun(config, options);
  } catch (const Error& e) {
    if (events == "jsonl") {
      run::RunEvent failed;
      failed.kind = "failed";
      failed.message = e.what();
      std::printf("%s\n", failed.toJson().c_str());
    }
    throw;
  }
  if (r.state == "finished") return 0;
  return r.state == "cancelled" ? 130 : 1;
}

int runInspect(const std::vector<std::string>& argv) {
  Args args("inspect", argv, {}, {"help"});
  if (args.has("help")) {
    std::printf(
        "usage: fp4lab inspect RUN_DIR\n\nPrints a run's state, config, curves summary and events "
        "from its folder.\n");
    return 0;
  }
  args.requirePositionals(1, "fp4lab inspect RUN_DIR");
  const fs::path dir = args.positionals()[0];
  if (!fs::exists(dir / "log.h5"))
    throw Error("no log.h5: not a run folder", dir.string(), "pass runs/<run-id>");
  log::RunLogReader reader((dir / "log.h5").string());
  log::RootAttributes a = reader.attributes();
  std::printf("run %s: %s\n", a.runId.c_str(), run::readRunState(dir.string()).c_str());
  std::printf("recipe %s (%s), created %s\n", a.recipe.c_str(), a.format.c_str(),
              a.createdUtc.c_str());
  int64_t rows = reader.trainRows();
  if (rows > 0) {
    auto first = reader.readTrain(0, 1)[0];
    auto last = reader.readTrain(rows - 1, rows)[0];
    std::printf(
        "train: %" PRId64 " steps, %" PRId64 " tokens, %.1f s; loss %.4f -> %.4f; %.0f tok/s\n",
        last.step, last.tokens, last.wallSeconds, first.loss, last.loss, last.tokensPerSecond);
  }
  log::RunLogSchema schema = reader.schema();
  if (reader.evalRows() > 0) {
    std::printf("\n%8s %12s", "step", "tokens");
    for (const auto& c : schema.evalColumns) std::printf(" %14s", c.c_str());
    std::printf("\n");
    for (const auto& row : reader.readEval(0, reader.evalRows())) {
      std::printf("%8" PRId64 " %12" PRId64, row.step, row.tokens);
      for (double v : row.values) std::printf(" %14.5f", v);
      std::printf("\n");
    }
  }
  if (reader.quantRows() > 0 && !schema.quantLayers.empty()) {
    // The layers that lose the most, at the last evaluation (the GUI's "worst layers" list).
    const int64_t k = reader.quantRows();
    const std::vector<float> sqnr = reader.readQuant("sqnr_db", k - 1, k);
    const std::vector<float> act = reader.readQuant("act_sqnr_db", k - 1, k);
    std::vector<size_t> order(sqnr.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return sqnr[x] < sqnr[y]; });
    std::printf("\nworst quantized layers at step %" PRId64 " (weight SQNR, activation SQNR):\n",
                reader.quantSteps(k - 1, k)[0]);
    for (size_t i = 0; i < std::min<size_t>(5, order.size()); ++i)
      std::printf("  %-40s %6.2f dB %6.2f dB\n", schema.quantLayers[order[i]].c_str(),
                  sqnr[order[i]], act[order[i]]);
  }
  std::printf("\nevents:\n");
  for (const auto& e : reader.events()) std::printf("  %s\n", e.c_str());
  if (fs::exists(dir / "checkpoints")) {
    std::printf("\ncheckpoints:\n");
    for (const auto& entry : fs::directory_iterator(dir / "checkpoints"))
      if (entry.path().filename().string().rfind("step-", 0) == 0)
        std::printf("  %s\n", entry.path().c_str());
  }
  return 0;
}

int runEval(const std::vector<std::string>& argv) {
  Args args("eval", argv, {"data"}, {"per-example", "help"});
  if (args.has("help")) {
    std::printf(
        "usage: fp4lab eval MODEL_DIR --data FILE.jsonl [--per-example]\n\nMean token "
        "cross-entropy of the "
        "model on the rows (assistant tokens of chat rows;\nevery token after the first of "
        "input_ids rows).\n");
    return 0;
  }
  args.requirePositionals(1, "fp4lab eval MODEL_DIR --data FILE.jsonl [--per-example]");
  if (!args.has("data")) throw Error("--data FILE.jsonl is required", "fp4lab eval");
  run::ModelBundle bundle = run::loadModelBundle(args.positionals()[0], torch::kFloat32);
  std::vector<data::Example> examples = run::loadExamples(args.get("data", ""), 0);
  data::ChatTemplate chat(*bundle.tokenizer);
  torch::NoGradGuard noGrad;
  bundle.model->eval();
  double total = 0;
  int64_t tokens = 0;
  for (size_t i = 0; i < examples.size(); ++i) {
    const data::Example& e = examples[i];
    data::TokenizedExample t = data::tokenize(e, chat);
    const std::vector<int32_t>& ids = t.ids;
    const std::vector<uint8_t>& mask = t.lossMask;
    if (ids.size() < 2) continue;
    const int64_t n = int64_t(ids.size()) - 1;
    torch::Tensor input = torch::empty({1, n}, torch::kLong),
                  target = torch::empty({1, n}, torch::kLong);
    int64_t count = 0;
    for (int64_t j = 0; j < n; ++j) {
      if (ids[size_t(j)] >= bundle.model->config().vocabSize ||
          ids[size_t(j + 1)] >= bundle.model->config().vocabSize)
        throw Error("token id outside the model's vocabulary", e.source);
      input[0][j] = ids[size_t(j)];
      target[0][j] = mask[size_t(j + 1)] ? int64_t(ids[size_t(j + 1)]) : int64_t(-100);
      count += mask[size_t(j + 1)];
    }
    if (count == 0) continue;
    double loss = train::tokenCrossEntropy(bundle.model->forward(input), target).item<double>();
    total += loss * double(count);
    tokens += count;
    if (args.has("per-example"))
      std::printf(
          "%s\n",
          nlohmann::json{{"index", i}, {"source", e.source}, {"loss", loss}, {"tokens", count}}
              .dump()
              .c_str());
  }
  if (tokens == 0)
    throw Error("no tokens to score", args.get("data", ""),
                "rows need assistant turns or input_ids");
  double mean = total / double(tokens);
  std::fprintf(args.has("per-example") ? stderr : stdout,
               "mean token cross-entropy %.6f over %" PRId64
               " tokens in %zu rows (perplexity %.4f)\n",
               mean, tokens, examples.size(), std::exp(mean));
  return 0;
}

int runGenerate(const std::vector<std::string>& argv) {
  Args args("generate", argv, {"prompt", "system", "max-new-tokens", "temperature", "seed"},
            {"raw", "help"});
  if (args.has("help")) {
    std::printf(
        "usage: fp4lab generate MODEL_DIR --prompt TEXT [--system TEXT] [--max-new-tokens N]\n"
        "                       [--temperature T] [--seed S] [--raw]\n\n"
        "Prints the model's reply to TEXT as a user message (with --raw: the continuation of "
        "TEXT).\n"
        "Greedy at temperature 0 (the default).\n");
    return 0;
  }
  args.requirePositionals(1, "fp4lab generate MODEL_DIR --prompt TEXT");
  if (!args.has("prompt")) throw Error("--prompt TEXT is required", "fp4lab generate");
  auto number = [&](const char* name, double fallback) {
    std::string v = args.get(name, "");
    if (v.empty()) return fallback;
    try {
      return std::stod(v);
    } catch (...) {
      throw Error(std::string("--") + name + " must be a number, not '" + v + "'",
                  "fp4lab generate");
    }
  };
  const double temperature = number("temperature", 0.0);
  const int maxNew = int(number("max-new-tokens", 128));
  const uint64_t seed = uint64_t(number("seed", 0));
  if (temperature < 0 || maxNew < 1)
    throw Error("--temperature must be >= 0 and --max-new-tokens >= 1", "fp4lab generate");
  run::ModelBundle bundle = run::loadModelBundle(args.positionals()[0], torch::kFloat32);
  run::ReplyOptions reply;
  reply.maxNewTokens = maxNew, reply.temperature = temperature, reply.seed = seed;
  if (args.has("raw")) {
    const std::vector<int32_t> prompt = bundle.tokenizer->encode(args.get("prompt", ""));
    std::vector<int64_t> out =
        model::generate(bundle.model, std::vector<int64_t>(prompt.begin(), prompt.end()), maxNew,
                        temperature, seed, bundle.model->config().stopTokenIds());
    std::printf(
        "%s\n",
        bundle.tokenizer->decode(std::vector<int32_t>(out.begin(), out.end()), true).c_str());
    return 0;
  }
  std::vector<data::Message> messages;
  if (args.has("system")) messages.push_back({"system", args.get("system", "")});
  messages.push_back({"user", args.get("prompt", "")});
  std::printf("%s\n", run::chatReply(bundle.model, *bundle.tokenizer, messages, reply).c_str());
  return 0;
}

int runBaseModel(const std::vector<std::string>& argv) {
  Args args("base-model", argv, {"output"}, {"rebuild", "help"});
  if (args.has("help")) {
    std::printf(
        "usage: fp4lab base-model [--rebuild [--output DIR]]\n\n"
        "Prints the folder of the built-in tiny base model (shipped in resources/models/tiny-v2).\n"
        "--rebuild trains it again from random weights with its recipe (a few minutes), into DIR\n"
        "(default: the cache, where builtin:tiny then finds it if no shipped copy exists).\n");
    return 0;
  }
  if (!args.has("rebuild")) {
    if (args.has("output")) throw Error("--output needs --rebuild", "fp4lab base-model");
    std::printf("%s\n", run::builtinModelPath().c_str());
    return 0;
  }
  std::string dest = args.get("output", run::cacheRoot() + "/models/tiny-v2");
  std::printf("%s\n", run::buildBuiltinModel(dest, true).c_str());
  return 0;
}

}  // namespace fp4lab::cli
