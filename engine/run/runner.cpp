// The Runner: one run folder end to end. Resolves the model and data, writes run.yaml and
// status.json, feeds the HDF5 log and the JSON events from the training loop's reports.
#include "fp4lab/run/runner.h"
#include "fp4lab/run/input_check.h"

#include <sched.h>
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "fp4lab/common/files.h"
#include "fp4lab/common/system.h"
#include "fp4lab/common/time.h"
#include "fp4lab/data/builtin_tasks.h"
#include "fp4lab/error.h"
#include "fp4lab/kernels/fp4.h"
#include "fp4lab/log/run_log.h"
#include "fp4lab/run/run_folder.h"
#include "model/gemm_choice.h"
#include "quant/quantize_model.h"
#include "run/model_source.h"
#include "run/run_gemm.h"
#include "run/task_eval.h"
#include "train/device.h"
#include "train/distributed.h"
#include "train/recipe.h"
#include "train/trainer.h"

namespace fp4lab::run {
namespace {

namespace fs = std::filesystem;

using Clock = std::chrono::steady_clock;

// What an evaluation adds beyond the loop's validation loss: task pass rates by generation and
// the quantized layers' error statistics.
struct EvalExtras {
  const RunConfig& config;
  ModelBundle& bundle;
  std::vector<quant::QuantizedLayer>& layers;
  std::vector<std::string> tasks;
  bool hasReference = false;
};

// A task evaluation's answers, one JSON object a line: what tasks/step-<N>.jsonl holds, and what a
// data-parallel rank sends rank 0.
std::string taskAnswerLines(const TaskResults& t) {
  std::string lines;
  for (const auto& item : t.items) {
    nlohmann::json line{{"task", item.task},     {"index", item.index},
                        {"prompt", item.prompt}, {"response", item.response},
                        {"pass", item.pass},     {"reason", item.reason}};
    if (!item.system.empty()) line["system"] = item.system;
    lines += line.dump() + "\n";
  }
  return lines;
}

// One line of taskAnswerLines back (fp4lab::Error carries a rank's failure instead: see EvalWork).
TaskItemResult taskAnswerFromJson(const nlohmann::json& j) {
  TaskItemResult r;
  r.task = j.at("task"), r.index = j.at("index"), r.prompt = j.at("prompt");
  r.system = j.value("system", ""), r.response = j.at("response");
  r.pass = j.at("pass"), r.reason = j.at("reason");
  return r;
}

// The part of an evaluation that every rank of a data-parallel run does alike (its calls are
// collectives, in the same order on every rank): the input quantizers' error statistics reduced
// over the ranks' validation shards, and the task items graded shard by shard (item i on rank
// i mod N) and gathered. One process: the same, without the collectives.
class EvalWork {
 public:
  EvalWork(EvalExtras extras, train::ProcessGroup* group)
      : m_extras(std::move(extras)), m_group(group) {}
  const EvalExtras& extras() const { return m_extras; }
  int ranks() const { return m_group ? m_group->world() : 1; }

  void before() { quant::setMeasuringActivations(m_extras.layers, true); }

  // Ends the measurement; the graded tasks when they are due at `step` (every rank gets them).
  std::optional<TaskResults> after(int64_t step, int64_t maxSteps) {
    quant::setMeasuringActivations(m_extras.layers, false);
    if (m_group) reduceActivationStats();
    const RunConfig& c = m_extras.config;
    const bool due = step == maxSteps || (c.taskEvery > 0 && step % c.taskEvery == 0);
    if (m_extras.tasks.empty() || !due) return std::nullopt;
    const auto started = Clock::now();
    ReplyOptions reply;
    reply.maxNewTokens = c.maxNewTokens;
    auto grade = [&] {
      return evaluateTasks(m_extras.bundle.model, m_extras.bundle.tokenizer("task evaluation"),
                           m_extras.tasks, c.taskItems, c.dataSeed, reply,
                           m_group ? m_group->rank() : 0, ranks());
    };
    if (!m_group) return grade();
    // A rank whose grading fails still joins the gather, with its error, so that every rank (the
    // writer too) fails with the cause rather than with a broken collective.
    std::string mine;
    try {
      mine = taskAnswerLines(grade());
    } catch (const std::exception& e) {
      mine = nlohmann::json{{"error", e.what()}}.dump() + "\n";
    }
    std::vector<TaskItemResult> all;
    const std::vector<std::string> shards = m_group->allGather(mine);
    for (size_t rank = 0; rank < shards.size(); ++rank) {
      std::istringstream in(shards[rank]);
      for (std::string line; std::getline(in, line);) {
        const nlohmann::json j = nlohmann::json::parse(line);
        if (j.contains("error"))
          throw Error("rank " + std::to_string(rank) +
                          " failed to grade its task items: " + j.at("error").get<std::string>(),
                      "eval.tasks", "see that rank's output");
        all.push_back(taskAnswerFromJson(j));
      }
    }
    // Rank 0's wall clock from the first item to the last rank's answers.
    return mergeTaskShards(m_extras.tasks, std::move(all),
                           std::chrono::duration<double>(Clock::now() - started).count());
  }

