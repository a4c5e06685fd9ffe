// run.seed and data.seed: a run repeated at another run.seed sees the same examples, the same
// validation rows and the same task items (so runs at several seeds can be compared on one
// validation set), while data.seed chooses them.
// LibTorch first: c10 defines a CHECK macro that Catch's must replace, not the other way round.
#include "run/model_source.h"

#include <catch2/catch.hpp>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../temp_dir.h"
#include "fp4lab/data/tokenizer.h"
#include "fp4lab/run/runner.h"

using namespace fp4lab;

namespace {

run::RunConfig config(std::vector<std::string> extra) {
  std::vector<std::string> o = {"data.train=builtin:sft", "data.seq_len=64",
                                "data.validation_max=16"};
  o.insert(o.end(), extra.begin(), extra.end());
  return run::RunConfig::fromYamlText("", o);
}

std::vector<std::vector<int32_t>> ids(const std::vector<data::Sequence>& sequences) {
  std::vector<std::vector<int32_t>> out;
  for (const auto& s : sequences) out.push_back(s.ids);
  return out;
}

// The prompts a PTQ run graded (tasks/step-0.jsonl), in order.
std::vector<std::string> gradedPrompts(const std::string& runDir) {
  std::ifstream in(runDir + "/tasks/step-0.jsonl");
  std::vector<std::string> prompts;
  for (std::string line; std::getline(in, line);)
    prompts.push_back(nlohmann::json::parse(line).at("prompt").get<std::string>());
  return prompts;
}

}  // namespace

TEST_CASE("run.seed leaves the examples and the validation split alone; data.seed sets them",
          "[run][seed]") {
  const run::ModelBundle model = run::loadModelBundle("scratch:tiny", torch::kFloat32);
  const run::DataBundle a = run::loadTrainingData(config({"run.seed=1"}), model);
  const run::DataBundle b = run::loadTrainingData(config({"run.seed=2"}), model);
  const run::DataBundle c = run::loadTrainingData(config({"run.seed=1", "data.seed=99"}), model);
  REQUIRE(a.validation.size() > 1);
  CHECK(ids(a.validation) == ids(b.validation));
  CHECK(ids(a.train) == ids(b.train));  // the trainer, not the data, orders by run.seed
  CHECK(ids(a.validation) != ids(c.validation));
  CHECK(ids(a.train) != ids(c.train));
}

TEST_CASE("Task items follow data.seed, not run.seed", "[run][seed]") {
  testing::TempDir tmp("fp4lab-seed-");
  auto ptq = [&](const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> o = {"model.path=scratch:tiny", "recipe.name=ptq",
                                  "quant.format=nvfp4",      "train.threads=1",
                                  "train.eval_batches=1",    "quant.calib_batches=1",
                                  "train.batch_size=2",      "eval.tasks=reasoning_language",
                                  "eval.task_items=6",       "eval.max_new_tokens=4"};
    o.insert(o.end(), extra.begin(), extra.end());
    run::RunOptions options;
    options.runDir = (tmp.path / name).string();
    REQUIRE(run::executeRun(config(o), options).state == RunState::Finished);
    return gradedPrompts(options.runDir);
  };
  const auto a = ptq("a", {"run.seed=1"});
  const auto b = ptq("b", {"run.seed=2"});
  const auto c = ptq("c", {"run.seed=1", "data.seed=99"});
  REQUIRE(a.size() == 6);
  CHECK(a == b);
  CHECK(a != c);
}

TEST_CASE("data.validation=heldout:SOURCE scores other data on the rows SOURCE holds out",
          "[run][seed][data]") {
  const run::ModelBundle model = run::loadModelBundle("scratch:tiny", torch::kFloat32);
  const run::DataBundle inDomain = run::loadTrainingData(config({}), model);
  REQUIRE(inDomain.validation.size() > 1);
  const run::DataBundle other = run::loadTrainingData(
      config({"data.train=builtin:pretrain", "data.validation=heldout:builtin:sft"}), model);
  const run::DataBundle random = run::loadTrainingData(
      config({"data.train=random:tokens", "data.validation=heldout:builtin:sft"}), model);
  CHECK(ids(other.validation) == ids(inDomain.validation));
  CHECK(ids(random.validation) == ids(inDomain.validation));
  CHECK(ids(other.train) != ids(inDomain.train));
  // Another data.seed holds out other rows, as it does for the in-domain run.
  const run::DataBundle otherSeed =
      run::loadTrainingData(config({"data.train=builtin:pretrain",
                                    "data.validation=heldout:builtin:sft", "data.seed=99"}),
                            model);
  CHECK(ids(otherSeed.validation) ==
        ids(run::loadTrainingData(config({"data.seed=99"}), model).validation));
  CHECK(ids(otherSeed.validation) != ids(inDomain.validation));
  // Sources it cannot hold rows out of, and no rows to hold out, are refused by key.
  for (const char* bad : {"data.validation=heldout:", "data.validation=heldout:random:tokens"})
    CHECK_THROWS_WITH(
        run::loadTrainingData(config({bad}), model),
        Catch::Contains("names no data to hold rows out of") && Catch::Contains("data.validation"));
  CHECK_THROWS_WITH(
      run::loadTrainingData(
          config({"data.validation=heldout:builtin:sft", "data.validation_fraction=0"}), model),
      Catch::Contains("holds out no rows") && Catch::Contains("data.validation_fraction"));
}
