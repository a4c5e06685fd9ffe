// The training loop. Read `run()` top to bottom: every periodic action (log, eval, checkpoint,
// stop) is visible there. Recipes only supply the loss.
#include "train/trainer.h"

#include "train/autocast.h"

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <nlohmann/json.hpp>

#include "fp4lab/data/shuffle.h"
#include "fp4lab/error.h"
#include "fp4lab/common/files.h"
#include "train/schedule.h"

namespace fp4lab::train {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// The same permutation on every platform: data::SplitMix64 (std:: distributions differ).
std::vector<int64_t> epochOrder(size_t count, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(count);
  std::iota(order.begin(), order.end(), 0);
  data::SplitMix64 rng(seed ^ (0xD1B54A32D192ED03ull * uint64_t(epoch + 1)));
  for (size_t i = count; i > 1; --i) std::swap(order[i - 1], order[rng.next() % i]);
  return order;
}

// A training step frees and reallocates the same activation-sized buffers every step. glibc
// serves buffers above its mmap threshold with fresh mappings and trims the heap's free top, so
// every step paid page faults and zeroing for them again. Keep freed memory in the heap instead
// (the process's footprint stays at its peak step, which it reaches anyway).
void keepFreedMemoryForReuse() {
  static const bool done = [] {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest allowed threshold (64-bit)
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    return true;
  }();
  (void)done;
}

}  // namespace

Trainer::Trainer(const run::RunConfig& config, model::CausalLM model, Recipe& recipe,
                 std::vector<data::Sequence> train, std::vector<data::Sequence> validation,
                 std::string checkpointRoot, TrainerListener& listener,
                 std::function<void(const std::string&)> saveModel)
    : m_config(config),
      m_model(std::move(model)),
      m_recipe(recipe),
      m_train(std::move(train)),
      m_validation(std::move(validation)),
      m_checkpointRoot(std::move(checkpointRoot)),
      m_listener(listener),
      m_saveModel(std::move(saveModel)) {
  if (m_train.empty())
    throw Error("no training sequences", "data.train", "check the dataset and data.seq_len");
  keepFreedMemoryForReuse();
  for (auto& p : m_model->parameters()) {
    if (!p.requires_grad()) continue;
    m_parameters.push_back(p);
    m_device = p.device();
  }
  torch::optim::AdamWOptions options(config.lr);
  options.betas({config.beta1, config.beta2}).eps(config.eps).weight_decay(config.weightDecay);
  m_optimizer = std::make_unique<torch::optim::AdamW>(m_parameters, options);
  m_order = epochOrder(m_train.size(), m_config.seed, m_state.epoch);
}

void Trainer::setProcessGroup(ProcessGroup* group) {
  if (group && m_config.batchSize % group->world() != 0)
    throw Error("train.batch_size " + std::to_string(m_config.batchSize) +
                    " does not split evenly over " + std::to_string(group->world()) + " ranks",
                m_config.originOf("train.batch_size"),
                "train.batch_size is the global batch: use a multiple of the number of processes");
  m_averager.reset();
  m_group = group;
  if (group) m_averager = std::make_unique<GradientAverager>(*group, m_parameters);
}

namespace {
// Whether any rank says yes (every rank gets the same answer, so they all act on it together).
bool anyRank(ProcessGroup* group, bool yes) {
  if (!group) return yes;
  torch::Tensor t = torch::tensor({yes ? 1.0 : 0.0}, torch::kDouble);
  group->allReduceSum(t);
  return t.item<double>() > 0;
}
}  // namespace

// The next batch in a deterministic per-epoch order; the position is part of the checkpoint.
// Every rank walks the same order and takes its own contiguous slice of each global batch, so the
// position (and a checkpoint) does not depend on the number of ranks.
Batch Trainer::nextBatch(int64_t& globalLossTokens, int64_t& globalTokens) {
  std::vector<const data::Sequence*> picked;
  while (int64_t(picked.size()) < m_config.batchSize) {
    if (m_state.cursor >= int64_t(m_order.size())) {
      ++m_state.epoch;
      m_state.cursor = 0;
      m_order = epochOrder(m_train.size(), m_config.seed, m_state.epoch);
    }
    picked.push_back(&m_train[size_t(m_order[size_t(m_state.cursor++)])]);
  }
  globalTokens = int64_t(picked.size()) * m_config.seqLen;
  if (!m_group) {
    Batch batch = makeBatch(picked, m_config.seqLen, m_device);
    globalLossTokens = batch.lossTokens;
    return batch;
  }
  globalLossTokens = 0;
  for (const data::Sequence* s : picked)
    for (int64_t j = 0; j < m_config.seqLen; ++j)
      globalLossTokens += s->lossMask[size_t(j + 1)] != 0;
  const int64_t per = m_config.batchSize / m_group->world();
  const auto first = picked.begin() + m_group->rank() * per;
  return makeBatch(std::vector<const data::Sequence*>(first, first + per), m_config.seqLen,
                   m_device);
}