 private:
  // Sums and maxima of every input quantizer's statistics over the ranks: what one process that
  // evaluated every validation batch would have measured (up to the order of the sums).
  void reduceActivationStats() {
    static_assert(sizeof(fp4_error_stats) == 9 * 8, "a new statistic: reduce it below");
    std::vector<quant::FakeQuantizer*> inputs;
    for (auto& l : m_extras.layers)
      if (l.input) inputs.push_back(l.input.get());
    if (inputs.empty()) return;
    const int64_t n = int64_t(inputs.size());
    torch::Tensor sums = torch::empty({n, 8}, torch::kDouble);
    torch::Tensor maxima = torch::empty({n}, torch::kDouble);
    double* s = sums.data_ptr<double>();
    for (int64_t i = 0; i < n; ++i) {
      const fp4_error_stats& a = inputs[size_t(i)]->stats();
      const double v[8] = {
          double(a.count), double(a.clipped), double(a.flushed), double(a.nonfinite),
          a.sum_x2,        a.sum_err2,        a.sum_xq,          a.sum_q2};
      std::copy(v, v + 8, s + 8 * i);
      maxima.data_ptr<double>()[i] = a.max_abs_err;
    }
    m_group->allReduceSum(sums);
    m_group->allReduceMax(maxima);
    s = sums.data_ptr<double>();
    for (int64_t i = 0; i < n; ++i) {
      const double* v = s + 8 * i;
      fp4_error_stats a;
      a.count = int64_t(v[0]), a.clipped = int64_t(v[1]), a.flushed = int64_t(v[2]);
      a.nonfinite = int64_t(v[3]);
      a.sum_x2 = v[4], a.sum_err2 = v[5], a.sum_xq = v[6], a.sum_q2 = v[7];
      a.max_abs_err = maxima.data_ptr<double>()[i];
      inputs[size_t(i)]->setStats(a);
    }
  }

  EvalExtras m_extras;
  train::ProcessGroup* m_group;
};

// Reports of the training loop, fanned out to the log, the events and status.json.
class RunListener : public train::TrainerListener {
 public:
  RunListener(log::RunLogWriter& log, const RunOptions& options, fs::path runDir, int64_t maxSteps,
              EvalWork& eval)
      : m_log(log),
        m_options(options),
        m_runDir(std::move(runDir)),
        m_maxSteps(maxSteps),
        m_eval(eval) {}

  void emit(RunEvent e) {
    if (m_options.onEvent) m_options.onEvent(e);
  }

  void onStep(const train::StepReport& r) override {
    m_log.appendTrain({r.step, r.tokens, r.wallSeconds, float(r.loss), float(r.lr),
                       float(r.gradNorm), float(r.tokensPerSecond)});
    RunEvent e;
    e.kind = EventKind::Step;
    e.step = r.step, e.maxSteps = r.maxSteps, e.tokens = r.tokens;
    e.loss = r.loss, e.lr = r.lr, e.gradNorm = r.gradNorm, e.tokensPerSecond = r.tokensPerSecond;
    e.wallSeconds = r.wallSeconds;
    e.etaSeconds = r.step > 0 ? r.wallSeconds / double(r.step) * double(r.maxSteps - r.step) : 0;
    if (std::isfinite(r.allReduceSeconds)) e.metrics["allreduce_s"] = r.allReduceSeconds;
    if (r.threads > 0) e.metrics["threads"] = r.threads;
    emit(e);
    auto now = Clock::now();
    if (now - m_lastStatus > std::chrono::seconds(1)) {
      writeRunStatus(m_runDir.string(), RunState::Running, r.step, m_maxSteps);
      m_lastStatus = now;
    }
    m_step = r.step;
  }

