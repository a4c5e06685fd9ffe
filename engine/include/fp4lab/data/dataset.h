// JSONL datasets: chat conversations, prompt/completion pairs and pre-tokenized rows, read with
// every problem reported as "file:line"; and the seeded train/validation split.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fp4lab::data {

struct Message {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

// One row. Either `messages` (chat rows) or `inputIds` (pre-tokenized rows) is non-empty.
struct Example {
  std::vector<Message> messages;
  std::vector<int32_t> inputIds;
  std::string source;  // "path:line", for errors raised later (tokenizing, validating ids)
};

// One JSON object per line; blank lines are skipped, a UTF-8 byte order mark is tolerated.
// Row formats (other keys are ignored, so rows may carry ids or metadata):
//   {"messages": [{"role": "user", "content": "..."}, ...], "system": "..."}  system optional,
//       prepended as a system message; roles are system, user, assistant
//   {"prompt": "...", "completion": "...", "system": "..."}  -> [system], user, assistant
//   {"input_ids": [1, 2, 3]}  non-negative 32-bit integers
// A line that is not valid JSON, is not an object, mixes or lacks these formats, has an empty
// "messages", an unknown role, or a value of the wrong type throws fp4lab::Error whose where()
// is "path:line" and whose problem() names the field. A file with no rows gives an empty vector.
std::vector<Example> readJsonl(const std::string& path);

struct Split {
  std::vector<Example> train, validation;
};

// Holds out round(fraction * n) examples, at least 1 when fraction > 0 and at least 1 is always
// left for training (so a tiny dataset never fails; n < 2 holds out nothing). fraction must be in
// [0, 1). Which examples are held out depends only on (n, seed); both parts keep file order.
Split splitValidation(std::vector<Example> examples, double fraction, uint64_t seed);

// Holds out exactly `count` examples; throws fp4lab::Error unless count < n (or count == 0).
Split splitValidationCount(std::vector<Example> examples, size_t count, uint64_t seed);

}  // namespace fp4lab::data
