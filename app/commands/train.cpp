// `fp4lab train`, `fp4lab inspect`, `fp4lab eval`, `fp4lab generate`, `fp4lab base-model`: the
// engine from the command line through its public interface (fp4lab/run/*.h), the same code the
// GUI drives through `train --events jsonl`.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "cli.h"
#include "fp4lab/data/tokenizer.h"
#include "fp4lab/error.h"
#include "fp4lab/log/run_log.h"
#include "fp4lab/run/model.h"
#include "fp4lab/run/run_folder.h"
#include "fp4lab/run/runner.h"
#include "progress.h"

namespace fp4lab::cli {
namespace {

namespace fs = std::filesystem;

const char* kTrainUsage =
    "fp4lab train (--config RUN.yaml | --defaults) [key=value ...] [--output-dir DIR]\n"
    "             [--seed N] [--events jsonl] [--nproc N] [--print-config] [--dry-run]\n"
    "       fp4lab train --resume-from-checkpoint latest|PATH --output-dir DIR [key=value ...]\n"
    "       fp4lab train --list-keys";

// A free TCP port on this machine for the ranks' rendezvous (the kernel's pick for port 0).
int freePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) close(fd);
    throw Error("cannot find a free TCP port on 127.0.0.1", "fp4lab train --nproc",
                "set MASTER_PORT and start the ranks with a launcher (torchrun)");
  }
  const int port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

std::string describeExit(int status) {
  if (WIFSIGNALED(status))
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  return "exited with code " + std::to_string(WEXITSTATUS(status));
}