  void beforeEval() override { m_eval.before(); }

  void onEval(const train::EvalReport& r) override {
    const std::optional<TaskResults> t = m_eval.after(r.step, m_maxSteps);
    const EvalExtras& extras = m_eval.extras();
    RunEvent e;
    e.kind = EventKind::Eval;
    e.step = r.step, e.maxSteps = m_maxSteps, e.tokens = r.tokens, e.wallSeconds = r.wallSeconds;
    e.metrics = {{"val_loss", r.valLoss}, {"val_ppl", r.valPerplexity}};
    std::vector<double> row = {r.valLoss, r.valPerplexity};
    if (extras.hasReference) {
      row.push_back(r.valKl);
      e.metrics["val_kl"] = r.valKl;
    }
    if (t) {
      writeTaskAnswers(*t, r.step);
      std::ostringstream note;
      note << "step " << r.step << ": " << t->items.size() << " items graded in " << std::fixed
           << std::setprecision(2) << t->seconds << " s";
      if (m_eval.ranks() > 1) note << " (sharded over " << m_eval.ranks() << " ranks)";
      for (const auto& task : extras.tasks)
        note << ", " << task << " " << std::setprecision(0) << 100 * t->passRate.at(task) << "%";
      m_log.event("tasks", note.str());
    }
    for (const auto& task : extras.tasks) {
      const double rate = t ? t->passRate.at(task) : NAN;
      row.push_back(rate);
      if (t) e.metrics["pass_rate_" + task] = rate;
    }
    m_log.appendEval({r.step, r.tokens, r.wallSeconds, row});
    if (!extras.layers.empty()) {
      quant::LayerErrors errors = quant::measureLayers(extras.layers);
      m_log.appendQuant(r.step, errors.metricByLayer);
      for (size_t l = 0; l < errors.blockMse.size(); ++l)
        m_log.appendBlocks(r.step, l, errors.blockMse[l]);
    }
    emit(e);
  }

  // <run>/tasks/step-<N>.jsonl: every graded answer, for reading what went wrong.
  void writeTaskAnswers(const TaskResults& t, int64_t step) {
    files::createDirectories((m_runDir / "tasks").string());
    files::writeFileAtomically(
        (m_runDir / "tasks" / ("step-" + std::to_string(step) + ".jsonl")).string(),
        taskAnswerLines(t));
  }

  void onCheckpoint(const std::string& path, int64_t step) override {
    m_log.event("checkpoint", "step " + std::to_string(step) + " " + path);
    RunEvent e;
    e.kind = EventKind::Checkpoint;
    e.step = step, e.maxSteps = m_maxSteps, e.path = path;
    emit(e);
  }

  void onWarning(const std::string& message) override {
    m_log.event("warning", message);
    RunEvent e;
    e.kind = EventKind::Warning;
    e.step = m_step, e.maxSteps = m_maxSteps, e.message = message;
    emit(e);
  }

  void onThreads(int, const std::string& note) override { m_log.event("threads", note); }

  bool stopRequested() override {
    return m_options.stopRequested && m_options.stopRequested->load();
  }

 private:
  log::RunLogWriter& m_log;
  const RunOptions& m_options;
  fs::path m_runDir;
  int64_t m_maxSteps;
  EvalWork& m_eval;
  int64_t m_step = 0;
  Clock::time_point m_lastStatus{};
};

// The other ranks of a data-parallel run: they train and evaluate in step with rank 0 but write
// nothing (no log, events, status or checkpoints); they only agree on stopping.
class QuietListener : public train::TrainerListener {
 public:
  QuietListener(const RunOptions& options, EvalWork& eval, int64_t maxSteps)
      : m_options(options), m_eval(eval), m_maxSteps(maxSteps) {}
  void beforeEval() override { m_eval.before(); }
  void onEval(const train::EvalReport& r) override { m_eval.after(r.step, m_maxSteps); }
  bool stopRequested() override {
    return m_options.stopRequested && m_options.stopRequested->load();
  }

