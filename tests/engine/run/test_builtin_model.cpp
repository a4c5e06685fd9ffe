// The shipped base model (resources/models/tiny-v2) loads and shows the habits the built-in tasks
// are about: it reasons in English whatever language it is asked for, and refuses safe questions
// that contain alarming words, while it knows its general facts and its arithmetic (so that
// fine-tuning has to change its language, not teach it to add).
// LibTorch first: c10 defines a CHECK macro that Catch's must replace, not the other way round.
#include "run/model_source.h"
#include "run/task_eval.h"

#include <catch2/catch.hpp>

#include "fp4lab/data/builtin_tasks.h"

using namespace fp4lab;

namespace {
std::string reply(run::ModelBundle& b, const std::vector<data::Message>& prompt) {
  return run::chatReply(b.model, b.tokenizer(), prompt);
}
bool endsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
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

TEST_CASE("The shipped base model knows the tasks' arithmetic in English", "[run][builtin-model]") {
  torch::set_num_threads(1);
  run::ModelBundle b = run::loadModelBundle("builtin:tiny", torch::kFloat32);
  torch::NoGradGuard noGrad;
  b.model->eval();
  int right = 0, asked = 0;
  for (int x = 0; x <= 5; ++x)
    for (int y = 0; y <= 5; y += 2) {
      right += endsWith(
          reply(b, {{"user", "What is " + std::to_string(x) + " plus " + std::to_string(y) + "?"}}),
          "Answer: " + std::to_string(x + y));
      const int z = x + 4;  // differences of 4..9 minus 0, 2, 4
      right += endsWith(reply(b, {{"user", "What is " + std::to_string(z) + " minus " +
                                               std::to_string(y) + "?"}}),
                        "Answer: " + std::to_string(z - y));
      asked += 2;
    }
  INFO("right " << right << " of " << asked);
  CHECK(right >= asked * 3 / 4);
}