// Validation cross-entropy of the model as it runs (fake-quantized when a recipe quantizes it),
// and its KL to the reference model, whatever loss the recipe trains on.
EvalReport Trainer::evaluate() {
  torch::NoGradGuard noGrad;
  m_listener.beforeEval();
  m_model->eval();
  double lossSum = 0, klSum = 0;
  int64_t tokens = 0;
  const int64_t maxSequences = m_config.evalBatches * m_config.batchSize;
  const std::vector<data::Sequence>& source = m_validation.empty() ? m_train : m_validation;
  // Sharded over the ranks: batch k is evaluated by rank k % world, and the sums are reduced.
  int64_t index = -1;
  for (int64_t start = 0; start < std::min<int64_t>(maxSequences, int64_t(source.size()));
       start += m_config.batchSize) {
    ++index;
    if (m_group && index % m_group->world() != m_group->rank()) continue;
    std::vector<const data::Sequence*> picked;
    for (int64_t i = start;
         i < std::min<int64_t>(start + m_config.batchSize, int64_t(source.size())); ++i)
      picked.push_back(&source[size_t(i)]);
    Batch batch = makeBatch(picked, m_config.seqLen, m_device);
    if (batch.lossTokens == 0) continue;
    AutocastGuard autocast(m_config.computeDtype == "bf16", m_device.type());
    torch::Tensor logits = m_model->forward(batch.inputs);
    lossSum += tokenCrossEntropy(logits, batch.targets).item<double>() * double(batch.lossTokens);
    if (m_reference)
      klSum += tokenKl(m_reference->forward(batch.inputs), logits, batch.targets).item<double>() *
               double(batch.lossTokens);
    tokens += batch.lossTokens;
  }
  if (m_group) {
    torch::Tensor sums = torch::tensor({lossSum, klSum, double(tokens)}, torch::kDouble);
    m_group->allReduceSum(sums);
    lossSum = sums[0].item<double>(), klSum = sums[1].item<double>();
    tokens = int64_t(sums[2].item<double>());
  }
  m_model->train();
  const double valLoss = tokens ? lossSum / double(tokens) : NAN;
  const double valKl = m_reference && tokens ? klSum / double(tokens) : NAN;
  m_state.wallSeconds = wallSeconds();
  return EvalReport{m_state.step, m_state.tokens,    m_state.wallSeconds,
                    valLoss,      std::exp(valLoss), valKl};
}

void Trainer::setThreadTuner(ThreadTuner tuner, std::function<void(int)> apply) {
  m_tuner.emplace(std::move(tuner));
  m_applyThreads = std::move(apply);
}