 private:
  const RunOptions& m_options;
  EvalWork& m_eval;
  int64_t m_maxSteps;
};

// FP4LAB_TEST_DIGEST_DIR (tests only): every rank writes rank-<r>.json there with digests of its
// weights and amaxes, so a test can check that all ranks hold bit-identical models.
void writeTestDigest(int rank, int world, int64_t step, model::CausalLM& model,
                     const std::vector<quant::QuantizedLayer>& layers) {
  const char* dir = std::getenv("FP4LAB_TEST_DIGEST_DIR");
  if (!dir || !*dir) return;
  std::vector<torch::Tensor> params = model->parameters();
  std::vector<float> amax;
  for (const auto& l : layers) {
    amax.push_back(l.weight->amax());
    if (l.input) amax.push_back(l.input->amax());
  }
  nlohmann::json j = {
      {"rank", rank},
      {"world", world},
      {"step", step},
      {"weights", train::tensorDigest(params)},
      {"amax", train::tensorDigest({torch::tensor(amax.empty() ? std::vector<float>{0} : amax)})},
      {"amax_values", amax}};
  files::createDirectories(dir);
  files::writeFileAtomically((fs::path(dir) / ("rank-" + std::to_string(rank) + ".json")).string(),
                             j.dump() + "\n");
}

}  // namespace

static fs::path resolveRunDir(const RunConfig& config, const RunOptions& options) {
  if (!options.runDir.empty()) return fs::path(options.runDir);
  if (!options.resumeFrom.empty() && options.resumeFrom != "latest")
    return fs::path(options.resumeFrom).parent_path().parent_path();  // <run>/checkpoints/step-N
  return fs::path(config.outputDir) / (config.name + "-" + utcCompactTimestamp());
}

std::string runFolderFor(const RunConfig& config, const RunOptions& options) {
  return resolveRunDir(config, options).string();
}

std::string RunEvent::toJson() const {
  nlohmann::json j = {{"event", toString(kind)}, {"step", step}, {"max_steps", maxSteps}};
  if (kind == EventKind::Step) {
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

namespace {

// A rank other than 0 whose collective failed: when rank 0, the run folder's writer, is the one
// that died (its status.json still says running, with a pid of this machine that is gone, which
// readRunFolder reports as crashed), nobody else would mark the run failed (under torchrun there is
// no fp4lab launcher). The folder is only seen when it is on this machine or a shared filesystem;
// a live rank 0 marks the run itself.
// A killed process closes its sockets before it is a zombie, so this rank's collective can fail
// while rank 0 still reads as running: it looks again for a few seconds before deciding rank 0 is
// alive (a live rank 0's own status write ends the wait as well).
void markFailedIfWriterDied(const std::string& runDir, int64_t maxSteps, const std::string& why) {
  try {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    for (;;) {
      const RunFolder folder = readRunFolder(runDir);
      if (folder.state == RunState::Crashed) {
        writeRunStatus(runDir, RunState::Failed, folder.step, maxSteps,
                       "rank 0 died; another rank reports: " + why);
        return;
      }
      if (folder.state != RunState::Running || std::chrono::steady_clock::now() > deadline) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  } catch (const std::exception&) {
    // Best effort: the error being thrown says what happened.
  }
}

// The "memory" event at a run's end: this process's peak resident memory, and on a GPU the most
// LibTorch held allocated there.
std::string memoryNote(const torch::Device& device) {
  auto mib = [](int64_t bytes) { return std::to_string((bytes + (1 << 19)) >> 20) + " MiB"; };
  std::string note = "peak resident memory " + mib(peakResidentBytes()) + " (" +
                     (usingTcmalloc() ? "tcmalloc" : "glibc malloc") + ")";
  const int64_t onDevice = train::peakDeviceMemory(device);
  if (onDevice >= 0) note += ", peak " + device.str() + " memory " + mib(onDevice);
  return note;
}

}  // namespace

RunResult executeRun(const RunConfig& config, const RunOptions& options) {
  config.validate();
  const fs::path runDir = resolveRunDir(config, options);
  const bool resuming = !options.resumeFrom.empty();
  std::string checkpoint;
  if (resuming) {
    checkpoint = options.resumeFrom == "latest"
                     ? latestCheckpointIn((runDir / "checkpoints").string())
                     : options.resumeFrom;
    if (checkpoint.empty() || !fs::exists(fs::path(checkpoint) / "trainer_state.json"))
      throw Error("no checkpoint to resume from",
                  options.resumeFrom == "latest" ? (runDir / "checkpoints").string() : checkpoint,
                  "pass --output-dir RUN_DIR with --resume-from-checkpoint latest, or a "
                  "checkpoints/step-N folder");
    // A resumed run is the run in its folder: the config must be run.yaml's (resumeConfig).
    const fs::path ranYaml = runDir / "run.yaml";
    if (!fs::exists(ranYaml))
      throw Error("no run.yaml: not a run folder (or its configuration was lost)", runDir.string(),
                  "pass the folder of the run to resume with --output-dir");
    const RunConfig ran = RunConfig::fromYamlFile(ranYaml.string());
    const std::vector<std::string> changed = differingKeys(ran, config);
    if (!changed.empty())
      throw Error("'" + changed.front() + "' differs from the run's run.yaml",
                  config.originOf(changed.front()),
                  "a resumed run keeps its recipe, quantization, model, data, seed and schedule");
    const std::optional<uint64_t> savedSeed = train::checkpointSeed(checkpoint);
    if (savedSeed && *savedSeed != config.seed)
      throw Error("the checkpoint was trained with run.seed " + std::to_string(*savedSeed) +
                      ", not " + std::to_string(config.seed),
                  checkpoint, "resume with the run's own run.yaml");
  } else if (fs::exists(runDir / "log.h5")) {
    throw Error("the run folder already holds a run", runDir.string(),
                "choose another --output-dir, or resume it with --resume-from-checkpoint latest");
  } else {
    // Folders and files that are not there, named by their key (the workbench puts the message
    // under that field), before anything loads.
    checkInputs(config);
  }

  // Everything that can fail on bad input happens before the run folder is touched.
  // One thread budget for LibTorch's pool and the FP4 kernels' own workers.
  // Data-parallel: the launcher's variables (fp4lab train --nproc, torchrun). Ranks on one machine
  // share its cores.
  const train::DistEnvironment dist = train::distEnvironment();
  const int threads =
      config.threads > 0 ? config.threads : std::max(1, usableCores() / dist.localWorld);
  torch::set_num_threads(threads);
  fp4_set_num_threads(threads);
  torch::manual_seed(config.seed);
  const torch::Device device =
      train::resolveDevice(config, dist.localRank, dist.localWorldGiven ? dist.localWorld : 1);
  std::unique_ptr<train::ProcessGroup> group;
  if (dist.world > 1) {
    if (config.batchSize % dist.world != 0)
      throw Error(
          "train.batch_size " + std::to_string(config.batchSize) + " does not split evenly over " +
              std::to_string(dist.world) + " ranks",
          config.originOf("train.batch_size"),
          "train.batch_size is the global batch: use a multiple of the number of processes");
    if (!options.dryRun) group = train::ProcessGroup::join(dist, config.distTimeoutSeconds, device);
  }
  const bool writer = !group || group->rank() == 0;
  // A checkpoint always loads as saved (its quantizers are the run's); model.path as asked.
  ModelBundle bundle = loadModelBundle(resuming ? checkpoint : config.modelPath, torch::kFloat32,
                                       config.seed, resuming ? false : config.bf16Weights);
  bundle.model->to(device);
  // BF16 linears on whichever GEMM this machine runs faster (model/gemm_choice.h), chosen before
  // calibration's first forward.
  std::optional<model::Bf16GemmChoice> gemm;
  if (!options.dryRun && device.is_cpu() && config.computeDtype == "bf16")
    gemm = chooseRunGemm(bundle.model, config, group.get());
  const int64_t contextLength = bundle.model->config().maxPositionEmbeddings;
  if (config.seqLen > contextLength)
    throw Error("'data.seq_len' is " + std::to_string(config.seqLen) +
                    ", beyond the model's context of " + std::to_string(contextLength) + " tokens",
                config.originOf("data.seq_len"), "use at most " + std::to_string(contextLength));
  if (!config.tasks.empty() && config.maxNewTokens >= contextLength)
    throw Error("'eval.max_new_tokens' is " + std::to_string(config.maxNewTokens) +
                    ", beyond the model's context of " + std::to_string(contextLength) + " tokens",
                config.originOf("eval.max_new_tokens"), "use fewer");
  DataBundle dataBundle = loadTrainingData(config, bundle);
  const std::vector<std::string> tasks = splitList(config.tasks);
  checkTaskNames(tasks, "eval.tasks");
  if (dataBundle.train.empty())
    throw Error("no training sequences", "data.train", "check the dataset and data.seq_len");
  // Graded generation needs the tokenizer: fail now, not after training.
  if (!tasks.empty()) bundle.tokenizer("eval.tasks (grading by generation)");

  // Frozen models (teacher, reference), loaded once per path, in BF16. The run's own model.path
  // as a teacher or reference is its BF16 weights (a QAD run from a PTQ model distils from the
  // model the PTQ quantized, not from itself); other folders load as saved, and a folder saved
  // fake-quantized in fp32, as its quantizers were fitted to those weights.
  std::map<std::string, model::CausalLM> frozen;
  std::vector<std::string> frozenNotes;
  auto loadFrozen = [&](const std::string& path) {
    auto it = frozen.find(path);
    if (it != frozen.end()) return it->second;
    const bool bf16Weights = config.bf16Weights || files::samePath(path, config.modelPath);
    const bool quantized = !bf16Weights && fs::exists(fs::path(path) / quant::kQuantStateFile);
    if (quantized)
      train::requireCudaKernels(device, "the fake-quantized model " + path,
                                config.originOf("train.device"));
    // Computed as the student computes (fp32 master weights under the run's autocast), so the
    // unquantized SFT model's KL to itself is exactly 0: a BF16 model's BF16 residual stream alone
    // would differ from it by a KL of 2.5e-3 on SmolLM2-135M. The matrix products' weights are
    // held in BF16, which autocast rounds them to anyway.
    ModelBundle b = loadModelBundle(path, torch::kFloat32, config.seed, bf16Weights);
    model::CausalLM m = b.model;
    const bool bf16Products = !quantized && config.computeDtype == "bf16";
    if (bf16Products) model::holdMatrixWeightsInBf16(m);
    m->to(device);
    int64_t bytes = 0;
    for (auto& p : m->parameters()) {
      p.set_requires_grad(false);
      bytes += p.numel() * int64_t(p.element_size());
    }
    m->eval();
    frozenNotes.push_back(path + " (" +
                          (quantized      ? "fp32, " + b.quantization()
                           : bf16Products ? std::string("BF16 matrix weights, fp32 otherwise")
                                          : std::string("fp32")) +
                          ", " + std::to_string(bytes / 1024) + " KiB of weights)");
    return frozen.emplace(path, m).first->second;
  };

  // The recipe shapes the student (quantizers, calibration) before the log is declared.
  std::unique_ptr<train::Recipe> recipe = train::makeRecipe(config);
  const int64_t maxSteps = recipe->trains() ? config.maxSteps : 0;
  train::RecipeContext context;
  context.autocast = config.computeDtype == "bf16";
  context.savedQuantizers = bundle.quantizers;
  context.savedOptions = bundle.quantOptions;
  context.loadFrozenModel = loadFrozen;
  // Each rank calibrates on its slice of every calibration batch; the amaxes are then reduced.
  const int64_t calibPer = group ? config.batchSize / group->world() : config.batchSize;
  const int64_t calibFirst = group ? group->rank() * calibPer : 0;
  context.calibrationBatch = [&](int64_t i) {
    std::vector<const data::Sequence*> picked;
    for (int64_t k = calibFirst; k < calibFirst + calibPer; ++k)
      picked.push_back(
          &dataBundle.train[size_t(i * config.batchSize + k) % dataBundle.train.size()]);
    return train::makeBatch(picked, config.seqLen, bundle.model->device());
  };
  context.checkOnly = options.dryRun;
  if (group)
    context.maxOverRanks = [&](std::vector<float>& values) {
      torch::Tensor t = torch::tensor(values);
      group->allReduceMax(t);
      for (size_t i = 0; i < values.size(); ++i) values[i] = t[int64_t(i)].item<float>();
    };
  recipe->prepare(bundle.model, context);
  std::vector<quant::QuantizedLayer>& layers = recipe->quantizedLayers();
  const std::string referencePath =
      config.reference.empty() ? recipe->defaultReference() : config.reference;
  model::CausalLM reference{nullptr};
  if (!referencePath.empty()) reference = loadFrozen(referencePath);
  if (options.dryRun) {
    RunResult dry;
    dry.runDir = runDir.string();
    dry.message = std::to_string(dataBundle.train.size()) + " training and " +
                  std::to_string(dataBundle.validation.size()) + " validation sequences; model " +
                  bundle.source + ", " + bundle.quantization() + "; " + recipe->format() +
                  "; run folder " + runDir.string() +
                  (resuming ? ", resuming from " + checkpoint : "");
    return dry;
  }

  // Only rank 0 writes the run folder (run.yaml, status, log, events, checkpoints, model).
  if (writer) {
    files::createDirectories(runDir.string());
    if (!resuming) files::writeFileAtomically((runDir / "run.yaml").string(), config.toYaml());
    writeRunStatus(runDir.string(), RunState::Running, 0, maxSteps);
  }
  const std::string logPath = (runDir / "log.h5").string();
  log::RunLogSchema schema;
  schema.evalColumns = {"val_loss", "val_ppl"};
  if (reference) schema.evalColumns.push_back("val_kl");
  for (const auto& t : tasks) schema.evalColumns.push_back("pass_rate_" + t);
  for (const auto& l : layers) schema.quantLayers.push_back(l.name);
  if (!layers.empty()) {
    schema.quantMetrics = quant::layerMetricNames();
    schema.blocksPerLayer = quant::blocksPerLayer(layers);
    schema.blockRowsPerLayer = quant::blockRowsPerLayer(layers);
  }
  // The log is reopened at the checkpoint's step, dropping any rows written after it.
  std::optional<log::RunLogWriter> logWriter;
  std::optional<RunListener> runListener;
  EvalWork evalWork(EvalExtras{config, bundle, layers, tasks, bool(reference)}, group.get());
  if (writer) {
    logWriter.emplace(
        resuming ? log::RunLogWriter::resume(logPath, train::checkpointStep(checkpoint))
                 : log::RunLogWriter::create(logPath,
                                             {runDir.filename().string(), config.recipe,
                                              recipe->format(), utcTimestamp(), config.toYaml()},
                                             schema));
    runListener.emplace(*logWriter, options, runDir, maxSteps, evalWork);
  }
  QuietListener quiet(options, evalWork, maxSteps);
  train::TrainerListener& listener =
      runListener ? static_cast<train::TrainerListener&>(*runListener) : quiet;
  auto emit = [&](const RunEvent& e) {
    if (runListener) runListener->emit(e);
  };
  // Quantized runs keep fp32 weights: re-quantizing BF16-rounded weights would not reproduce
  // the trained fake-quantized model.
  const torch::Dtype saveDtype = layers.empty() ? torch::kBFloat16 : torch::kFloat32;
  auto saveModel = [&](const std::string& dir, torch::Dtype dtype) {
    saveModelBundle(bundle, dir, dtype, recipe->stateFiles());
  };
  train::Trainer trainer(config, bundle.model, *recipe, std::move(dataBundle.train),
                         std::move(dataBundle.validation), (runDir / "checkpoints").string(),
                         listener,
                         [&](const std::string& dir) { saveModel(dir, torch::kFloat32); });
  if (reference) trainer.setReference(reference);
  trainer.setProcessGroup(group.get());
  // train.threads=0 on one process: the count follows the machine's load (train/thread_tuner.h).
  // Data-parallel ranks keep their share: a rank's step time is the slowest rank's.
  if (config.threads == 0 && !group && threads > 1)
    trainer.setThreadTuner(train::ThreadTuner(threads), [](int n) {
      torch::set_num_threads(n);
      fp4_set_num_threads(n);
    });
  if (resuming) {
    trainer.resumeFrom(checkpoint);
  } else if (logWriter) {
    logWriter->event("start", "fp4lab train, recipe " + config.recipe + ", " +
                                  std::to_string(dataBundle.trainSequences) +
                                  " training sequences, " + recipe->format() + ", on " +
                                  train::describeDevice(device));
    for (const auto& note : frozenNotes) logWriter->event("frozen_model", note);
  }
  if (logWriter && gemm) logWriter->event("bf16_gemm", gemm->describe());
  RunEvent started;
  started.kind = EventKind::Started;
  started.step = trainer.state().step;
  started.maxSteps = maxSteps;
  started.path = runDir.string();
  started.message = resuming ? "resumed from " + checkpoint : "started";
  if (group)
    started.message += " (" + std::to_string(group->world()) + " processes, global batch " +
                       std::to_string(config.batchSize) + ")";
  emit(started);

  RunResult result;
  result.runDir = runDir.string();
  train::TrainOutcome outcome;
  try {
    outcome = trainer.run();
    // The model is the run's result: a run whose model could not be written (a full disk) has
    // failed, with its last checkpoint to resume from once the cause is gone.
    if (outcome == train::TrainOutcome::Finished && writer)
      saveModel((runDir / "model").string(), saveDtype);
  } catch (const std::exception& e) {
    try {  // best effort (the disk may be full): the error to report is e
      if (writer) {
        writeRunStatus(runDir.string(), RunState::Failed, trainer.state().step, maxSteps, e.what());
        logWriter->event("memory", memoryNote(device));
        logWriter->event("end", std::string("failed: ") + e.what());
        logWriter->close();
      } else {
        markFailedIfWriterDied(runDir.string(), maxSteps, e.what());
      }
    } catch (const std::exception&) {
    }
    throw;
  }
  result.steps = trainer.state().step;
  writeTestDigest(group ? group->rank() : 0, group ? group->world() : 1, result.steps, bundle.model,
                  layers);
  if (outcome == train::TrainOutcome::Finished) {
    result.state = RunState::Finished;
  } else if (outcome == train::TrainOutcome::Stopped) {
    result.state = RunState::Cancelled;
    result.message = "stopped at step " + std::to_string(result.steps) + "; checkpoint " +
                     trainer.lastCheckpoint();
  } else {
    result.state = RunState::Failed;
    result.message = "the loss diverged at step " + std::to_string(result.steps + 1);
  }
  if (!writer) return result;
  // train.keep_checkpoints=0: a finished run's result is its model/; its checkpoint (weights and
  // optimizer moments, three times the model) goes once the status says finished.
  const bool dropCheckpoints = result.state == RunState::Finished && config.keepCheckpoints == 0;
  logWriter->event("memory", memoryNote(device));
  if (dropCheckpoints)
    logWriter->event("checkpoint",
                     "removing checkpoints/: the run keeps its model/ "
                     "(train.keep_checkpoints=0)");
  logWriter->event("end", std::string(toString(result.state)) +
                              (result.message.empty() ? "" : ": " + result.message));
  logWriter->close();
  writeRunStatus(runDir.string(), result.state, result.steps, maxSteps, result.message);
  if (dropCheckpoints) {
    std::error_code ec;
    fs::remove_all(runDir / "checkpoints", ec);
    if (ec) {
      RunEvent warning;
      warning.kind = EventKind::Warning;
      warning.step = result.steps, warning.maxSteps = maxSteps;
      warning.message = "could not remove " + (runDir / "checkpoints").string() + ": " +
                        ec.message() + " (the run finished; delete that folder by hand)";
      emit(warning);
    }
  }
  RunEvent end;
  end.kind = result.state == RunState::Finished
                 ? EventKind::Finished
                 : (result.state == RunState::Cancelled ? EventKind::Cancelled : EventKind::Failed);
  end.step = result.steps;
  end.maxSteps = maxSteps;
  end.message = result.message;
  end.path = runDir.string();
  emit(end);
  return result;
}

}  // namespace fp4lab::run
