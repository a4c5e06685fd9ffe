// The Runner: one run folder end to end. Resolves the model and data, writes run.yaml and
// status.json, feeds the HDF5 log and the JSON events from the training loop's reports.
#include "fp4lab/run/runner.h"

#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "fp4lab/data/builtin_tasks.h"
#include "fp4lab/error.h"
#include "fp4lab/log/run_log.h"
#include "model/files.h"
#include "run/model_source.h"
#include "train/recipe.h"
#include "train/trainer.h"

namespace fp4lab::run {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string utcNow(const char* format = "%Y-%m-%dT%H:%M:%SZ") {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}

void writeStatus(const fs::path& runDir, const std::string& state, int64_t step, int64_t maxSteps,
                 const std::string& message = {}) {
  nlohmann::json s = {{"state", state},
                      {"pid", int(getpid())},
                      {"step", step},
                      {"max_steps", maxSteps},
                      {"updated_utc", utcNow()}};
  if (!message.empty()) s["message"] = message;
  model::files::writeFileAtomically((runDir / "status.json").string(), s.dump(2) + "\n");
}

// Reports of the training loop, fanned out to the log, the events and status.json.
class RunListener : public train::TrainerListener {
 public:
  RunListener(log::RunLogWriter& log, const RunOptions& options, fs::path runDir, int64_t maxSteps)
      : m_log(log), m_options(options), m_runDir(std::move(runDir)), m_maxSteps(maxSteps) {}

  void emit(RunEvent e) {
    if (m_options.onEvent) m_options.onEvent(e);
  }

  void onStep(const train::StepReport& r) override {
    m_log.appendTrain({r.step, r.tokens, r.wallSeconds, float(r.loss), float(r.lr),
                       float(r.gradNorm), float(r.tokensPerSecond)});
    RunEvent e;
    e.kind = "step";
    e.step = r.step, e.maxSteps = r.maxSteps, e.tokens = r.tokens;
    e.loss = r.loss, e.lr = r.lr, e.gradNorm = r.gradNorm, e.tokensPerSecond = r.tokensPerSecond;
    e.wallSeconds = r.wallSeconds;
    e.etaSeconds = r.step > 0 ? r.wallSeconds / double(r.step) * double(r.maxSteps - r.step) : 0;
    emit(e);
    auto now = Clock::now();
    if (now - m_lastStatus > std::chrono::seconds(1)) {
      writeStatus(m_runDir, "running", r.step, m_maxSteps);
      m_lastStatus = now;
    }
    m_step = r.step;
  }

  void onEval(const train::EvalReport& r) override {
    m_log.appendEval({r.step, r.tokens, r.wallSeconds, {r.valLoss, r.valPerplexity}});
    RunEvent e;
    e.kind = "eval";
    e.step = r.step, e.maxSteps = m_maxSteps, e.tokens = r.tokens, e.wallSeconds = r.wallSeconds;
    e.metrics = {{"val_loss", r.valLoss}, {"val_ppl", r.valPerplexity}};
    emit(e);
  }

  void onCheckpoint(const std::string& path, int64_t step) override {
    m_log.event("checkpoint", "step " + std::to_string(step) + " " + path);
    RunEvent e;
    e.kind = "checkpoint";
    e.step = step, e.maxSteps = m_maxSteps, e.path = path;
    emit(e);
  }

  void onWarning(const std::string& message) override {
    m_log.event("warning", message);
    RunEvent e;
    e.kind = "warning";
    e.step = m_step, e.maxSteps = m_maxSteps, e.message = message;
    emit(e);
  }

  bool stopRequested() override {
    return m_options.stopRequested && m_options.stopRequested->load();
  }

 private:
  log::RunLogWriter& m_log;
  const RunOptions& m_options;
  fs::path m_runDir;
  int64_t m_maxSteps;
  int64_t m_step = 0;
  Clock::time_point m_lastStatus{};
};

fs::path resolveRunDir(const RunConfig& config, const RunOptions& options) {
  if (!options.runDir.empty()) return fs::path(options.runDir);
  if (!options.resumeFrom.empty() && options.resumeFrom != "latest")
    return fs::path(options.resumeFrom).parent_path().parent_path();  // <run>/checkpoints/step-N
  return fs::path(config.outputDir) / (config.name + "-" + utcNow("%Y%m%d-%H%M%S"));
}

}  // namespace

std::string RunEvent::toJson() const {
  nlohmann::json j = {{"event", kind}, {"step", step}, {"max_steps", maxSteps}};
  if (kind == "step") {
    j["tokens"] = tokens;
    j["loss"] = loss;
    j["lr"] = lr;
    j["grad_norm"] = gradNorm;
    j["tok_per_s"] = tokensPerSecond;
    j["eta_s"] = etaSeconds;
    j["wall_s"] = wallSeconds;
  }
  for (const auto& [k, v] : metrics)
    j[k] = std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
  if (!message.empty()) j["message"] = message;
  if (!path.empty()) j["path"] = path;
  return j.dump();
}

