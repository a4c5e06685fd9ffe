// chatReply and the generation-based task evaluation.
#include "run/task_eval.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include "fp4lab/data/chat_template.h"
#include "fp4lab/error.h"
#include "model/generate.h"

namespace fp4lab::run {

namespace {

std::vector<int64_t> stopTokens(model::CausalLM& model, const data::ChatTemplate& chat) {
  std::vector<int64_t> stops;
  for (int32_t s : chat.stopTokens()) stops.push_back(s);
  for (int64_t s : model->config().stopTokenIds()) stops.push_back(s);
  return stops;
}

std::vector<int64_t> promptIds(const data::ChatTemplate& chat,
                               const std::vector<data::Message>& messages) {
  const std::vector<int32_t> prompt = chat.prompt(messages);
  return std::vector<int64_t>(prompt.begin(), prompt.end());
}

std::string decode(const data::Tokenizer& tokenizer, const std::vector<int64_t>& ids) {
  return tokenizer.decode(std::vector<int32_t>(ids.begin(), ids.end()), true);
}

// Eval mode for the scope, the caller's mode restored after.
struct EvalModeGuard {
  model::CausalLM& model;
  bool wasTraining;
  explicit EvalModeGuard(model::CausalLM& m) : model(m), wasTraining(m->is_training()) {
    model->eval();
  }
  ~EvalModeGuard() {
    if (wasTraining) model->train();
  }
};

// Greedy replies to many prompts: prompts of equal token length decode together in batches, one
// forward per new token for the whole batch.
std::vector<std::string> greedyReplies(model::CausalLM& model, const data::Tokenizer& tokenizer,
                                       const std::vector<std::vector<data::Message>>& prompts,
                                       int maxNewTokens) {
  constexpr size_t kMaxBatch = 64;
  data::ChatTemplate chat(tokenizer);
  const std::vector<int64_t> stops = stopTokens(model, chat);
  std::vector<std::vector<int64_t>> ids;
  std::map<size_t, std::vector<size_t>> byLength;
  for (size_t i = 0; i < prompts.size(); ++i) {
    ids.push_back(promptIds(chat, prompts[i]));
    byLength[ids.back().size()].push_back(i);
  }
  EvalModeGuard evalMode(model);
  std::vector<std::string> replies(prompts.size());
  for (const auto& [length, members] : byLength) {
    for (size_t start = 0; start < members.size(); start += kMaxBatch) {
      const size_t end = std::min(members.size(), start + kMaxBatch);
      std::vector<std::vector<int64_t>> batch;
      for (size_t k = start; k < end; ++k) batch.push_back(ids[members[k]]);
      const auto out = model::generateGreedyBatch(model, batch, maxNewTokens, stops);
      for (size_t k = start; k < end; ++k) replies[members[k]] = decode(tokenizer, out[k - start]);
    }
  }
  return replies;
}

}  // namespace

std::string chatReply(model::CausalLM& model, const data::Tokenizer& tokenizer,
                      const std::vector<data::Message>& messages, const ReplyOptions& options) {
  data::ChatTemplate chat(tokenizer);
  EvalModeGuard evalMode(model);
  return decode(tokenizer,
                model::generate(model, promptIds(chat, messages), options.maxNewTokens,
                                options.temperature, options.seed, stopTokens(model, chat)));
}

void checkTaskNames(const std::vector<std::string>& tasks, const std::string& where) {
  const std::vector<std::string> known = data::builtinTaskNames();
  for (const auto& t : tasks) {
    if (std::find(known.begin(), known.end(), t) != known.end()) continue;
    std::string list;
    for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
    throw Error("unknown task '" + t + "'", where, "the built-in tasks are " + list);
  }
}

TaskResults evaluateTasks(model::CausalLM& model, const data::Tokenizer& tokenizer,
                          const std::vector<std::string>& tasks, int64_t items, uint64_t seed,
                          const ReplyOptions& options, int shard, int shards) {
  checkTaskNames(tasks, "eval.tasks");
  const auto started = std::chrono::steady_clock::now();
  std::vector<TaskItemResult> results;
  for (const auto& task : tasks) {
    const auto all = data::builtinTaskItems(task, size_t(items), seed, /*heldOut=*/true);
    std::vector<size_t> mine;
    for (size_t i = size_t(shard); i < all.size(); i += size_t(shards)) mine.push_back(i);
    std::vector<std::string> replies;
    if (options.temperature == 0) {
      std::vector<std::vector<data::Message>> prompts;
      for (size_t i : mine) prompts.push_back(all[i].prompt);
      replies = greedyReplies(model, tokenizer, prompts, options.maxNewTokens);
    } else {
      for (size_t i : mine) replies.push_back(chatReply(model, tokenizer, all[i].prompt, options));
    }
    for (size_t k = 0; k < mine.size(); ++k) {
      const auto& item = all[mine[k]];
      TaskItemResult r;
      r.task = task;
      r.index = int64_t(mine[k]);
      r.prompt = item.prompt.back().content;
      if (item.prompt.front().role == "system") r.system = item.prompt.front().content;
      r.response = replies[k];
      data::Grade g = data::gradeTask(item, r.response);
      r.pass = g.pass;
      r.reason = g.reason;
      results.push_back(std::move(r));
    }
  }
  return mergeTaskShards(
      tasks, std::move(results),
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
}

TaskResults mergeTaskShards(const std::vector<std::string>& tasks,
                            std::vector<TaskItemResult> items, double seconds) {
  auto position = [&](const std::string& task) {
    return std::find(tasks.begin(), tasks.end(), task) - tasks.begin();
  };
  std::stable_sort(items.begin(), items.end(), [&](const auto& a, const auto& b) {
    const auto pa = position(a.task), pb = position(b.task);
    return pa != pb ? pa < pb : a.index < b.index;
  });
  TaskResults results;
  for (const auto& task : tasks) {
    int64_t passed = 0, total = 0;
    for (const auto& item : items)
      if (item.task == task) passed += item.pass, ++total;
    results.passRate[task] = total == 0 ? NAN : double(passed) / double(total);
  }
  results.items = std::move(items);
  results.seconds = seconds;
  return results;
}

}  // namespace fp4lab::run