TrainOutcome Trainer::run() {
  const int64_t maxSteps = m_recipe.trains() ? m_config.maxSteps : 0;
  const CosineSchedule schedule =
      CosineSchedule::make(m_config.lr, m_config.minLrRatio, m_config.warmupRatio, maxSteps);
  const bool autocast = m_config.computeDtype == "bf16";
  // wall_s counts this segment's wall clock (steps, evaluations, checkpoints) on top of what
  // the checkpoint it resumed from had.
  m_segmentStart = Clock::now();
  m_segmentBase = m_state.wallSeconds;
  m_model->train();
  if (m_group) {
    // Every rank starts from rank 0's weights (they loaded the same files; this makes it so).
    torch::NoGradGuard noGrad;
    std::vector<torch::Tensor> tensors;
    for (const auto& p : m_model->parameters()) tensors.push_back(p.detach());
    for (const auto& b : m_model->buffers()) tensors.push_back(b);
    m_group->broadcast(tensors);
  }
  if (m_state.step >= maxSteps) {
    // Resumed from the final checkpoint (the process died after it, before saving model/; for
    // ptq the step-0 one): the final evaluation is in the log already (an evaluation is flushed
    // before the checkpoint that follows it), so only the model remains to be saved.
    if (!m_lastCheckpoint.empty()) return TrainOutcome::Finished;
    // Nothing to train (ptq, train.max_steps=0): evaluate and save.
    m_listener.onEval(evaluate());
    saveCheckpoint();
    return TrainOutcome::Finished;
  }
  // Where the run starts from (the base model for SFT, the PTQ model for QAT and QAD), so that
  // every curve begins at step 0. Not again on resume: the log holds it already.
  if (m_state.step == 0 && m_config.evalEvery > 0) m_listener.onEval(evaluate());
  while (m_state.step < maxSteps) {
    if (anyRank(m_group, m_listener.stopRequested())) {
      saveCheckpoint();
      return TrainOutcome::Stopped;
    }
    const auto started = Clock::now();
    if (m_tuner) m_otherLoad.sample();  // from here to the step's end
    const double lr = schedule.at(m_state.step);
    for (auto& group : m_optimizer->param_groups()) group.options().set_lr(lr);
    m_optimizer->zero_grad();

    double lossSum = 0;
    int64_t stepTokens = 0;
    for (int micro = 0; micro < m_config.gradAccum; ++micro) {
      int64_t globalLossTokens = 0, globalTokens = 0;
      Batch batch = nextBatch(globalLossTokens, globalTokens);
      stepTokens += globalTokens;
      // A rank's loss is the mean over its slice's loss tokens. Weighting it by the slice's share
      // of the global batch's loss tokens (x world, undone by the average) makes the averaged
      // gradient that of the global batch's mean loss, as one process computes it.
      const double share =
          m_group ? double(batch.lossTokens) / double(std::max<int64_t>(1, globalLossTokens)) : 1;
      if (m_group && batch.lossTokens == 0) continue;  // nothing to learn here: zero gradient
      torch::Tensor loss;
      {
        AutocastGuard guard(autocast, m_device.type());
        loss = m_recipe.loss(m_model, batch);
      }
      if (m_group) {
        // The step's last backward: its gradients are all-reduced bucket by bucket as it goes.
        if (micro == m_config.gradAccum - 1) m_averager->arm();
        (loss * (share * m_group->world() / double(m_config.gradAccum))).backward();
      } else
        (loss / double(m_config.gradAccum)).backward();
      lossSum += loss.item<double>() * share;
    }
    double allReduceSeconds = NAN;
    if (m_group) {
      // The gradients first: a rank whose last slice had no loss tokens ran no backward, so its
      // buckets start only in finish(), and the loss's all-reduce must come after them on every
      // rank for the collectives to pair up.
      allReduceSeconds = m_averager->finish();
      torch::Tensor sum = torch::tensor({lossSum}, torch::kDouble);
      m_group->allReduceSum(sum);
      lossSum = sum.item<double>();
    }
    const double clip =
        m_config.gradClip > 0 ? m_config.gradClip : std::numeric_limits<double>::infinity();
    const double gradNorm = torch::nn::utils::clip_grad_norm_(m_parameters, clip);
    const double loss = lossSum / m_config.gradAccum;
    if (!std::isfinite(loss) || !std::isfinite(gradNorm)) {
      m_listener.onWarning("loss or gradient is not finite at step " +
                           std::to_string(m_state.step + 1) + " (loss " + std::to_string(loss) +
                           "); stopping. The last good checkpoint is " +
                           (m_lastCheckpoint.empty() ? std::string("none") : m_lastCheckpoint) +
                           "; try a lower optim.lr or optim.grad_clip");
      return TrainOutcome::Diverged;
    }
    m_optimizer->step();
    // A GPU runs the optimizer's kernels asynchronously: the step ends when they do.
    if (m_device.is_cuda()) torch::cuda::synchronize(m_device.index());

    const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
    m_state.step += 1;
    m_state.tokens += stepTokens;
    m_state.wallSeconds = wallSeconds();
    const int threads = m_tuner ? m_tuner->threadsForNextStep() : 0;
    m_listener.onStep(StepReport{m_state.step, maxSteps, m_state.tokens, loss, lr, gradNorm,
                                 double(stepTokens) / seconds, m_state.wallSeconds,
                                 allReduceSeconds, threads});
    if (m_tuner) {
      m_tuner->record(seconds, m_otherLoad.sample());
      if (const std::string note = m_tuner->takeNote(); !note.empty())
        m_listener.onThreads(m_tuner->chosen(), note);
      // Evaluations and checkpoints run at the next step's count.
      if (m_tuner->threadsForNextStep() != threads) m_applyThreads(m_tuner->threadsForNextStep());
    }

    const bool last = m_state.step == maxSteps;
    if (last || (m_config.evalEvery > 0 && m_state.step % m_config.evalEvery == 0))
      m_listener.onEval(evaluate());
    if (last || (m_config.checkpointEvery > 0 && m_state.step % m_config.checkpointEvery == 0))
      saveCheckpoint();
  }
  return TrainOutcome::Finished;
}

