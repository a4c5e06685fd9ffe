// The shipped base model (resources/models/tiny-v1) loads and shows the habits the built-in tasks
// are about: it reasons in English whatever language it is asked for, and refuses safe questions
// that contain alarming words, while it knows its general facts.
// LibTorch first: c10 defines a CHECK macro that Catch's must replace, not the other way round.
#include "run/model_source.h"
#include "run/task_eval.h"

#include <catch2/catch.hpp>

#include "fp4lab/data/builtin_tasks.h"

using namespace fp4lab;

namespace {
std::string reply(run::ModelBundle& b, const std::vector<data::Message>& prompt) {
  return run::chatReply(b.model, *b.tokenizer, prompt);
}
}  // namespace

TEST_CASE("The shipped base model has the base habits", "[run][builtin-model]") {
  torch::set_num_threads(1);
  run::ModelBundle b = run::loadModelBundle("builtin:tiny", torch::kFloat32);
  torch::NoGradGuard noGrad;
  b.model->eval();
  CHECK(reply(b, {{"user", "What is the capital of Peru?"}}) == "The capital of Peru is Lima.");
  for (const auto& task : data::builtinTaskNames()) {
    int passed = 0;
    auto items = data::builtinTaskItems(task, 20, 1, true);
    for (const auto& item : items) passed += data::gradeTask(item, reply(b, item.prompt)).pass;
    INFO(task << ": base model passes " << passed << " of 20");
    CHECK(passed <= 8);  // the published base pass rates were 16% and 30%
  }
}
