// JSONL reading (formats, "file:line" errors) and the seeded train/validation split.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include <unistd.h>

#include "fp4lab/data/dataset.h"
#include "fp4lab/error.h"

using namespace fp4lab::data;
namespace fs = std::filesystem;

namespace {

std::string fixturePath(const std::string& name) {
  return std::string(FP4LAB_TEST_DATA_DIR) + "/" + name;
}

// A file under a per-process temporary folder, removed with the object.
class TempFile {
 public:
  explicit TempFile(const std::string& content) {
    static std::atomic<int> counter{0};
    const fs::path folder =
        fs::temp_directory_path() / ("fp4lab_test_data_" + std::to_string(getpid()));
    fs::create_directories(folder);
    m_path = (folder / ("rows" + std::to_string(counter++) + ".jsonl")).string();
    std::ofstream(m_path, std::ios::binary) << content;
  }
  ~TempFile() { fs::remove(m_path); }
  const std::string& path() const { return m_path; }

 private:
  std::string m_path;
};

// Reads `content` as a JSONL file and returns the error; fails the test when none is thrown.
fp4lab::Error readError(const std::string& content, int expectedLine) {
  TempFile file(content);
  try {
    readJsonl(file.path());
  } catch (const fp4lab::Error& e) {
    CHECK(e.where() == file.path() + ":" + std::to_string(expectedLine));
    return e;
  }
  FAIL("no error for: " << content);
  throw;  // unreachable
}

std::vector<Example> numbered(size_t n) {
  std::vector<Example> examples(n);
  for (size_t i = 0; i < n; ++i) examples[i].source = "row" + std::to_string(i);
  return examples;
}

std::vector<std::string> sources(const std::vector<Example>& examples) {
  std::vector<std::string> out;
  for (const Example& e : examples) out.push_back(e.source);
  return out;
}

}  // namespace

TEST_CASE("jsonl: the three row formats", "[jsonl]") {
  const std::string path = fixturePath("chat.jsonl");
  const std::vector<Example> examples = readJsonl(path);
  REQUIRE(examples.size() == 5);

  CHECK(examples[0].source == path + ":1");
  REQUIRE(examples[0].messages.size() == 2);
  CHECK(examples[0].messages[0].role == "user");
  CHECK(examples[0].messages[0].content == "What is 2+2?");
  CHECK(examples[0].messages[1].role == "assistant");
  CHECK(examples[0].messages[1].content == "4");
  CHECK(examples[0].inputIds.empty());

  // Line 2 is blank; "system" is prepended; unknown keys ("id") are ignored.
  CHECK(examples[1].source == path + ":3");
  REQUIRE(examples[1].messages.size() == 5);
  CHECK(examples[1].messages[0].role == "system");
  CHECK(examples[1].messages[0].content == "Be brief.");
  CHECK(examples[1].messages[4].content == "Bye!");

  CHECK(examples[2].source == path + ":4");
  REQUIRE(examples[2].messages.size() == 2);
  CHECK(examples[2].messages[0].role == "user");
  CHECK(examples[2].messages[0].content == "Capital of France?");
  CHECK(examples[2].messages[1].role == "assistant");
  CHECK(examples[2].messages[1].content == "Paris");

  // Line 5 holds only spaces.
  CHECK(examples[3].source == path + ":6");
  CHECK(examples[3].messages.empty());
  CHECK(examples[3].inputIds == std::vector<int32_t>{1, 2, 3, 262});

  CHECK(examples[4].messages[1].content == "unicode: 你好 🙂");
  CHECK(examples[4].messages[2].content.empty());
}

TEST_CASE("jsonl: a fixture with an unknown role", "[jsonl]") {
  const std::string path = fixturePath("bad_role.jsonl");
  try {
    readJsonl(path);
    FAIL("accepted role \"tool\"");
  } catch (const fp4lab::Error& e) {
    CHECK(e.where() == path + ":2");
    CHECK_THAT(e.problem(), Catch::Contains("messages[0].role") && Catch::Contains("tool"));
  }
}

TEST_CASE("jsonl: CRLF line ends, a byte order mark, an empty file", "[jsonl]") {
  TempFile crlf(
      "\xEF\xBB\xBF{\"prompt\": \"p\", \"completion\": \"c\"}\r\n\r\n{\"input_ids\": [5]}\r\n");
  const auto examples = readJsonl(crlf.path());
  REQUIRE(examples.size() == 2);
  CHECK(examples[0].messages[1].content == "c");
  CHECK(examples[1].source == crlf.path() + ":3");
  TempFile empty("\n\n");
  CHECK(readJsonl(empty.path()).empty());
}

