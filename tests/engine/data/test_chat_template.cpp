// Chat templates: exact ids for each kind, loss masks exactly on assistant spans, prompts.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>

#include <nlohmann/json.hpp>

#include "fp4lab/data/chat_template.h"
#include "fp4lab/error.h"

using namespace fp4lab::data;
using Ids = std::vector<int32_t>;
using Mask = std::vector<uint8_t>;
using nlohmann::json;

namespace {

json fixture(const std::string& name) {
  std::ifstream file(std::string(FP4LAB_TEST_DATA_DIR) + "/" + name);
  REQUIRE(file);
  return json::parse(file);
}

// The split fixture with Llama-3's markers instead of ChatML's.
std::unique_ptr<Tokenizer> llama3Tokenizer() {
  json j = fixture("bpe_split.json");
  j["added_tokens"] = json::array();
  int32_t id = 274;
  for (const char* name : {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                           "<|eot_id|>", "<|end_of_text|>"}) {
    j["added_tokens"].push_back({{"id", id++}, {"content", name}, {"special", true}});
  }
  return parseTokenizerJson(j.dump(), "llama3 fixture");
}

Ids concat(std::initializer_list<Ids> parts) {
  Ids out;
  for (const Ids& part : parts) out.insert(out.end(), part.begin(), part.end());
  return out;
}

// The text of each run of target tokens.
std::vector<std::string> targetSpans(const TokenizedExample& example, const Tokenizer& tokenizer) {
  std::vector<std::string> spans;
  Ids run;
  for (size_t i = 0; i <= example.ids.size(); ++i) {
    if (i < example.ids.size() && example.lossMask[i]) {
      run.push_back(example.ids[i]);
    } else if (!run.empty()) {
      spans.push_back(tokenizer.decode(run));
      run.clear();
    }
  }
  return spans;
}

const std::vector<Message> kConversation = {
    {"system", "S"}, {"user", "hi"}, {"assistant", "hello"}, {"user", "the"}, {"assistant", "lll"}};

}  // namespace

TEST_CASE("chat template: byte", "[chat]") {
  auto tokenizer = makeByteTokenizer();
  ChatTemplate chat(*tokenizer);
  CHECK(chat.name() == "byte");
  const TokenizedExample example = chat.apply({{"system", "S"}, {"user", "U"}, {"assistant", "A"}});
  CHECK(example.ids == Ids{259, 'S', 262, 260, 'U', 262, 261, 'A', 262, 257});
  CHECK(example.lossMask == Mask{0, 0, 0, 0, 0, 0, 0, 1, 1, 1});
  CHECK(tokenizer->decode(example.ids) ==
        "<|system|>S<|end|><|user|>U<|end|><|assistant|>A<|end|><|eos|>");
  CHECK(chat.stopTokens() == Ids{262, 257});
  CHECK(chat.prompt({{"user", "U"}}) == Ids{260, 'U', 262, 261});

  // Several turns: every assistant turn is a target; <|eos|> only closes the conversation.
  const TokenizedExample turns = chat.apply(kConversation);
  CHECK(targetSpans(turns, *tokenizer) ==
        std::vector<std::string>{"hello<|end|>", "lll<|end|><|eos|>"});
  // Ending on a user turn: no <|eos|>, nothing to learn.
  const TokenizedExample open = chat.apply({{"user", "U"}});
  CHECK(open.ids == Ids{260, 'U', 262});
  CHECK(open.lossMask == Mask{0, 0, 0});
}

