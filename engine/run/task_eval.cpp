// chatReply and the generation-based task evaluation.
#include "run/task_eval.h"

#include <algorithm>
#include <chrono>

#include "fp4lab/data/chat_template.h"
#include "fp4lab/error.h"
#include "model/generate.h"

namespace fp4lab::run {

std::string chatReply(model::CausalLM& model, const data::Tokenizer& tokenizer,
                      const std::vector<data::Message>& messages, const ReplyOptions& options) {
  data::ChatTemplate chat(tokenizer);
  const std::vector<int32_t> prompt = chat.prompt(messages);
  std::vector<int64_t> stops;
  for (int32_t s : chat.stopTokens()) stops.push_back(s);
  for (int64_t s : model->config().stopTokenIds()) stops.push_back(s);
  const bool wasTraining = model->is_training();
  model->eval();
  std::vector<int64_t> out =
      model::generate(model, std::vector<int64_t>(prompt.begin(), prompt.end()),
                      options.maxNewTokens, options.temperature, options.seed, stops);
  if (wasTraining) model->train();
  return tokenizer.decode(std::vector<int32_t>(out.begin(), out.end()), true);
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
                          const ReplyOptions& options) {
  checkTaskNames(tasks, "eval.tasks");
  const auto started = std::chrono::steady_clock::now();
  TaskResults results;
  for (const auto& task : tasks) {
    int64_t passed = 0;
    const auto list = data::builtinTaskItems(task, size_t(items), seed, /*heldOut=*/true);
    for (const auto& item : list) {
      TaskItemResult r;
      r.task = task;
      r.prompt = item.prompt.back().content;
      if (item.prompt.front().role == "system") r.system = item.prompt.front().content;
      r.response = chatReply(model, tokenizer, item.prompt, options);
      data::Grade g = data::gradeTask(item, r.response);
      r.pass = g.pass;
      r.reason = g.reason;
      passed += g.pass;
      results.items.push_back(std::move(r));
    }
    results.passRate[task] = list.empty() ? NAN : double(passed) / double(list.size());
  }
  results.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return results;
}

}  // namespace fp4lab::run