std::string readRunState(const std::string& runDir) {
  std::ifstream in(fs::path(runDir) / "status.json");
  if (!in) return "unknown";
  nlohmann::json s = nlohmann::json::parse(in, nullptr, false);
  if (s.is_discarded() || !s.contains("state")) return "unknown";
  std::string state = s["state"].get<std::string>();
  if (state == "running" && s.contains("pid")) {
    int pid = s["pid"].get<int>();
    if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) return "crashed";
  }
  return state;
}

RunResult executeRun(const RunConfig& config, const RunOptions& options) {
  config.validate();
  const fs::path runDir = resolveRunDir(config, options);
  const bool resuming = !options.resumeFrom.empty();
  std::string checkpoint;
  if (resuming) {
    checkpoint = options.resumeFrom == "latest"
                     ? train::latestCheckpoint((runDir / "checkpoints").string())
                     : options.resumeFrom;
    if (checkpoint.empty() || !fs::exists(fs::path(checkpoint) / "trainer_state.json"))
      throw Error("no checkpoint to resume from",
                  options.resumeFrom == "latest" ? (runDir / "checkpoints").string() : checkpoint,
                  "pass --output-dir RUN_DIR with --resume-from-checkpoint latest, or a "
                  "checkpoints/step-N folder");
  } else if (fs::exists(runDir / "log.h5")) {
    throw Error("the run folder already holds a run", runDir.string(),
                "choose another --output-dir, or resume it with --resume-from-checkpoint latest");
  }

  // Everything that can fail on bad input happens before the run folder is touched.
  const int threads =
      config.threads > 0 ? config.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  torch::set_num_threads(threads);
  torch::manual_seed(config.seed);
  ModelBundle bundle =
      loadModelBundle(resuming ? checkpoint : config.modelPath, torch::kFloat32, config.seed);
  DataBundle dataBundle = loadTrainingData(config, *bundle.tokenizer);

  fs::create_directories(runDir);
  if (!resuming) model::files::writeFileAtomically((runDir / "run.yaml").string(), config.toYaml());
  writeStatus(runDir, "running", 0, config.maxSteps);
  const std::string logPath = (runDir / "log.h5").string();
  std::unique_ptr<train::Recipe> recipe = train::makeRecipe(config);
  // The log is reopened at the checkpoint's step, dropping any rows written after it.
  log::RunLogWriter logWriter =
      resuming ? log::RunLogWriter::resume(logPath, train::checkpointStep(checkpoint))
               : log::RunLogWriter::create(
                     logPath,
                     {runDir.filename().string(), config.recipe, "bf16", utcNow(), config.toYaml()},
                     {{"val_loss", "val_ppl"}, {}, {}, {}});
  RunListener listener(logWriter, options, runDir, config.maxSteps);
  train::Trainer trainer(
      config, bundle.model, *recipe, std::move(dataBundle.train), std::move(dataBundle.validation),
      (runDir / "checkpoints").string(), listener,
      [&](const std::string& dir) { saveModelBundle(bundle, dir, torch::kFloat32); });
  if (resuming)
    trainer.resumeFrom(checkpoint);
  else
    logWriter.event("start", "fp4lab train, " + std::to_string(dataBundle.trainSequences) +
                                 " training sequences");
  RunEvent started;
  started.kind = "started";
  started.step = trainer.state().step;
  started.maxSteps = config.maxSteps;
  started.path = runDir.string();
  started.message = resuming ? "resumed from " + checkpoint : "started";
  listener.emit(started);

  RunResult result;
  result.runDir = runDir.string();
  train::TrainOutcome outcome;
  try {
    outcome = trainer.run();
  } catch (const std::exception& e) {
    writeStatus(runDir, "failed", trainer.state().step, config.maxSteps, e.what());
    logWriter.event("end", std::string("failed: ") + e.what());
    logWriter.close();
    throw;
  }
  result.steps = trainer.state().step;
  if (outcome == train::TrainOutcome::Finished) {
    saveModelBundle(bundle, (runDir / "model").string());
    result.state = "finished";
  } else if (outcome == train::TrainOutcome::Stopped) {
    result.state = "cancelled";
    result.message = "stopped at step " + std::to_string(result.steps) + "; checkpoint " +
                     trainer.lastCheckpoint();
  } else {
    result.state = "failed";
    result.message = "the loss diverged at step " + std::to_string(result.steps + 1);
  }
  logWriter.event("end", result.state + (result.message.empty() ? "" : ": " + result.message));
  logWriter.close();
  writeStatus(runDir, result.state, result.steps, config.maxSteps, result.message);
  RunEvent end;
  end.kind = result.state == "finished" ? "finished"
                                        : (result.state == "cancelled" ? "cancelled" : "failed");
  end.step = result.steps;
  end.maxSteps = config.maxSteps;
  end.message = result.message;
  end.path = runDir.string();
  listener.emit(end);
  return result;
}

}  // namespace fp4lab::run
