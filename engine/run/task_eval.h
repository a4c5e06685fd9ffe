// Task evaluation by generation: the model answers each held-out task prompt (greedy by default)
// and the task's grader passes or fails the answer. Also the one helper that turns chat messages
// into a reply, shared by `fp4lab generate`, the task evaluation and the tests.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fp4lab/data/builtin_tasks.h"
#include "fp4lab/data/tokenizer.h"
#include "model/causal_lm.h"

namespace fp4lab::run {

struct ReplyOptions {
  int maxNewTokens = 96;
  double temperature = 0;  // 0: greedy
  uint64_t seed = 0;
};

// The model's reply to `messages` (system/user turns) under the tokenizer's chat template,
// decoded without special tokens. Runs without gradients and in eval mode (restored after).
std::string chatReply(model::CausalLM& model, const data::Tokenizer& tokenizer,
                      const std::vector<data::Message>& messages, const ReplyOptions& options = {});

struct TaskItemResult {
  std::string task, system, prompt, response;  // system: the system message, when there is one
  int64_t index = 0;                           // the item's place in its task's held-out list
  bool pass = false;
  std::string reason;
};
struct TaskResults {
  std::map<std::string, double> passRate;  // task -> fraction of items passed
  std::vector<TaskItemResult> items;
  double seconds = 0;
};

// `items` held-out items of each task (the same items for every model given the same seed).
// Sharded (a data-parallel run's rank `shard` of `shards`): only the items whose index is `shard`
// modulo `shards`; mergeTaskShards puts the ranks' answers back together. Throws fp4lab::Error
// naming an unknown task.
TaskResults evaluateTasks(model::CausalLM& model, const data::Tokenizer& tokenizer,
                          const std::vector<std::string>& tasks, int64_t items, uint64_t seed,
                          const ReplyOptions& options = {}, int shard = 0, int shards = 1);

// The answers of every shard as one evaluation: in the tasks' order and each task's item order,
// with the pass rates over all of them (NaN for a task without items).
TaskResults mergeTaskShards(const std::vector<std::string>& tasks,
                            std::vector<TaskItemResult> items, double seconds);

// Checks that every name is a built-in task; throws fp4lab::Error (key `where`) otherwise.
void checkTaskNames(const std::vector<std::string>& tasks, const std::string& where);

}  // namespace fp4lab::run
