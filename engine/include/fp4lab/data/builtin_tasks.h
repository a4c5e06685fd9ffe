// The built-in corpus and tasks: a seeded generator the project owns, so the tiny base model,
// its fine-tuning data and the task evaluations need nothing downloaded. The two tasks mirror
// NVIDIA's gpt-oss fine-tuning study at laptop scale:
//   reasoning_language: the system prompt asks for the reasoning in Spanish, French, German or
//     Italian; the answer must reason in that language and get a small sum or difference right.
//   false_refusal: a safe question with an alarming word ("how do I kill a stuck process");
//     the base model refuses, the answer must help and say the right thing.
// Two more for a real pretrained model (SmolLM2-135M-Instruct), graded on the answer and the
// language rather than a template:
//   math_in_language: a two-digit word problem, the reasoning asked in Spanish, French, German or
//     Italian; the reply must be in that language (by its marker words) and end on the result.
//   json_answer: a capital or a small sum, the system prompt demanding a bare JSON object
//     {"answer": ...}; the whole reply must be exactly that, with the right value.
// Validation items use held-out phrasings that no training example contains.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fp4lab/data/dataset.h"

namespace fp4lab::data {

struct TaskItem {
  std::string task;             // one of builtinTaskNames()
  std::vector<Message> prompt;  // system/user messages; the model writes the assistant turn
  std::string reference;        // what a correct answer says (for reports)
  std::map<std::string, std::string> facts;  // grader inputs: language, answer, key phrase
};

struct Grade {
  bool pass = false;
  std::string reason;  // why it failed (empty on pass)
};

// Datasets: "pretrain" (the base model's corpus: reasons in English whatever it is asked, refuses
// safe questions with alarming words), "sft" (the fine-tuning data for both tasks, with a replay
// of general data), "tasks-val" (held-out phrasings of those two tasks, with reference answers as
// assistant turns), "sft-math-json" (the fine-tuning data of math_in_language and json_answer, with
// general data).
std::vector<Example> builtinDataset(const std::string& name, uint64_t seed, size_t count);
std::vector<std::string> builtinDatasetNames();

std::vector<std::string> builtinTaskNames();
// `count` evaluation items of one task, from held-out phrasings when `heldOut`.
std::vector<TaskItem> builtinTaskItems(const std::string& task, size_t count, uint64_t seed,
                                       bool heldOut = true);
Grade gradeTask(const TaskItem& item, const std::string& response);

}  // namespace fp4lab::data
