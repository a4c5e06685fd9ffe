// A run's validation loss measured again from its folder (fp4lab eval --run).
#include <torch/torch.h>

#include <filesystem>

#include "fp4lab/common/files.h"
#include "fp4lab/common/system.h"
#include "fp4lab/error.h"
#include "fp4lab/kernels/fp4.h"
#include "fp4lab/run/model.h"
#include "fp4lab/run/run_config.h"
#include "run/model_source.h"
#include "run/run_gemm.h"
#include "train/autocast.h"
#include "train/device.h"
#include "train/recipe.h"

namespace fp4lab::run {

namespace fs = std::filesystem;

RunEvaluation evaluateAsRun(const std::string& runDir, const std::string& modelDirIn) {
  const fs::path yaml = fs::path(runDir) / "run.yaml";
  if (!fs::is_regular_file(yaml))
    throw Error("not a run folder: no run.yaml", runDir, "pass the folder fp4lab train wrote");
  const RunConfig config = RunConfig::fromYamlFile(yaml.string());
  const std::string modelDir =
      modelDirIn.empty() ? (fs::path(runDir) / "model").string() : modelDirIn;
  if (!fs::is_directory(modelDir))
    throw Error("the run has no saved model (model/): it has not finished", modelDir,
                "wait for it to finish, or pass a checkpoint: --run RUN MODEL_DIR");
  // As the runner sets up a run: its threads, seed, device, weights in fp32 with the quantizers
  // saved beside them, and the BF16 GEMM this machine chooses for it.
  const int threads = config.threads > 0 ? config.threads : std::max(1, usableCores());
  torch::set_num_threads(threads);
  fp4_set_num_threads(threads);
  torch::manual_seed(config.seed);
  const torch::Device device = train::resolveDevice(config, 0, 1);
  ModelBundle bundle = loadModelBundle(modelDir, torch::kFloat32, config.seed, false);
  bundle.model->to(device);
  if (device.is_cpu() && config.computeDtype == "bf16")
    chooseRunGemm(bundle.model, config, nullptr);
  const DataBundle data = loadTrainingData(config, bundle);
  const std::vector<data::Sequence>& source =
      data.validation.empty() ? data.train : data.validation;
  // Trainer::evaluate's loop, on one process.
  torch::NoGradGuard noGrad;
  bundle.model->eval();
  RunEvaluation out;
  out.model = modelDir;
  double lossSum = 0;
  const int64_t maxSequences =
      std::min<int64_t>(config.evalBatches * config.batchSize, int64_t(source.size()));
  for (int64_t start = 0; start < maxSequences; start += config.batchSize) {
    std::vector<const data::Sequence*> picked;
    for (int64_t i = start; i < std::min<int64_t>(start + config.batchSize, int64_t(source.size()));
         ++i)
      picked.push_back(&source[size_t(i)]);
    const train::Batch batch = train::makeBatch(picked, config.seqLen, device);
    out.sequences += int64_t(picked.size());
    if (batch.lossTokens == 0) continue;
    train::AutocastGuard autocast(config.computeDtype == "bf16", device.type());
    const torch::Tensor logits = bundle.model->forward(batch.inputs);
    lossSum +=
        train::tokenCrossEntropy(logits, batch.targets).item<double>() * double(batch.lossTokens);
    out.tokens += batch.lossTokens;
  }
  if (out.tokens == 0)
    throw Error("the run's validation sequences have no tokens to score", runDir,
                "check data.validation and data.seq_len in its run.yaml");
  out.valLoss = lossSum / double(out.tokens);
  return out;
}

}  // namespace fp4lab::run
