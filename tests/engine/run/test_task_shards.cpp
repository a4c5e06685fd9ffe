// A data-parallel task evaluation (run/task_eval.h): rank r of N grades the items whose index is r
// mod N, and mergeTaskShards puts the ranks' answers back into one evaluation. Merged shards must
// be exactly what one process grades: the same items in the same order, the same answers, the same
// pass rates. Sampled replies (temperature > 0) are generated item by item from one seed, so they
// do not depend on which items share a batch, and can be compared exactly.
#include "run/model_source.h"
#include "run/task_eval.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>

using namespace fp4lab;

TEST_CASE("task shards: merged, they are the evaluation one process makes", "[run][tasks]") {
  torch::set_num_threads(1);
  run::ModelBundle b = run::loadModelBundle("builtin:tiny", torch::kFloat32);
  const std::vector<std::string> tasks = {"json_answer", "false_refusal"};
  run::ReplyOptions options;
  options.maxNewTokens = 24;
  options.temperature = 0.8;
  options.seed = 5;
  const int64_t items = 7;
  const run::TaskResults whole =
      run::evaluateTasks(b.model, b.tokenizer(), tasks, items, 3, options);
  REQUIRE(whole.items.size() == 14);
  for (int shards : {2, 3, 8}) {
    std::vector<run::TaskItemResult> gathered;
    for (int shard = shards - 1; shard >= 0; --shard) {  // any order of arrival
      const run::TaskResults part =
          run::evaluateTasks(b.model, b.tokenizer(), tasks, items, 3, options, shard, shards);
      for (const auto& item : part.items) {
        INFO("shard " << shard << " of " << shards << ": item " << item.index);
        CHECK(item.index % shards == shard);
      }
      gathered.insert(gathered.end(), part.items.begin(), part.items.end());
    }
    const run::TaskResults merged = run::mergeTaskShards(tasks, gathered, 0);
    REQUIRE(merged.items.size() == whole.items.size());
    for (size_t i = 0; i < whole.items.size(); ++i) {
      INFO(shards << " shards, item " << i);
      CHECK(merged.items[i].task == whole.items[i].task);
      CHECK(merged.items[i].index == whole.items[i].index);
      CHECK(merged.items[i].system == whole.items[i].system);
      CHECK(merged.items[i].prompt == whole.items[i].prompt);
      CHECK(merged.items[i].response == whole.items[i].response);
      CHECK(merged.items[i].pass == whole.items[i].pass);
    }
    for (const auto& task : tasks) CHECK(merged.passRate.at(task) == whole.passRate.at(task));
  }
  // (The base model fails every held-out item, so the pass rates compared above are 0: the next
  // test case counts passes.)
}

TEST_CASE("task shards: merging orders by task, then item, and counts every item", "[run][tasks]") {
  std::vector<run::TaskItemResult> items;
  // Task b: items 0-4, passes at 1 and 3; task a: items 0-2, passes at 0.
  for (int i = 0; i < 5; ++i)
    items.push_back({"b", "", "pb" + std::to_string(i), "r", i, i % 2 == 1, ""});
  for (int i = 0; i < 3; ++i)
    items.push_back({"a", "", "pa" + std::to_string(i), "r", i, i == 0, ""});
  std::mt19937 rng(7);
  std::shuffle(items.begin(), items.end(), rng);
  const run::TaskResults merged = run::mergeTaskShards({"b", "a", "c"}, items, 1.5);
  REQUIRE(merged.items.size() == 8);
  for (int i = 0; i < 8; ++i) {
    const std::string task = i < 5 ? "b" : "a";
    const int index = i < 5 ? i : i - 5;
    CHECK(merged.items[size_t(i)].task == task);
    CHECK(merged.items[size_t(i)].index == index);
    CHECK(merged.items[size_t(i)].prompt == "p" + task + std::to_string(index));
  }
  CHECK(merged.passRate.at("b") == 2.0 / 5.0);
  CHECK(merged.passRate.at("a") == 1.0 / 3.0);
  CHECK(std::isnan(merged.passRate.at("c")));  // a task without items
  CHECK(merged.seconds == 1.5);
}