// `fp4lab train --nproc N`: N processes of this executable, ranks 0..N-1 of one run on this
// machine, with the variables torchrun would set. The launcher forwards SIGINT/SIGTERM (every
// rank checkpoints and stops together), and when a rank dies it gives the others the collective
// timeout to notice, then kills them; a run whose rank 0 died is marked failed here.
int launchRanks(int nproc, const std::vector<std::string>& argv, const run::RunConfig& config,
                const run::RunOptions& options, bool jsonl) {
  const std::string runDir = run::runFolderFor(config, options);
  std::vector<std::string> childArgs = {"fp4lab", "train"};
  for (size_t i = 0; i < argv.size(); ++i) {
    if (argv[i] == "--nproc") {
      ++i;
      continue;
    }
    if (argv[i].rfind("--nproc=", 0) == 0) continue;
    childArgs.push_back(argv[i]);
  }
  if (options.runDir.empty()) {
    childArgs.push_back("--output-dir");
    childArgs.push_back(runDir);
  }
  childArgs.push_back("dist.processes=" + std::to_string(nproc));  // every rank's config agrees
  const std::string port = std::to_string(freePort());
  std::vector<pid_t> pids;
  for (int rank = 0; rank < nproc; ++rank) {
    const pid_t pid = fork();
    if (pid < 0) {
      for (pid_t p : pids) kill(p, SIGKILL);
      throw Error("cannot start rank " + std::to_string(rank) + ": fork failed", "fp4lab train");
    }
    if (pid == 0) {
      setenv("RANK", std::to_string(rank).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", port.c_str(), 1);
      std::vector<char*> cargv;
      for (auto& a : childArgs) cargv.push_back(a.data());
      cargv.push_back(nullptr);
      execv("/proc/self/exe", cargv.data());
      std::fprintf(stderr, "fp4lab: error: cannot run /proc/self/exe: %s\n", strerror(errno));
      _exit(127);
    }
    pids.push_back(pid);
  }
  using Clock = std::chrono::steady_clock;
  std::vector<int> status(size_t(nproc), 0);
  std::vector<bool> done(size_t(nproc), false);
  int alive = nproc;
  bool forwarded = false;
  std::optional<Clock::time_point> killAt;
  const auto grace = std::chrono::milliseconds(int64_t(config.distTimeoutSeconds * 1000) + 30000);
  while (alive > 0) {
    int st = 0;
    const pid_t p = waitpid(-1, &st, WNOHANG);
    if (p > 0) {
      const auto it = std::find(pids.begin(), pids.end(), p);
      if (it == pids.end()) continue;
      const size_t r = size_t(it - pids.begin());
      status[r] = st, done[r] = true, --alive;
      const bool normal = WIFEXITED(st) && (WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == 130);
      if (!normal && !killAt) killAt = Clock::now() + grace;
      continue;
    }
    if (stopRequested().load() && !forwarded) {
      for (size_t r = 0; r < pids.size(); ++r)
        if (!done[r]) kill(pids[r], SIGTERM);
      forwarded = true;
    }
    if (killAt && Clock::now() > *killAt)
      for (size_t r = 0; r < pids.size(); ++r)
        if (!done[r]) kill(pids[r], SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::string failures;
  for (int r = 0; r < nproc; ++r) {
    const int st = status[size_t(r)];
    if (WIFEXITED(st) && (WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == 130)) continue;
    failures +=
        (failures.empty() ? "" : "; ") + ("rank " + std::to_string(r) + " " + describeExit(st));
  }
  const int rank0 = status[0];
  if (failures.empty()) return WEXITSTATUS(rank0);
  const std::string message =
      "data-parallel run of " + std::to_string(nproc) + " processes failed: " + failures;
  std::fprintf(stderr, "fp4lab: error: %s\n", message.c_str());
  // Rank 0 records its own failure; when it is the one that died, the run is marked here.
  const run::RunFolder folder = run::readRunFolder(runDir);
  if (folder.state == RunState::Running || folder.state == RunState::Crashed)
    run::writeRunStatus(runDir, RunState::Failed, folder.step, folder.maxSteps, message);
  if (jsonl && !WIFEXITED(rank0)) {
    run::RunEvent failed;
    failed.kind = EventKind::Failed;
    failed.step = folder.step, failed.maxSteps = folder.maxSteps;
    failed.message = message;
    failed.path = runDir;
    std::printf("%s\n", failed.toJson().c_str());
    std::fflush(stdout);
  }
  return WIFEXITED(rank0) && WEXITSTATUS(rank0) != 0 ? WEXITSTATUS(rank0) : 1;
}

}  // namespace

int runTrain(const std::vector<std::string>& argv) {
  Args args("train", argv,
            {"config", "output-dir", "resume-from-checkpoint", "events", "seed", "nproc"},
            {"help", "defaults", "print-config", "dry-run", "list-keys"});
  if (args.has("help")) {
    std::printf(
        "usage: %s\n\n"
        "Runs one run (recipe.name: sft, ptq, qat or qad) from a YAML config (--config) or the\n"
        "built-in defaults (--defaults), with key=value overrides, e.g. optim.lr=1e-4\n"
        "train.max_steps=200. --events jsonl prints one JSON object per line (started, step, "
        "eval,\n"
        "checkpoint, warning, finished, failed, cancelled) instead of the progress bar. Ctrl-C or\n"
        "SIGTERM checkpoints and stops cleanly.\n\n"
        "--nproc N (the same as dist.processes=N, which run.yaml keeps for a resume) trains\n"
        "data-parallel in N processes on this machine (Gloo; train.batch_size is the global "
        "batch,\n"
        "split over the ranks; rank 0 writes the run folder). Under torchrun or a cluster "
        "launcher\n"
        "(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set) each process joins as its rank.\n"
        "dist.timeout_s bounds the rendezvous and every collective.\n\n"
        "--resume-from-checkpoint latest --output-dir RUN continues the run in RUN from its own\n"
        "run.yaml; overrides may change only what does not define the run (train.threads,\n"
        "train.checkpoint_every, train.keep_checkpoints, run.output_dir).\n\n"
        "--print-config prints the resolved config as YAML; --dry-run checks the config, the "
        "model\n"
        "folder and the data, and exits; --list-keys prints every key (docs/user-guide.md).\n",
        kTrainUsage);
    return 0;
  }
  if (args.has("list-keys")) {
    std::printf("%s", keyTable(false).c_str());
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
  // --nproc N is dist.processes=N: recorded in run.yaml, so a resume starts as many processes.
  if (args.has("nproc"))
    overrides.push_back("dist.processes=" + std::to_string(args.integer("nproc", 1, 1, 1024)));
  const std::string events = args.choice("events", {"none", "jsonl"}, "none");
  const bool resuming = args.has("resume-from-checkpoint");
  if (args.has("config") && args.has("defaults"))
    throw Error("--config and --defaults are alternatives", "fp4lab train",
                "--defaults starts from the built-in defaults, --config from a file");
  if (!resuming && !args.has("config") && !args.has("defaults") && overrides.empty()) {
    // Never a run nobody asked for: `fp4lab train --defaults` is the built-in defaults.
    std::fprintf(stderr,
                 "fp4lab: error: fp4lab train: nothing to run: no --config, --defaults or "
                 "key=value\n\nusage: %s\n\n(fp4lab train --help for details)\n",
                 kTrainUsage);
    return 2;
  }

  run::RunOptions options;
  options.runDir = args.get("output-dir", "");
  options.resumeFrom = args.get("resume-from-checkpoint", "");
  run::RunConfig config;
  if (resuming) {
    // The run is what its folder says it is: run.yaml, then the allowed overrides.
    std::string dir = options.runDir;
    if (dir.empty() && options.resumeFrom != "latest")
      dir = std::filesystem::path(options.resumeFrom).parent_path().parent_path().string();
    if (dir.empty())
      throw Error("--resume-from-checkpoint latest needs --output-dir RUN_DIR", "fp4lab train",
                  "name the run folder to resume");
    config = run::resumeConfig(dir, overrides, args.get("config", ""));
  } else {
    config = args.has("config") ? run::RunConfig::fromYamlFile(args.get("config", ""), overrides)
                                : run::RunConfig::fromYamlText("", overrides, "defaults");
  }
  if (args.has("print-config")) {
    std::printf("%s", config.toYaml().c_str());
    if (!args.has("dry-run")) return 0;
  }
  options.stopRequested = &stopRequested();
  options.dryRun = args.has("dry-run");
  // A process that a launcher started (RANK set) joins as its rank; otherwise dist.processes > 1
  // (or --nproc) starts the ranks here.
  const int nproc = config.distProcesses;
  const char* rankVar = std::getenv("RANK");
  const bool rank0 = !rankVar || std::string(rankVar) == "0";
  if (args.has("nproc") && nproc > 1 && rankVar)
    throw Error("--nproc " + std::to_string(nproc) + " under a launcher that set RANK=" + rankVar,
                "fp4lab train", "let one of them start the processes: drop --nproc, or RANK");
  if (nproc > 1 && !rankVar && !options.dryRun) {
    installStopHandlers();
    return launchRanks(nproc, argv, config, options, events == "jsonl");
  }
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
    if (events == "jsonl" && rank0) {
      run::RunEvent failed;
      failed.kind = EventKind::Failed;
      failed.message = e.what();
      std::printf("%s\n", failed.toJson().c_str());
    }
    throw;
  }
  if (options.dryRun) {
    std::fprintf(stderr, "fp4lab: the config, model and data check out (%s); nothing was run\n",
                 r.message.c_str());
    return 0;
  }
  if (r.state == RunState::Finished) return 0;
  return r.state == RunState::Cancelled ? 130 : 1;
}

int runInspect(const std::vector<std::string>& argv) {
  Args args("inspect", argv, {"csv"}, {"help"});
  const char* usage = "fp4lab inspect RUN_DIR [--csv train|eval]";
  if (args.has("help")) {
    std::printf(
        "usage: %s\n\nPrints a run's state, curves summary, worst quantized layers and events "
        "from its folder.\n--csv train (or eval) prints every row of the log's /train (or /eval) "
        "table as CSV instead,\nat full precision.\n",
        usage);
    return 0;
  }
  args.requirePositionals(1, usage);
  const fs::path dir = args.positionals()[0];
  if (!fs::exists(dir / "log.h5"))
    throw Error("no log.h5: not a run folder", dir.string(), "pass runs/<run-id>");
  if (args.has("csv")) {
    const std::string table = args.choice("csv", {"train", "eval"}, "train");
    log::RunLogReader reader((dir / "log.h5").string());
    if (table == "train") {
      std::printf("step,tokens,wall_s,loss,lr,grad_norm,tok_per_s\n");
      for (const auto& r : reader.readTrain(0, reader.trainRows()))
        std::printf("%" PRId64 ",%" PRId64 ",%.17g,%.9g,%.9g,%.9g,%.9g\n", r.step, r.tokens,
                    r.wallSeconds, double(r.loss), double(r.lr), double(r.gradNorm),
                    double(r.tokensPerSecond));
    } else {
      std::printf("step,tokens,wall_s");
      for (const auto& c : reader.schema().evalColumns) std::printf(",%s", c.c_str());
      std::printf("\n");
      for (const auto& r : reader.readEval(0, reader.evalRows())) {
        std::printf("%" PRId64 ",%" PRId64 ",%.17g", r.step, r.tokens, r.wallSeconds);
        for (double v : r.values) std::printf(",%.17g", v);
        std::printf("\n");
      }
    }
    return 0;
  }
  log::RunLogReader reader((dir / "log.h5").string());
  log::RootAttributes a = reader.attributes();
  const run::RunFolder folder = run::readRunFolder(dir.string());
  std::printf("run %s: %s", a.runId.c_str(), toString(folder.state));
  if (folder.maxSteps > 0)
    std::printf(" at step %" PRId64 " of %" PRId64, folder.step, folder.maxSteps);
  std::printf("%s%s\n", folder.message.empty() ? "" : " (",
              folder.message.empty() ? "" : (folder.message + ")").c_str());
  if (!folder.configError.empty())
    std::printf("run.yaml cannot be read: %s\n", folder.configError.c_str());
  const bool resumable = folder.state == RunState::Cancelled || folder.state == RunState::Crashed ||
                         folder.state == RunState::Failed;
  if (resumable && !folder.latestCheckpoint.empty())
    std::printf("resume it: fp4lab train --resume-from-checkpoint latest --output-dir %s\n",
                dir.c_str());
  std::printf("recipe %s (%s), created %s\n", a.recipe.c_str(), a.format.c_str(),
              a.createdUtc.c_str());
  // Which GEMM ran the BF16 linears, and what the two took (the bf16_gemm event's text).
  const std::vector<std::string> events = reader.events();
  for (const std::string& e : events)
    if (const size_t at = e.find(" bf16_gemm "); at != std::string::npos && at < 32)
      std::printf("%s\n", e.substr(at + 11).c_str());
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
  for (const auto& e : events) std::printf("  %s\n", e.c_str());
  if (fs::exists(dir / "checkpoints")) {
    std::printf("\ncheckpoints:\n");
    for (const auto& entry : fs::directory_iterator(dir / "checkpoints"))
      if (entry.path().filename().string().rfind("step-", 0) == 0)
        std::printf("  %s\n", entry.path().c_str());
  }
  return 0;
}

int runEval(const std::vector<std::string>& argv) {
  Args args("eval", argv, {"data", "run"}, {"per-example", "bf16", "help"});
  const char* usage =
      "fp4lab eval MODEL_DIR --data FILE.jsonl|builtin:NAME|heldout:SOURCE [--per-example] "
      "[--bf16]\n       fp4lab eval --run RUN_DIR [MODEL_DIR]";
  if (args.has("help")) {
    std::printf(
        "usage: %s\n\nMean token cross-entropy of the model on the rows (assistant tokens of chat "
        "rows;\nevery token after the first of input_ids rows). A model saved fake-quantized (a\n"
        "PTQ/QAT/QAD run's model/ or checkpoint, with its quant_state.json) is scored as saved;\n"
        "--bf16 scores its BF16 weights instead. Pre-tokenized rows need no tokenizer.json.\n"
        "--data takes what data.validation takes: a JSONL file, builtin:NAME, or\n"
        "heldout:SOURCE (the rows a run training on SOURCE holds out, at the default\n"
        "data.seed and data.validation_fraction). Rows are scored one by one, unpacked.\n"
        "--run RUN_DIR scores as the run's evaluations do (its val_loss): its validation\n"
        "sequences packed at data.seq_len, train.eval_batches batches of train.batch_size,\n"
        "its compute dtype and threads, of its model/ (or MODEL_DIR, e.g. a checkpoint).\n",
        usage);
    return 0;
  }
  if (args.has("run")) {
    // The run's own evaluation again: its packed validation sequences, batches and settings.
    if (args.positionals().size() > 1 || args.has("data") || args.has("per-example") ||
        args.has("bf16"))
      throw Error(
          "--run scores the run's validation data as the run did: it takes at most a "
          "MODEL_DIR and no --data, --per-example or --bf16",
          "fp4lab eval", usage);
    const std::string runDir = args.get("run", "");
    const run::RunEvaluation r = run::evaluateAsRun(
        runDir, args.positionals().empty() ? std::string() : args.positionals()[0]);
    std::printf("val_loss %.17g over %" PRId64 " tokens in %" PRId64
                " sequences, as %s's evaluation scores them\nscored: %s\n",
                r.valLoss, r.tokens, r.sequences, runDir.c_str(), r.model.c_str());
    return 0;
  }
  args.requirePositionals(1, usage);
  if (!args.has("data")) throw Error("--data FILE.jsonl is required", "fp4lab eval", usage);
  run::ModelLoadOptions load;
  load.bf16Weights = args.has("bf16");
  const run::Model model = run::Model::load(args.positionals()[0], load);
  // Built-in and held-out rows as a run with the default data.seed and data.validation_fraction
  // draws them (heldout:builtin:sft: the rows such a run validates on).
  const std::vector<data::Example> examples =
      run::loadValidationRows(args.get("data", ""), run::RunConfig{});
  const bool perExample = args.has("per-example");
  // Thousands of rows take minutes: a progress line on stderr every two seconds.
  const auto started = std::chrono::steady_clock::now();
  auto lastShown = started;
  const bool tty = isatty(fileno(stderr));
  size_t shownLines = 0;
  const run::EvalResult r = model.evaluate(examples, [&](const run::ExampleScore& s) {
    const auto now = std::chrono::steady_clock::now();
    if (now - lastShown >= std::chrono::seconds(2) && s.index + 1 < examples.size()) {
      lastShown = now;
      const double seconds = std::chrono::duration<double>(now - started).count();
      const double eta = seconds / double(s.index + 1) * double(examples.size() - s.index - 1);
      std::fprintf(stderr, "%sscored %zu of %zu rows, about %.0f s left%s", tty ? "\r" : "",
                   s.index + 1, examples.size(), eta, tty ? "   " : "\n");
      ++shownLines;
    }
    if (perExample)
      std::printf(
          "%s\n",
          nlohmann::json{
              {"index", s.index}, {"source", s.source}, {"loss", s.loss}, {"tokens", s.tokens}}
              .dump()
              .c_str());
  });
  if (tty && shownLines > 0) std::fprintf(stderr, "\n");
  if (r.tokens == 0)
    throw Error("no tokens to score", args.get("data", ""),
                "rows need assistant turns or input_ids");
  const run::ModelInfo& info = model.info();
  std::fprintf(perExample ? stderr : stdout,
               "mean token cross-entropy %.6f over %" PRId64
               " tokens in %zu rows (perplexity %.4f)\n"
               "scored: %s\n",
               r.meanLoss, r.tokens, r.rows, std::exp(r.meanLoss),
               info.quantized     ? ("the fake-quantized model, " + info.quantization).c_str()
               : load.bf16Weights ? "the BF16 weights (--bf16)"
               : info.quantization != "bf16" ? info.quantization.c_str()
                                             : "the BF16 model");
  return 0;
}

int runGenerate(const std::vector<std::string>& argv) {
  Args args("generate", argv, {"prompt", "system", "max-new-tokens", "temperature", "seed"},
            {"raw", "bf16", "help"});
  const char* usage =
      "fp4lab generate MODEL_DIR --prompt TEXT [--system TEXT] [--max-new-tokens N]\n"
      "                       [--temperature T] [--seed S] [--raw] [--bf16]";
  if (args.has("help")) {
    std::printf(
        "usage: %s\n\n"
        "Prints the model's reply to TEXT as a user message (with --raw: the continuation of "
        "TEXT).\nGreedy at temperature 0 (the default). --max-new-tokens (default 128) is capped "
        "by the\nmodel's context. A fake-quantized model generates as saved; --bf16 uses its BF16 "
        "weights.\n",
        usage);
    return 0;
  }
  args.requirePositionals(1, usage);
  if (!args.has("prompt")) throw Error("--prompt TEXT is required", "fp4lab generate", usage);
  run::GenerateOptions g;
  g.temperature = args.number("temperature", 0.0, 0.0, 100.0);
  g.seed = uint64_t(args.integer("seed", 0, 0, INT64_MAX));
  g.maxNewTokens = args.integer("max-new-tokens", 128, 1, 1 << 20);
  g.system = args.get("system", "");
  g.raw = args.has("raw");
  if (g.raw && args.has("system"))
    throw Error("--system does not apply with --raw", "fp4lab generate",
                "--raw continues the text; drop one of them");
  run::ModelLoadOptions load;
  load.bf16Weights = args.has("bf16");
  const run::Model model = run::Model::load(args.positionals()[0], load);
  if (g.maxNewTokens >= model.info().contextLength)
    throw Error("--max-new-tokens " + std::to_string(g.maxNewTokens) +
                    " is beyond the model's context of " +
                    std::to_string(model.info().contextLength) + " tokens",
                "fp4lab generate", "ask for fewer (the prompt takes part of the context too)");
  std::printf("%s\n", model.generate(args.get("prompt", ""), g).c_str());
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

namespace fp4lab::cli {

int runTokenize(const std::vector<std::string>& argv) {
  Args args("tokenize", argv, {"text"}, {"help"});
  const char* usage = "fp4lab tokenize MODEL_DIR --text TEXT";
  if (args.has("help")) {
    std::printf(
        "usage: %s\n\n"
        "Prints the token ids of TEXT under MODEL_DIR's tokenizer as a JSON array: no BOS or EOS\n"
        "added, and special-token strings (\"<|im_end|>\") map to their ids, as Hugging Face's\n"
        "encode(TEXT, add_special_tokens=False). MODEL_DIR is a Hugging Face folder with\n"
        "tokenizer.json, a run's model/ or checkpoint, builtin:tiny or builtin:smollm2-135m.\n",
        usage);
    return 0;
  }
  args.requirePositionals(1, usage);
  if (!args.has("text"))
    throw Error("--text is missing", "tokenize", std::string("usage: ") + usage);
  std::string dir = args.positionals()[0];
  if (dir == "builtin:tiny") dir = run::builtinModelPath();
  if (dir == "builtin:smollm2-135m") dir = run::smollm2ModelPath();
  const std::string hf = (std::filesystem::path(dir) / "tokenizer.json").string();
  const std::string byte = (std::filesystem::path(dir) / "fp4lab_tokenizer.json").string();
  std::unique_ptr<data::Tokenizer> tokenizer;
  if (std::filesystem::exists(hf))
    tokenizer = data::loadTokenizerJson(hf);
  else if (std::filesystem::exists(byte))
    tokenizer = data::makeByteTokenizer();
  else
    throw Error("no tokenizer.json (or fp4lab_tokenizer.json)", dir,
                "pass a Hugging Face model folder, a run's model/, or a built-in model");
  const std::vector<int32_t> ids = tokenizer->encodeWithSpecials(args.get("text", ""));
  std::printf("%s\n", nlohmann::json(ids).dump().c_str());
  return 0;
}

}  // namespace fp4lab::cli
