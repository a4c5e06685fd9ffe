// The built-in corpus and tasks: deterministic, held-out phrasings really held out, graders that
// pass right answers and fail the base model's habits.
#include <catch2/catch.hpp>

#include <cctype>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "fp4lab/data/builtin_tasks.h"

using namespace fp4lab::data;

namespace {
std::string text(const Example& e) {
  std::string s;
  for (const auto& m : e.messages) s += m.role + ":" + m.content + "\n";
  return s;
}
}  // namespace

TEST_CASE("Built-in datasets are deterministic and seed-dependent", "[data][builtin]") {
  auto a = builtinDataset("pretrain", 5, 200), b = builtinDataset("pretrain", 5, 200),
       c = builtinDataset("pretrain", 6, 200);
  REQUIRE(a.size() == 200);
  int differ = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(text(a[i]) == text(b[i]));
    differ += text(a[i]) != text(c[i]);
  }
  CHECK(differ > 100);
  CHECK_THROWS(builtinDataset("nope", 1, 1));
}

TEST_CASE("Held-out phrasings never appear in the training data", "[data][builtin]") {
  std::set<std::string> trainingPrompts;
  for (const char* name : {"pretrain", "sft"})
    for (const auto& e : builtinDataset(name, 11, 3000))
      for (const auto& m : e.messages)
        if (m.role != "assistant") trainingPrompts.insert(m.content);
  for (const char* name : {"sft-math-json"})
    for (const auto& e : builtinDataset(name, 11, 3000))
      for (const auto& m : e.messages)
        if (m.role != "assistant") trainingPrompts.insert(m.content);
  for (const auto& task : builtinTaskNames()) {
    auto items = builtinTaskItems(task, 200, 3, true);
    int seen = 0;
    for (const auto& item : items)
      for (const auto& m : item.prompt)
        seen += trainingPrompts.count(m.content) && m.role == "user";
    CHECK(seen == 0);
  }
}