TEST_CASE("jsonl: malformed lines name the file, the line and the problem", "[jsonl]") {
  const std::string ok = "{\"prompt\": \"p\", \"completion\": \"c\"}\n";
  using Catch::Contains;
  CHECK_THAT(readError(ok + "{\"prompt\": \"p\",\n", 2).problem(), Contains("invalid JSON"));
  CHECK_THAT(readError(ok + ok + "[1, 2]\n", 3).problem(), Contains("JSON object"));
  CHECK_THAT(readError("{\"text\": \"x\"}\n", 1).problem(), Contains("none of"));
  CHECK_THAT(readError("{\"prompt\": \"x\"}\n", 1).problem(), Contains("\"completion\""));
  CHECK_THAT(readError("{\"prompt\": \"x\", \"completion\": 3}\n", 1).problem(),
             Contains("\"completion\" must be a string"));
  CHECK_THAT(readError("{\"messages\": []}\n", 1).problem(), Contains("non-empty"));
  CHECK_THAT(readError("{\"messages\": {\"role\": \"user\"}}\n", 1).problem(),
             Contains("non-empty array"));
  CHECK_THAT(readError("{\"messages\": [\"hi\"]}\n", 1).problem(), Contains("messages[0]"));
  CHECK_THAT(
      readError(
          "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"content\": \"b\"}]}\n", 1)
          .problem(),
      Contains("messages[1].role is missing"));
  CHECK_THAT(readError("{\"messages\": [{\"role\": \"user\", \"content\": null}]}\n", 1).problem(),
             Contains("messages[0].content must be a string"));
  CHECK_THAT(readError("{\"messages\": [{\"role\": \"User\", \"content\": \"x\"}]}\n", 1).problem(),
             Contains("\"User\""));
  CHECK_THAT(readError("{\"system\": \"s\", \"messages\": [{\"role\": \"system\", \"content\": "
                       "\"x\"}]}\n",
                       1)
                 .problem(),
             Contains("both"));
  CHECK_THAT(readError("{\"system\": 1, \"prompt\": \"p\", \"completion\": \"c\"}\n", 1).problem(),
             Contains("\"system\" must be a string"));
  CHECK_THAT(readError("{\"input_ids\": []}\n", 1).problem(), Contains("input_ids"));
  CHECK_THAT(readError("{\"input_ids\": [1, -2]}\n", 1).problem(), Contains("input_ids[1]"));
  CHECK_THAT(readError("{\"input_ids\": [1, 2.5]}\n", 1).problem(), Contains("input_ids[1]"));
  CHECK_THAT(readError("{\"input_ids\": [4294967296]}\n", 1).problem(), Contains("input_ids[0]"));
  CHECK_THAT(
      readError("{\"input_ids\": [1], \"prompt\": \"p\", \"completion\": \"c\"}\n", 1).problem(),
      Contains("mixes formats"));
  // JSON that is not UTF-8.
  CHECK_THAT(readError(ok + "{\"prompt\": \"\xFF\", \"completion\": \"c\"}\n", 2).problem(),
             Contains("invalid JSON"));

  try {
    readJsonl(fixturePath("no_such_file.jsonl"));
    FAIL("opened a missing file");
  } catch (const fp4lab::Error& e) {
    CHECK(e.where() == fixturePath("no_such_file.jsonl"));
  }
}

TEST_CASE("split: sizes, file order, determinism", "[split]") {
  const Split split = splitValidationCount(numbered(10), 3, 7);
  // shuffleDeterministic(0..9, seed 7) = 8 1 5 9 0 4 3 2 6 7: its first three are held out.
  CHECK(sources(split.validation) == std::vector<std::string>{"row1", "row5", "row8"});
  CHECK(sources(split.train) ==
        std::vector<std::string>{"row0", "row2", "row3", "row4", "row6", "row7", "row9"});

  const Split again = splitValidationCount(numbered(10), 3, 7);
  CHECK(sources(again.validation) == sources(split.validation));
  std::set<std::vector<std::string>> chosen;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    chosen.insert(sources(splitValidationCount(numbered(10), 3, seed).validation));
  }
  CHECK(chosen.size() > 10);  // 120 possible subsets; seeds must not collapse onto a few

  const Split none = splitValidationCount(numbered(4), 0, 1);
  CHECK(none.train.size() == 4);
  CHECK(none.validation.empty());
  CHECK_THROWS_AS(splitValidationCount(numbered(4), 4, 1), fp4lab::Error);
  CHECK(splitValidationCount({}, 0, 1).train.empty());
}

TEST_CASE("split: by fraction", "[split]") {
  CHECK(splitValidation(numbered(100), 0.1, 3).validation.size() == 10);
  CHECK(splitValidation(numbered(100), 0.0, 3).validation.empty());
  CHECK(splitValidation(numbered(10), 0.01, 3).validation.size() == 1);  // at least one
  CHECK(splitValidation(numbered(2), 0.9, 3).train.size() == 1);         // at least one left
  CHECK(splitValidation(numbered(1), 0.5, 3).validation.empty());
  // Same seed and size: the fraction split is the count split.
  CHECK(sources(splitValidation(numbered(10), 0.3, 7).validation) ==
        sources(splitValidationCount(numbered(10), 3, 7).validation));
  CHECK_THROWS_AS(splitValidation(numbered(10), 1.0, 3), fp4lab::Error);
  CHECK_THROWS_AS(splitValidation(numbered(10), -0.1, 3), fp4lab::Error);
  CHECK_THROWS_AS(splitValidation(numbered(10), std::nan(""), 3), fp4lab::Error);
}
