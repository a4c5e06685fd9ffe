// fp4lab::run::Model: the engine's public model interface over ModelBundle, scoring with the
// trainer's batches and cross-entropy and generating with the KV-cached generator.
#include "fp4lab/run/model.h"

#include <algorithm>

#include "fp4lab/data/chat_template.h"
#include "fp4lab/common/files.h"
#include "fp4lab/error.h"
#include "model/generate.h"
#include "run/model_source.h"
#include "run/task_eval.h"
#include "train/recipe.h"

namespace fp4lab::run {

struct Model::Impl {
  ModelBundle bundle;
  ModelInfo info;
};

Model::Model(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

Model Model::load(const std::string& path, const ModelLoadOptions& options) {
  auto impl = std::make_unique<Impl>();
  // fp32: evaluation and generation of the weights as saved (fp32 master weights for quantized
  // runs), without autocast.
  impl->bundle = loadModelBundle(path, torch::kFloat32, options.seed, options.bf16Weights);
  impl->bundle.model->eval();
  const model::ModelConfig& c = impl->bundle.model->config();
  ModelInfo& info = impl->info;
  info.source = impl->bundle.source;
  info.architecture = model::modelTypeName(c.architecture);
  for (const auto& p : impl->bundle.model->parameters()) info.parameters += p.numel();
  info.vocabSize = c.vocabSize;
  info.contextLength = c.maxPositionEmbeddings;
  info.quantization = impl->bundle.quantization();
  info.quantized = !impl->bundle.quantizers.empty();
  info.hasTokenizer = impl->bundle.hasTokenizer();
  return Model(std::move(impl));
}

FolderImportSummary importModelFolder(const std::string& source, const std::string& outputDir,
                                      bool float32, bool force) {
  if (outputDir.empty()) throw Error("no output folder", "--output-dir", "pass --output-dir OUT");
  const std::string out = files::withoutTrailingSlash(outputDir);
  if (files::exists(out)) {
    if (!files::isDirectory(out))
      throw Error("the output exists and is not a folder", out, "choose another --output-dir");
    if (files::samePath(out, source))
      throw Error("the output folder is the source folder", out, "choose another --output-dir");
    if (!files::listDirectory(out).empty() && !force)
      throw Error("the output folder is not empty", out,
                  "pass --force to replace it, or choose another --output-dir");
  }
  const torch::Dtype dtype = float32 ? torch::kFloat32 : torch::kBFloat16;
  // The decoded weights themselves (no fake quantizers), rounded once into `dtype`.
  ModelBundle bundle = loadModelBundle(source, dtype, 0, /*bf16Weights=*/true);
  FolderImportSummary summary;
  summary.layout = bundle.exportFormat.empty() ? "hf" : bundle.exportFormat;
  summary.architecture = model::architectureName(bundle.model->config().architecture);
  for (const auto& p : bundle.model->parameters()) {
    summary.parameters += p.numel();
    ++summary.tensors;
  }
  bundle.model->mutableConfig().torchDtype = float32 ? "float32" : "bfloat16";
  saveModelBundle(bundle, out, dtype, {});
  return summary;
}

const ModelInfo& Model::info() const {
  return m_impl->info;
}

EvalResult Model::evaluate(const std::vector<data::Example>& rows,
                           const std::function<void(const ExampleScore&)>& onExample) const {
  ModelBundle& b = m_impl->bundle;
  torch::NoGradGuard noGrad;
  const int64_t context = m_impl->info.contextLength;
  EvalResult result;
  result.rows = rows.size();
  double total = 0;
  const std::vector<data::TokenizedExample> tokenized = tokenizeExamples(rows, b);
  for (size_t i = 0; i < rows.size(); ++i) {
    const data::TokenizedExample& t = tokenized[i];
    if (t.ids.size() < 2) continue;
    const int64_t n = int64_t(t.ids.size()) - 1;
    if (n > context)
      throw Error("the row has " + std::to_string(t.ids.size()) +
                      " tokens, more than the model's context of " + std::to_string(context),
                  rows[i].source, "split it, or score a model with a longer context");
    // One row as one sequence of the trainer's batches: inputs, targets where the mask allows.
    data::Sequence sequence{t.ids, t.lossMask};
    const train::Batch batch = train::makeBatch({&sequence}, n, b.model->device());
    if (batch.lossTokens == 0) continue;
    const double loss =
        train::tokenCrossEntropy(b.model->forward(batch.inputs), batch.targets).item<double>();
    total += loss * double(batch.lossTokens);
    result.tokens += batch.lossTokens;
    result.scoredRows += 1;
    if (onExample) onExample({i, rows[i].source, loss, batch.lossTokens});
  }
  result.meanLoss = result.tokens ? total / double(result.tokens) : 0;
  return result;
}

std::string Model::generate(const std::string& prompt, const GenerateOptions& options) const {
  ModelBundle& b = m_impl->bundle;
  if (options.temperature < 0 || !(options.temperature == options.temperature))
    throw Error("the temperature must be >= 0", "generate");
  if (options.maxNewTokens < 1) throw Error("at least one new token is needed", "generate");
  const data::Tokenizer& tokenizer = b.tokenizer("generation");
  const int64_t context = m_impl->info.contextLength;
  auto budget = [&](size_t promptTokens) {
    if (int64_t(promptTokens) >= context)
      throw Error("the prompt has " + std::to_string(promptTokens) +
                      " tokens, the model's whole context of " + std::to_string(context),
                  "generate", "shorten the prompt");
    return int(std::min<int64_t>(options.maxNewTokens, context - int64_t(promptTokens)));
  };
  if (options.raw) {
    const std::vector<int32_t> ids = tokenizer.encode(prompt);
    if (ids.empty()) throw Error("the prompt is empty", "generate", "give some text to continue");
    std::vector<int64_t> out =
        model::generate(b.model, std::vector<int64_t>(ids.begin(), ids.end()), budget(ids.size()),
                        options.temperature, options.seed, b.model->config().stopTokenIds());
    return tokenizer.decode(std::vector<int32_t>(out.begin(), out.end()), true);
  }
  std::vector<data::Message> messages;
  if (!options.system.empty()) messages.push_back({"system", options.system});
  messages.push_back({"user", prompt});
  const data::ChatTemplate chat(tokenizer);
  ReplyOptions reply;
  reply.maxNewTokens = budget(chat.prompt(messages).size());
  reply.temperature = options.temperature;
  reply.seed = options.seed;
  return chatReply(b.model, tokenizer, messages, reply);
}

}  // namespace fp4lab::run