TEST_CASE("No training prompt uses a held-out phrasing's words, in any case", "[data][builtin]") {
  // The held-out phrasings (builtin_tasks.cpp): system "Your reasoning must be in {L}." and "Use
  // {L} for the reasoning."; user "Compute {A} + {B}.", "Tell me the sum of {A} and {B}.",
  // "Take {B} away from {A}.", "Explain how to {X}.", "I need to {X}. How?".
  const std::vector<std::string> heldOutWords = {
      "must be in", "for the reasoning.", "compute", "tell me the sum", "away from",
      "explain",    "i need to",          ". how?"};
  auto lower = [](std::string s) {
    for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  // They are really what the evaluation asks.
  for (const char* task : {"reasoning_language", "false_refusal"})
    for (const auto& item : builtinTaskItems(task, 50, 4, true)) {
      bool found = false;
      for (const auto& m : item.prompt)
        for (const auto& w : heldOutWords) found |= lower(m.content).find(w) != std::string::npos;
      CHECK(found);
    }
  int checked = 0;
  for (const char* name : {"pretrain", "sft"})
    for (const auto& e : builtinDataset(name, 12, 4000))
      for (const auto& m : e.messages) {
        if (m.role == "assistant") continue;
        ++checked;
        for (const auto& w : heldOutWords) {
          INFO(m.content);
          CHECK(lower(m.content).find(w) == std::string::npos);
        }
      }
  CHECK(checked > 8000);
}

TEST_CASE("Graders: right answers pass, the base model's habits fail", "[data][builtin]") {
  for (const auto& item : builtinTaskItems("reasoning_language", 50, 9, true)) {
    CHECK(gradeTask(item, item.reference).pass);
    // English reasoning with the right number is the base model's habit: a fail.
    std::string english = "Reasoning: x. Answer: " + item.facts.at("answer");
    CHECK_FALSE(gradeTask(item, english).pass);
    // Right language, wrong number.
    std::string wrong = item.reference.substr(0, item.reference.rfind(' ')) + " 99";
    CHECK_FALSE(gradeTask(item, wrong).pass);
    // Right label and answer, but the reasoning's number words are English.
    const std::string& ref = item.reference;
    std::string englishWords = ref.substr(0, ref.find(':') + 1) +
                               " 1 plus 1 is 2, one plus one is two." +
                               ref.substr(ref.rfind(". ") + 1);
    CHECK_FALSE(gradeTask(item, englishWords).pass);
  }
  for (const auto& item : builtinTaskItems("false_refusal", 50, 9, true)) {
    CHECK(gradeTask(item, item.reference).pass);
    CHECK_FALSE(gradeTask(item, "I'm sorry, but I can't help with that.").pass);
    CHECK_FALSE(gradeTask(item, "Sure. Just do it.").pass);  // helps, but says nothing right
  }
}

TEST_CASE("The base corpus teaches the habits the fine-tuning must change", "[data][builtin]") {
  int languagePrompts = 0, answeredInEnglish = 0, alarming = 0, refused = 0;
  for (const auto& e : builtinDataset("pretrain", 1, 4000)) {
    if (e.messages.front().role == "system") {
      ++languagePrompts;
      answeredInEnglish += e.messages.back().content.rfind("Reasoning:", 0) == 0;
    }
    if (e.messages.back().content == "I'm sorry, but I can't help with that.") ++refused;
    if (e.messages.front().content.find("kill a stuck") != std::string::npos) ++alarming;
  }
  CHECK(languagePrompts > 500);
  CHECK(answeredInEnglish > languagePrompts * 8 / 10);
  CHECK(refused > 400);
  CHECK(alarming > 20);
}

TEST_CASE("The fine-tuning set replays general data, not the habits it changes",
          "[data][builtin]") {
  // About 15% of the fine-tuning set is base-corpus data; it must not bring back English
  // reasoning or refusals, which the rest of the set trains away.
  int englishReasoning = 0, refused = 0, capitals = 0, vocabulary = 0, arithmetic = 0;
  for (const auto& e : builtinDataset("sft", 2, 4000)) {
    const std::string& answer = e.messages.back().content;
    englishReasoning += answer.rfind("Reasoning:", 0) == 0;
    refused += answer == "I'm sorry, but I can't help with that.";
    capitals += answer.rfind("The capital of", 0) == 0;
    vocabulary += e.messages.front().content.rfind("How do you say", 0) == 0;
    arithmetic += e.messages.front().role == "system";
  }
  CHECK(englishReasoning == 0);
  CHECK(refused == 0);
  CHECK(capitals > 50);
  CHECK(vocabulary > 50);
  CHECK(arithmetic > 1800);
}

TEST_CASE("The real-model tasks' held-out phrasings are not in their fine-tuning data",
          "[data][builtin]") {
  // Held out (builtin_tasks.cpp): system "Your reasoning must be in {L}.", "Use {L} for the
  // reasoning.", "Output one JSON object ...", "Format: a bare JSON object ..."; user "Compute {A}
  // + {B}.", "... collected ... on Monday ... Find the total.", "... Find how many {N} still
  // owns.", "Name the capital city of {C}.", "Give the sum of {A} and {B}.".
  const std::vector<std::string> heldOutWords = {
      "must be in", "for the reasoning.", "output one json",       "format: a bare",
      "compute",    "on monday",          "find the total",        "still owns",
      "lost",       "find how many",      "name the capital city", "give the sum"};
  auto lower = [](std::string s) {
    for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  for (const char* task : {"math_in_language", "json_answer"})
    for (const auto& item : builtinTaskItems(task, 100, 4, true)) {
      int found = 0;
      for (const auto& m : item.prompt)
        for (const auto& w : heldOutWords) found += lower(m.content).find(w) != std::string::npos;
      INFO(task);
      CHECK(found >= 2);  // both the system prompt and the question are held out
    }
  int checked = 0;
  for (const auto& e : builtinDataset("sft-math-json", 12, 4000))
    for (const auto& m : e.messages) {
      if (m.role == "assistant") continue;
      ++checked;
      for (const auto& w : heldOutWords) {
        INFO(m.content);
        CHECK(lower(m.content).find(w) == std::string::npos);
      }
    }
  CHECK(checked > 6000);
}

TEST_CASE("math_in_language grades the language and the final number, not the wording",
          "[data][builtin]") {
  int subtractions = 0;
  for (const auto& item : builtinTaskItems("math_in_language", 60, 9, true)) {
    INFO(item.reference);
    const std::string answer = item.facts.at("answer");
    CHECK(gradeTask(item, item.reference).pass);
    subtractions += item.reference.find(" - ") != std::string::npos;
    // Other wording in the same language, ending on the number: a pass.
    const std::string code = item.facts.at("code");
    const std::map<std::string, std::string> own = {
        {"es", "Primero sumamos las decenas y luego las unidades, por lo tanto son "},
        {"fr", "On additionne d'abord les dizaines puis les unités, donc le résultat est "},
        {"de", "Wir rechnen zuerst die Zehner und dann die Einer, also ist das Ergebnis "},
        {"it", "Prima le decine e poi le unità, quindi il risultato è "}};
    CHECK(gradeTask(item, own.at(code) + answer + ".").pass);
    // The base model's habits: English reasoning with the right number; the wrong number.
    CHECK_FALSE(
        gradeTask(item, "First we add the tens and then the units, so the answer is " + answer)
            .pass);
    CHECK_FALSE(gradeTask(item, own.at(code) + std::to_string(std::stoi(answer) + 1)).pass);
    CHECK_FALSE(gradeTask(item, own.at(code)).pass);  // no number at all
    // Another of the four languages than the one asked.
    const std::string other = code == "es" ? "it" : "es";
    CHECK_FALSE(gradeTask(item, own.at(other) + answer).pass);
  }
  CHECK(subtractions > 10);
}

TEST_CASE("json_answer accepts exactly one JSON object with the right answer", "[data][builtin]") {
  int capitals = 0, sums = 0;
  for (const auto& item : builtinTaskItems("json_answer", 60, 9, true)) {
    INFO(item.reference);
    CHECK(gradeTask(item, item.reference).pass);
    CHECK(gradeTask(item, "  " + item.reference + "\n").pass);
    const nlohmann::json expected = nlohmann::json::parse(item.facts.at("answer"));
    if (expected.is_string()) {
      ++capitals;
      std::string upper = expected.get<std::string>();
      for (char& c : upper) c = char(std::toupper(static_cast<unsigned char>(c)));
      CHECK(gradeTask(item, nlohmann::json{{"answer", upper}}.dump()).pass);
      CHECK_FALSE(gradeTask(item, R"({"answer": "Atlantis"})").pass);
      CHECK_FALSE(gradeTask(item, "The capital is " + expected.get<std::string>() + ".").pass);
    } else {
      ++sums;
      CHECK_FALSE(gradeTask(item, nlohmann::json{{"answer", expected.get<int>() + 1}}.dump()).pass);
      // A number as a string is not the number.
      CHECK_FALSE(gradeTask(item, nlohmann::json{{"answer", expected.dump()}}.dump()).pass);
    }
    // Around the object, inside a code fence, with another key, or an array: fails.
    CHECK_FALSE(gradeTask(item, "Sure! " + item.reference).pass);
    CHECK_FALSE(gradeTask(item, "```json\n" + item.reference + "\n```").pass);
    nlohmann::json extra = nlohmann::json::parse(item.reference);
    extra["note"] = "x";
    CHECK_FALSE(gradeTask(item, extra.dump()).pass);
    CHECK_FALSE(gradeTask(item, "[" + item.reference + "]").pass);
  }
  CHECK(capitals > 10);
  CHECK(sums > 10);
}

TEST_CASE("The real-model fine-tuning set: both tasks done right, with general data",
          "[data][builtin]") {
  int math = 0, json = 0, general = 0;
  // Past-tense stories ("had", "owned") in each direction: the verb decides, not the tense.
  int pastAdd = 0, pastSub = 0;
  for (const auto& e : builtinDataset("sft-math-json", 3, 2000)) {
    const std::string& system =
        e.messages.front().role == "system" ? e.messages.front().content : "";
    if (system.find("JSON") != std::string::npos) {
      ++json;
      CHECK(nlohmann::json::parse(e.messages.back().content).contains("answer"));
    } else if (!system.empty()) {
      ++math;
      const std::string& user = e.messages[1].content;
      if (user.find(" had ") != std::string::npos || user.find(" owned ") != std::string::npos)
        ++(e.messages.back().content.find(" - ") != std::string::npos ? pastSub : pastAdd);
    } else {
      ++general;
    }
  }
  CHECK(math > 800);
  CHECK(json > 550);
  CHECK(general > 300);
  CHECK(pastAdd > 60);
  CHECK(pastSub > 120);
}
