// The one training loop every recipe runs through (a recipe that does not train, ptq, is
// evaluated and saved at step 0): schedule, micro-batches, BF16 autocast with
// fp32 master weights, clipping, evaluation, checkpoints, NaN detection, stop requests.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fp4lab/common/system.h"
#include "fp4lab/data/packing.h"
#include "fp4lab/run/run_config.h"
#include "model/causal_lm.h"
#include "train/distributed.h"
#include "train/recipe.h"
#include "train/thread_tuner.h"

namespace fp4lab::train {

struct StepReport {
  int64_t step, maxSteps, tokens;
  double loss, lr, gradNorm, tokensPerSecond, wallSeconds;
  double allReduceSeconds = NAN;  // data-parallel runs: the gradient all-reduce of this step
  int threads = 0;                // the CPU threads it ran on (0: not tuned, train.threads=N)
};

struct EvalReport {
  int64_t step, tokens;
  double wallSeconds, valLoss, valPerplexity;
  double valKl = NAN;  // KL(reference || model) per loss token, when a reference is set
};

// How the loop reports; the Runner implements it (HDF5 log, JSON events, progress bar, status).
class TrainerListener {
 public:
  virtual ~TrainerListener() = default;
  virtual void onStep(const StepReport&) {}
  virtual void beforeEval() {}  // an evaluation pass starts (e.g. start measuring activations)
  virtual void onEval(const EvalReport&) {}
  virtual void onCheckpoint(const std::string& path, int64_t step) { (void)path, (void)step; }
  virtual void onWarning(const std::string& message) { (void)message; }
  // train.threads=0 changed the thread count; `note` says what it measured.
  virtual void onThreads(int threads, const std::string& note) { (void)threads, (void)note; }
  virtual bool stopRequested() { return false; }
};

// Position in training: enough to continue exactly where a checkpoint left off.
struct TrainerState {
  int64_t step = 0;
  int64_t tokens = 0;
  int64_t epoch = 0;
  int64_t cursor = 0;      // next sequence within the epoch's permutation
  double wallSeconds = 0;  // wall clock since the run started, earlier segments included
};

enum class TrainOutcome { Finished, Stopped, Diverged };

class Trainer {
 public:
  // `saveModel(dir)` writes the model (fp32) and its tokenizer as a Hugging Face folder.
  Trainer(const run::RunConfig& config, model::CausalLM model, Recipe& recipe,
          std::vector<data::Sequence> train, std::vector<data::Sequence> validation,
          std::string checkpointRoot, TrainerListener& listener,
          std::function<void(const std::string& dir)> saveModel);
  // The model evaluate() measures KL to (normally the BF16 model a quantized run started from).
  void setReference(model::CausalLM reference) { m_reference = std::move(reference); }
  // Data parallelism: the loop takes this rank's slice of every global batch (train.batch_size
  // sequences over all ranks, in the one shuffled order), averages the gradients over the group,
  // shards evaluation, agrees on stopping, and only rank 0 writes checkpoints. Null: one process.
  void setProcessGroup(ProcessGroup* group);
  // train.threads=0: the tuner chooses each step's CPU thread count and `apply` sets it (LibTorch's
  // and the FP4 kernels'); the count in force when run() starts is the tuner's maximum.
  void setThreadTuner(ThreadTuner tuner, std::function<void(int threads)> apply);
  // Loads optimizer moments and the data position from a checkpoint folder (the model passed to
  // the constructor must already hold the checkpoint's weights).
  void resumeFrom(const std::string& checkpointDir);
  TrainOutcome run();
  EvalReport evaluate();
  const TrainerState& state() const { return m_state; }
  std::string lastCheckpoint() const { return m_lastCheckpoint; }

 private:
  // This rank's part of the next micro-batch; `globalLossTokens` / `globalTokens` count the
  // whole micro-batch over every rank.
  Batch nextBatch(int64_t& globalLossTokens, int64_t& globalTokens);
  bool writesFiles() const { return !m_group || m_group->rank() == 0; }
  void saveCheckpoint();
  double wallSeconds() const;  // since the run started, earlier segments included

  const run::RunConfig& m_config;
  model::CausalLM m_model;
  model::CausalLM m_reference{nullptr};
  ProcessGroup* m_group = nullptr;
  std::unique_ptr<GradientAverager> m_averager;  // with m_group: overlapped with the backward
  std::optional<ThreadTuner> m_tuner;
  std::function<void(int)> m_applyThreads;
  OtherCpuLoad m_otherLoad;
  Recipe& m_recipe;
  std::vector<data::Sequence> m_train, m_validation;
  std::string m_checkpointRoot;
  TrainerListener& m_listener;
  std::function<void(const std::string&)> m_saveModel;
  std::unique_ptr<torch::optim::AdamW> m_optimizer;
  std::vector<torch::Tensor> m_parameters;
  std::vector<int64_t> m_order;  // permutation of m_train for m_state.epoch
  TrainerState m_state;
  std::string m_lastCheckpoint;
  torch::Device m_device = torch::kCPU;
  std::chrono::steady_clock::time_point m_segmentStart{};
  double m_segmentBase = 0;
};

// The optimizer step a checkpoint folder was saved at (from its trainer_state.json).
int64_t checkpointStep(const std::string& checkpointDir);

// The run.seed a checkpoint was trained with (its trainer_state.json; checkpoints from before it
// was recorded there are taken to match).
std::optional<uint64_t> checkpointSeed(const std::string& checkpointDir);

}  // namespace fp4lab::train