double Trainer::wallSeconds() const {
  if (m_segmentStart == Clock::time_point{}) return m_state.wallSeconds;
  return m_segmentBase +
         std::chrono::duration<double>(std::chrono::steady_clock::now() - m_segmentStart).count();
}

// step-<N>/ holds the model (fp32, a Hugging Face folder), optimizer.pt and trainer_state.json.
// It is assembled under a temporary name and renamed, so a checkpoint is complete or absent.
void Trainer::saveCheckpoint() {
  fs::path root(m_checkpointRoot);
  const std::string name = "step-" + std::to_string(m_state.step);
  fs::path tmp = root / ("." + name + ".tmp");
  fs::path final = root / name;
  if (!writesFiles()) {  // rank 0 writes the one checkpoint: every rank holds the same state
    m_lastCheckpoint = final.string();
    return;
  }
  files::createDirectories(root.string());
  fs::remove_all(tmp);
  m_saveModel(tmp.string());
  torch::save(*m_optimizer, (tmp / "optimizer.pt").string());
  m_state.wallSeconds = wallSeconds();
  nlohmann::json state = {{"step", m_state.step},          {"tokens", m_state.tokens},
                          {"epoch", m_state.epoch},        {"cursor", m_state.cursor},
                          {"wall_s", m_state.wallSeconds}, {"seed", m_config.seed}};
  files::writeFileAtomically((tmp / "trainer_state.json").string(), state.dump(2) + "\n");
  fs::remove_all(final);
  fs::rename(tmp, final);
  m_lastCheckpoint = final.string();
  m_listener.onCheckpoint(m_lastCheckpoint, m_state.step);

  // Keep the newest N (at least one until the run has finished: the runner removes the last one
  // of a finished run that keeps none).
  const size_t keep = size_t(std::max(1, m_config.keepCheckpoints));
  std::vector<std::pair<int64_t, fs::path>> existing;
  for (const auto& entry : fs::directory_iterator(root)) {
    std::string n = entry.path().filename().string();
    if (n.rfind("step-", 0) == 0) existing.emplace_back(std::stoll(n.substr(5)), entry.path());
  }
  std::sort(existing.begin(), existing.end());
  for (size_t i = 0; i + keep < existing.size(); ++i) fs::remove_all(existing[i].second);
}

namespace {
nlohmann::json readTrainerState(const std::string& checkpointDir) {
  std::ifstream in(fs::path(checkpointDir) / "trainer_state.json");
  if (!in)
    throw Error("not a training checkpoint (no trainer_state.json)", checkpointDir,
                "pass a checkpoints/step-N folder of a run, or 'latest'");
  nlohmann::json state = nlohmann::json::parse(in, nullptr, false);
  for (const char* key : {"step", "tokens", "epoch", "cursor", "wall_s"})
    if (state.is_discarded() || !state.contains(key) || !state[key].is_number())
      throw Error("trainer_state.json is malformed (no numeric '" + std::string(key) + "')",
                  checkpointDir);
  return state;
}
}  // namespace

int64_t checkpointStep(const std::string& checkpointDir) {
  return readTrainerState(checkpointDir).at("step").get<int64_t>();
}

void Trainer::resumeFrom(const std::string& checkpointDir) {
  fs::path dir(checkpointDir);
  nlohmann::json state = readTrainerState(checkpointDir);
  m_state.step = state.at("step").get<int64_t>();
  m_state.tokens = state.at("tokens").get<int64_t>();
  m_state.epoch = state.at("epoch").get<int64_t>();
  m_state.cursor = state.at("cursor").get<int64_t>();
  m_state.wallSeconds = state.at("wall_s").get<double>();
  // Onto the run's device, wherever the checkpoint was written (a GPU run resumes on the CPU).
  torch::load(*m_optimizer, (dir / "optimizer.pt").string(), m_device);
  m_order = epochOrder(m_train.size(), m_config.seed, m_state.epoch);
  m_lastCheckpoint = checkpointDir;
}

std::optional<uint64_t> checkpointSeed(const std::string& checkpointDir) {
  const nlohmann::json state = readTrainerState(checkpointDir);
  if (!state.contains("seed")) return std::nullopt;
  if (!state["seed"].is_number_unsigned() && !state["seed"].is_number_integer())
    throw Error("trainer_state.json is malformed (seed)", checkpointDir);
  return state["seed"].get<uint64_t>();
}

}  // namespace fp4lab::train