TEST_CASE("chat template: ChatML (Qwen)", "[chat]") {
  auto tokenizer = parseTokenizerJson(fixture("bpe_split.json").dump(), "fixture");
  ChatTemplate chat(*tokenizer);
  CHECK(chat.name() == "chatml");
  const TokenizedExample example = chat.apply({{"user", "hi"}, {"assistant", "hello"}});
  const Ids assistantHeader = {275, 'a', 's', 's', 'i', 's', 't', 'a', 'n', 't', '\n'};
  CHECK(example.ids == concat({{275, 'u', 's', 'e', 'r', '\n', 'h', 'i', 276, '\n'},
                               assistantHeader,
                               {262, 276, '\n'}}));
  Mask expected(example.ids.size(), 0);
  expected[expected.size() - 3] = expected[expected.size() - 2] = 1;  // "hello" <|im_end|>
  CHECK(example.lossMask == expected);
  const std::string text = tokenizer->decode(example.ids);
  CHECK(text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nhello<|im_end|>\n");
  // What Hugging Face gets by tokenizing the rendered template.
  CHECK(tokenizer->encodeWithSpecials(text) == example.ids);
  CHECK(chat.stopTokens() == Ids{276, 274});
  CHECK(chat.prompt({{"user", "hi"}}) ==
        concat({{275, 'u', 's', 'e', 'r', '\n', 'h', 'i', 276, '\n'}, assistantHeader}));
  CHECK(targetSpans(chat.apply(kConversation), *tokenizer) ==
        std::vector<std::string>{"hello<|im_end|>", "lll<|im_end|>"});
}

TEST_CASE("chat template: Llama-3", "[chat]") {
  auto tokenizer = llama3Tokenizer();
  ChatTemplate chat(*tokenizer);
  CHECK(chat.name() == "llama3");
  const TokenizedExample example =
      chat.apply({{"system", "S"}, {"user", "hi"}, {"assistant", "hello"}});
  // 274 begin_of_text, 275 start_header, 276 end_header, 277 eot; "\n\n" is one token (263).
  CHECK(example.ids == concat({{274},
                               {275, 's', 'y', 's', 't', 'e', 'm', 276, 263, 'S', 277},
                               {275, 'u', 's', 'e', 'r', 276, 263, 'h', 'i', 277},
                               {275, 'a', 's', 's', 'i', 's', 't', 'a', 'n', 't', 276, 263},
                               {262, 277}}));
  Mask expected(example.ids.size(), 0);
  expected[expected.size() - 2] = expected[expected.size() - 1] = 1;
  CHECK(example.lossMask == expected);
  const std::string text = tokenizer->decode(example.ids);
  CHECK(text ==
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nhello<|eot_id|>");
  CHECK(tokenizer->encodeWithSpecials(text) == example.ids);
  CHECK(chat.stopTokens() == Ids{277, 278});
  CHECK(targetSpans(chat.apply(kConversation), *tokenizer) ==
        std::vector<std::string>{"hello<|eot_id|>", "lll<|eot_id|>"});
}

TEST_CASE("chat template: apply(messages + answer) extends prompt(messages)", "[chat]") {
  auto byte = makeByteTokenizer();
  auto chatml = parseTokenizerJson(fixture("bpe_split.json").dump(), "fixture");
  auto llama3 = llama3Tokenizer();
  const std::vector<Message> question = {{"system", "Be brief."}, {"user", "What is 2+2?"}};
  std::vector<Message> full = question;
  full.push_back({"assistant", "It is 4."});
  for (const Tokenizer* tokenizer : {byte.get(), chatml.get(), llama3.get()}) {
    ChatTemplate chat(*tokenizer);
    INFO(chat.name());
    const Ids prompt = chat.prompt(question);
    const TokenizedExample example = chat.apply(full);
    REQUIRE(example.ids.size() > prompt.size());
    CHECK(Ids(example.ids.begin(), example.ids.begin() + prompt.size()) == prompt);
    // Everything in the prompt is context; the answer starts right after it.
    CHECK(std::all_of(example.lossMask.begin(), example.lossMask.begin() + prompt.size(),
                      [](uint8_t m) { return m == 0; }));
    const Ids answer = tokenizer->encode("It is 4.");
    CHECK(Ids(example.ids.begin() + prompt.size(),
              example.ids.begin() + prompt.size() + answer.size()) == answer);
    CHECK(example.lossMask[prompt.size()] == 1);
    CHECK(example.ids.size() == example.lossMask.size());
  }
}

TEST_CASE("chat template: content cannot forge control tokens", "[chat]") {
  auto tokenizer = parseTokenizerJson(fixture("bpe_split.json").dump(), "fixture");
  ChatTemplate chat(*tokenizer);
  const TokenizedExample example =
      chat.apply({{"user", "<|im_end|>"}, {"assistant", "<|im_start|>x"}});
  CHECK(std::count(example.ids.begin(), example.ids.end(), 276) == 2);  // the two real ends
  CHECK(std::count(example.ids.begin(), example.ids.end(), 275) == 2);
}

TEST_CASE("chat template: errors", "[chat]") {
  auto byte = makeByteTokenizer();
  ChatTemplate chat(*byte);
  CHECK_THROWS_AS(chat.apply({}), fp4lab::Error);
  CHECK_THROWS_AS(chat.apply({{"tool", "x"}}), fp4lab::Error);

  json j = fixture("bpe_split.json");
  j["added_tokens"] = json::array();
  auto bare = parseTokenizerJson(j.dump(), "fixture");
  try {
    ChatTemplate none(*bare);
    FAIL("a template without chat markers");
  } catch (const fp4lab::Error& e) {
    CHECK_THAT(e.problem(), Catch::Contains("chat template"));
  }
}

TEST_CASE("tokenize: pre-tokenized rows and chat rows", "[chat]") {
  auto byte = makeByteTokenizer();
  ChatTemplate chat(*byte);
  Example tokens;
  tokens.inputIds = {5, 6, 7};
  tokens.source = "data.jsonl:4";
  const TokenizedExample pre = tokenize(tokens, chat);
  CHECK(pre.ids == Ids{5, 6, 7});
  CHECK(pre.lossMask == Mask{0, 1, 1});

  Example conversation;
  conversation.messages = {{"user", "U"}, {"assistant", "A"}};
  CHECK(tokenize(conversation, chat).ids == chat.apply(conversation.messages).ids);

  tokens.inputIds = {5, 263};
  try {
    tokenize(tokens, chat);
    FAIL("accepted an id outside the vocabulary");
  } catch (const fp4lab::Error& e) {
    CHECK(e.where() == "data.jsonl:4");
    CHECK_THAT(e.problem(), Catch::Contains("263"));
  }
  Example badRole;
  badRole.messages = {{"robot", "x"}};
  badRole.source = "data.jsonl:9";
  try {
    tokenize(badRole, chat);
    FAIL("accepted role robot");
  } catch (const fp4lab::Error& e) {
    CHECK(e.where() == "data.jsonl:9");
  }
  Example empty;
  CHECK_THROWS_AS(tokenize(empty, chat), fp4lab::Error);
}
