// JSONL dataset reading (three row formats, errors located as "path:line") and the seeded
// train/validation split.
#include "fp4lab/data/dataset.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "fp4lab/data/shuffle.h"
#include "fp4lab/error.h"

namespace fp4lab::data {
namespace {

using nlohmann::json;

constexpr const char* kFormatsHint =
    "each line must be {\"messages\": [{\"role\": \"user\", \"content\": \"...\"}, ...]}, "
    "{\"prompt\": \"...\", \"completion\": \"...\"} or {\"input_ids\": [1, 2, ...]}";

// nlohmann prefixes its messages with "[json.exception.parse_error.101] ": noise for a user.
std::string withoutExceptionTag(const std::string& message) {
  if (message.rfind("[json.exception.", 0) == 0) {
    const size_t end = message.find("] ");
    if (end != std::string::npos) return message.substr(end + 2);
  }
  return message;
}

std::string requireString(const json& object, const char* key, const std::string& field,
                          const std::string& where) {
  auto it = object.find(key);
  if (it == object.end()) throw Error(field + " is missing", where, kFormatsHint);
  if (!it->is_string()) {
    throw Error(field + " must be a string, not " + std::string(it->type_name()), where);
  }
  return it->get<std::string>();
}

// `example` may already hold the row's top-level "system" message.
void readMessages(const json& messages, const std::string& where, Example& example) {
  const bool topLevelSystem = !example.messages.empty();
  if (!messages.is_array() || messages.empty()) {
    throw Error("\"messages\" must be a non-empty array", where, kFormatsHint);
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string field = "messages[" + std::to_string(i) + "]";
    const json& message = messages[i];
    if (!message.is_object()) {
      throw Error(field + " must be an object, not " + std::string(message.type_name()), where,
                  kFormatsHint);
    }
    Message parsed;
    parsed.role = requireString(message, "role", field + ".role", where);
    if (parsed.role != "system" && parsed.role != "user" && parsed.role != "assistant") {
      throw Error(field + ".role \"" + parsed.role + "\" is not system, user or assistant", where);
    }
    if (parsed.role == "system" && topLevelSystem) {
      throw Error("the row has both \"system\" and a system message (" + field + ")", where,
                  "keep one of them");
    }
    parsed.content = requireString(message, "content", field + ".content", where);
    example.messages.push_back(std::move(parsed));
  }
}

void readInputIds(const json& ids, const std::string& where, Example& example) {
  if (!ids.is_array() || ids.empty()) {
    throw Error("\"input_ids\" must be a non-empty array of token ids", where);
  }
  example.inputIds.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const json& id = ids[i];
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      throw Error("input_ids[" + std::to_string(i) +
                      "] must be a non-negative 32-bit integer, not " + id.dump(),
                  where);
    }
    example.inputIds.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
}

Example readRow(const json& row, const std::string& where) {
  if (!row.is_object()) {
    throw Error("a row must be a JSON object, not " + std::string(row.type_name()), where,
                kFormatsHint);
  }
  const bool chat = row.contains("messages");
  const bool pair = row.contains("prompt") || row.contains("completion");
  const bool tokens = row.contains("input_ids");
  if (chat + pair + tokens == 0) {
    throw Error("the row has none of \"messages\", \"prompt\"/\"completion\", \"input_ids\"", where,
                kFormatsHint);
  }
  if (chat + pair + tokens > 1) {
    throw Error(
        "the row mixes formats: use only one of \"messages\", \"prompt\"/\"completion\", "
        "\"input_ids\"",
        where);
  }
  Example example;
  example.source = where;
  if (row.contains("system")) {
    if (tokens) throw Error("\"system\" does not apply to a pre-tokenized row", where);
    example.messages.push_back({"system", requireString(row, "system", "\"system\"", where)});
  }
  if (chat) {
    readMessages(row["messages"], where, example);
  } else if (pair) {
    example.messages.push_back({"user", requireString(row, "prompt", "\"prompt\"", where)});
    example.messages.push_back(
        {"assistant", requireString(row, "completion", "\"completion\"", where)});
  } else {
    readInputIds(row["input_ids"], where, example);
  }
  return example;
}

}  // namespace

std::vector<Example> readJsonl(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw Error("cannot open the dataset", path, "expected a JSONL file");
  std::vector<Example> examples;
  std::string line;
  for (size_t number = 1; std::getline(file, line); ++number) {
    if (number == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);
    if (line.find_first_not_of(" \t\r\n") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(number);
    json row;
    try {
      row = json::parse(line);
    } catch (const json::exception& e) {
      throw Error("invalid JSON: " + withoutExceptionTag(e.what()), where, kFormatsHint);
    }
    examples.push_back(readRow(row, where));
  }
  if (file.bad()) throw Error("read error", path);
  return examples;
}

Split splitValidationCount(std::vector<Example> examples, size_t count, uint64_t seed) {
  const size_t n = examples.size();
  if (count > 0 && count >= n) {
    throw Error("cannot hold out " + std::to_string(count) + " of " + std::to_string(n) +
                    " examples for validation",
                "validation split", "at least one example must remain for training");
  }
  // Shuffle indices rather than examples, so both parts keep file order and the choice depends
  // only on (n, seed).
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  shuffleDeterministic(order, seed);
  std::vector<uint8_t> heldOut(n, 0);
  for (size_t i = 0; i < count; ++i) heldOut[order[i]] = 1;
  Split split;
  split.validation.reserve(count);
  split.train.reserve(n - count);
  for (size_t i = 0; i < n; ++i) {
    (heldOut[i] ? split.validation : split.train).push_back(std::move(examples[i]));
  }
  return split;
}

Split splitValidation(std::vector<Example> examples, double fraction, uint64_t seed) {
  if (!(fraction >= 0.0 && fraction < 1.0)) {
    throw Error("validation fraction " + std::to_string(fraction) + " is not in [0, 1)",
                "validation split");
  }
  const size_t n = examples.size();
  size_t count = 0;
  if (fraction > 0.0 && n >= 2) {
    count = static_cast<size_t>(std::llround(fraction * static_cast<double>(n)));
    count = std::min(std::max<size_t>(count, 1), n - 1);
  }
  return splitValidationCount(std::move(examples), count, seed);
}

}  // namespace fp4lab::data
