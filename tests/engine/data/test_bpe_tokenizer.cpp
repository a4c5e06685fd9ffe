// Byte-level BPE from tokenizer.json, against the hand-made fixtures of data/make_fixtures.py:
// ids 0..255 are the bytes, merge rank r makes id 256 + r, 273 = "hel" (vocabulary only),
// 274..277 = <|endoftext|>, <|im_start|>, <|im_end|> (special), <think> (not special).
// Merges by rank: " t" "ll" "ell" "he" " the" "hell" "hello" "\n\n" "  " "th" "12" "34" "123"
// "é" (C3 A9) E4BD "你" (E4 BD A0) "'S".
#include <catch2/catch.hpp>

#include <fstream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "fp4lab/data/tokenizer.h"
#include "fp4lab/error.h"

using namespace fp4lab::data;
using Ids = std::vector<int32_t>;
using nlohmann::json;

namespace {

std::string fixturePath(const std::string& name) {
  return std::string(FP4LAB_TEST_DATA_DIR) + "/" + name;
}

json fixture(const std::string& name) {
  std::ifstream file(fixturePath(name));
  REQUIRE(file);
  return json::parse(file);
}

std::unique_ptr<Tokenizer> fromJson(const json& j) {
  return parseTokenizerJson(j.dump(), "test");
}

// The Error's problem() for a tokenizer.json that should be refused.
std::string loadError(const json& j) {
  try {
    fromJson(j);
  } catch (const fp4lab::Error& e) {
    CHECK(e.where() == "test");
    return e.problem();
  }
  FAIL("the tokenizer.json was accepted");
  return {};
}

// Random valid UTF-8: ASCII (letters, digits, punctuation, whitespace runs), Latin-1, CJK,
// emoji, combining marks, and the fixture's special strings typed as text.
std::string randomUtf8(std::mt19937& rng) {
  static const std::vector<std::string> atoms = {"a",
                                                 "Z",
                                                 "e",
                                                 "l",
                                                 "h",
                                                 "t",
                                                 " ",
                                                 "  ",
                                                 "\n",
                                                 "\n\n",
                                                 "\t",
                                                 "\r\n",
                                                 "1",
                                                 "2",
                                                 "3",
                                                 "4",
                                                 "'",
                                                 "'s",
                                                 "'S",
                                                 "!",
                                                 "?",
                                                 ".",
                                                 "_",
                                                 "é",
                                                 "ß",
                                                 "ñ",
                                                 "你",
                                                 "好",
                                                 "世",
                                                 "🙂",
                                                 "😀",
                                                 "\xCC\x81",
                                                 "ـ",
                                                 "ا",
                                                 "Ω",
                                                 "<|im_end|>",
                                                 "<|endoftext|>",
                                                 "<think>",
                                                 "hello",
                                                 " the",
                                                 "\xC2\xA0"};
  std::string text;
  const int length = std::uniform_int_distribution<int>(0, 40)(rng);
  for (int i = 0; i < length; ++i) {
    if (rng() % 8 == 0) {  // any code point, surrogates excluded
      uint32_t cp = std::uniform_int_distribution<uint32_t>(1, 0x10FFFF)(rng);
      if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;
      if (cp < 0x80) {
        text += static_cast<char>(cp);
      } else if (cp < 0x800) {
        text += static_cast<char>(0xC0 | (cp >> 6));
        text += static_cast<char>(0x80 | (cp & 0x3F));
      } else if (cp < 0x10000) {
        text += static_cast<char>(0xE0 | (cp >> 12));
        text += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        text += static_cast<char>(0x80 | (cp & 0x3F));
      } else {
        text += static_cast<char>(0xF0 | (cp >> 18));
        text += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        text += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        text += static_cast<char>(0x80 | (cp & 0x3F));
      }
    } else {
      text += atoms[rng() % atoms.size()];
    }
  }
  return text;
}

}  // namespace

TEST_CASE("bpe: loads the fixture and reports its ids", "[bpe]") {
  auto tokenizer = loadTokenizerJson(fixturePath("bpe_split.json"));
  CHECK(tokenizer->kind() == "bpe");
  CHECK(tokenizer->vocabSize() == 278);
  CHECK(tokenizer->specialToken("<|im_start|>") == 275);
  CHECK(tokenizer->specialToken("<|im_end|>") == 276);
  CHECK(tokenizer->specialToken("<think>") == 277);
  CHECK_FALSE(tokenizer->specialToken("<|eot_id|>"));
  CHECK(tokenizer->isSpecial(276));
  CHECK_FALSE(tokenizer->isSpecial(277));  // added, but special: false
  CHECK_FALSE(tokenizer->isSpecial(262));
  CHECK(tokenizer->eosId() == 274);  // <|endoftext|>
  CHECK(tokenizer->padId() == 274);
  CHECK_FALSE(tokenizer->bosId());  // no post_processor
}

TEST_CASE("bpe: merges apply by rank, leftmost first", "[bpe]") {
  auto tokenizer = loadTokenizerJson(fixturePath("bpe_split.json"));
  // h e l l o: "ll" (rank 1) < "ell" (2) < "hell" (5) < "hello" (6).
  CHECK(tokenizer->encode("hello") == Ids{262});
  // "he" (rank 3) beats "th" (rank 9), and there is no "t he": t + he, not th + e.
  CHECK(tokenizer->encode("the") == Ids{116, 259});
  // " t" (0), then "he" (3), then " the" (4).
  CHECK(tokenizer->encode(" the") == Ids{260});
  // Two "ll" candidates of the same rank: the leftmost wins.
  CHECK(tokenizer->encode("lll") == Ids{257, 'l'});
  // "hel" is in the vocabulary but no merge makes it.
  CHECK(tokenizer->encode("hel") == Ids{259, 'l'});
  // "there": he merges, nothing else does.
  CHECK(tokenizer->encode("there") == Ids{116, 259, 'r', 'e'});
  CHECK(tokenizer->encode("").empty());
}

TEST_CASE("bpe: spaces and newlines (Ġ, Ċ) follow the Split regex", "[bpe]") {
  auto tokenizer = loadTokenizerJson(fixturePath("bpe_split.json"));
  // " hello" is one piece; there is no "Ġ hello" merge.
  CHECK(tokenizer->encode(" hello") == Ids{' ', 262});
  CHECK(tokenizer->encode("the hello") == Ids{116, 259, ' ', 262});
  // \s*[\r\n]+ takes both newlines as one piece, and "ĊĊ" (rank 7) merges them.
  CHECK(tokenizer->encode("hi\n\nthere") == Ids{'h', 'i', 263, 116, 259, 'r', 'e'});
  // \s+(?!\S) leaves the last space to the word: "x", " ", " y"; ĠĠ cannot merge across pieces.
  CHECK(tokenizer->encode("x  y") == Ids{'x', ' ', ' ', 'y'});
  // Trailing spaces are one piece: ĠĠ then Ġ.
  CHECK(tokenizer->encode("a   ") == Ids{'a', 264, ' '});
}

TEST_CASE("bpe: the Split regex and GPT-2's ByteLevel regex cut differently", "[bpe]") {
  auto split = loadTokenizerJson(fixturePath("bpe_split.json"));
  auto gpt2 = loadTokenizerJson(fixturePath("bpe_gpt2.json"));
  // \p{N}{1,3}: "123" + "4"; GPT-2's ?\p{N}+ keeps "1234" whole, where "12" and "34" win.
  CHECK(split->encode("1234") == Ids{268, '4'});
  CHECK(gpt2->encode("1234") == Ids{266, 267});
  // (?i:'s) matches "'S"; GPT-2's 's is case-sensitive, so ' and S are separate pieces.
  CHECK(split->encode("IT'S") == Ids{'I', 'T', 272});
  CHECK(gpt2->encode("IT'S") == Ids{'I', 'T', '\'', 'S'});
  // GPT-2's \s+(?!\S) leaves one newline to the next piece; no "ĊĊ" merge then.
  CHECK(gpt2->encode("hi\n\nthere") == Ids{'h', 'i', '\n', '\n', 116, 259, 'r', 'e'});
  CHECK(gpt2->encode(" the hello") == Ids{260, ' ', 262});
}

TEST_CASE("bpe: unicode text", "[bpe]") {
  auto tokenizer = loadTokenizerJson(fixturePath("bpe_split.json"));
  CHECK(tokenizer->encode("café") == Ids{'c', 'a', 'f', 269});
  // 你 = E4 BD A0 (E4BD, then 你); 好 = E5 A5 BD has no merges.
  CHECK(tokenizer->encode("你好") == Ids{271, 0xE5, 0xA5, 0xBD});
  CHECK(tokenizer->encode(" 你") == Ids{' ', 271});
  CHECK(tokenizer->decode({271, 0xE5, 0xA5, 0xBD}) == "你好");
  CHECK_THROWS_AS(tokenizer->encode("bad \xFF byte"), fp4lab::Error);
}

TEST_CASE("bpe: special tokens only with encodeWithSpecials", "[bpe]") {
  auto tokenizer = loadTokenizerJson(fixturePath("bpe_split.json"));
  const Ids plain = tokenizer->encode("<|im_end|>");
  CHECK(plain == Ids{'<', '|', 'i', 'm', '_', 'e', 'n', 'd', '|', '>'});
  CHECK(tokenizer->decode(plain) == "<|im_end|>");
  CHECK(tokenizer->encodeWithSpecials("<|im_start|>user\nhi<|im_end|>") ==
        Ids{275, 'u', 's', 'e', 'r', '\n', 'h', 'i', 276});
  // Non-special added tokens are matched by both, as in Hugging Face.
  CHECK(tokenizer->encode("a<think>b") == Ids{'a', 277, 'b'});
  CHECK(tokenizer->encodeWithSpecials("a<think>b") == Ids{'a', 277, 'b'});
  // Text either side of an added token is pre-tokenized on its own: "hel" + "lo", not "hello".
  CHECK(tokenizer->encodeWithSpecials("hel<|endoftext|>lo") == Ids{259, 'l', 274, 'l', 'o'});
}

TEST_CASE("bpe: decode", "[bpe]") {
  auto tokenizer = loadTokenizerJson(fixturePath("bpe_split.json"));
  CHECK(tokenizer->decode({259, 276}) == "he<|im_end|>");
  CHECK(tokenizer->decode({259, 276}, true) == "he");
  CHECK(tokenizer->decode({277}, true) == "<think>");  // not special: kept
  CHECK(tokenizer->decode({263, 264, 273}) == "\n\n  hel");
  CHECK(tokenizer->decode({0xE4}) == "\xEF\xBF\xBD");
  CHECK(tokenizer->decode({270}) == "\xEF\xBF\xBD");  // E4 BD: one truncated character
  CHECK(tokenizer->decode({270, 0xA0}) == "你");      // completed by the next token
  CHECK(tokenizer->decode({270, 276, 0xA0}) == "\xEF\xBF\xBD<|im_end|>\xEF\xBF\xBD");
  CHECK(tokenizer->decode({270, 276, 0xA0}, true) == "你");  // skipped: bytes stay joined
  // Ids without a token are dropped, as Hugging Face's tokenizers drop them (checked against
  // `tokenizers` on SmolLM2's tokenizer.json: decode([1000, 60000, 1001]) == decode([1000, 1001]));
  // the bytes either side stay joined.
  CHECK(tokenizer->decode({278}).empty());
  CHECK(tokenizer->decode({-5}).empty());
  CHECK(tokenizer->decode({259, 278, 262, -5}) == tokenizer->decode({259, 262}));
  CHECK(tokenizer->decode({270, 278, 0xA0}) == "你");
}

TEST_CASE("bpe: decode(encode(s)) == s for random UTF-8", "[bpe]") {
  auto split = loadTokenizerJson(fixturePath("bpe_split.json"));
  auto gpt2 = loadTokenizerJson(fixturePath("bpe_gpt2.json"));
  std::mt19937 rng(20240611);
  for (int i = 0; i < 2000; ++i) {
    const std::string text = randomUtf8(rng);
    INFO("text: " << text);
    const Ids ids = split->encode(text);
    for (int32_t id : ids) REQUIRE((id < 274 || id == 277));  // no special from plain text
    REQUIRE(split->decode(ids) == text);
    REQUIRE(gpt2->decode(gpt2->encode(text)) == text);
    REQUIRE(split->decode(split->encodeWithSpecials(text)) == text);
  }
}

TEST_CASE("bpe: merges as strings and as pairs are the same", "[bpe]") {
  json asPairs = fixture("bpe_split.json");
  for (json& merge : asPairs["model"]["merges"]) {
    const std::string text = merge.get<std::string>();
    const size_t space = text.find(' ');
    merge = json::array({text.substr(0, space), text.substr(space + 1)});
  }
  auto strings = loadTokenizerJson(fixturePath("bpe_split.json"));
  auto pairs = fromJson(asPairs);
  for (const char* text : {"hello the there", "1234 IT'S", "café 你好\n\n", "lll  x"}) {
    CHECK(pairs->encode(text) == strings->encode(text));
  }
}

TEST_CASE("bpe: ignore_merges takes whole pieces from the vocabulary", "[bpe]") {
  json j = fixture("bpe_split.json");
  j["model"]["ignore_merges"] = true;
  auto tokenizer = fromJson(j);
  CHECK(tokenizer->encode("hel") == Ids{273});
  CHECK(tokenizer->encode("hello") == Ids{262});
  CHECK(tokenizer->encode("hels") == Ids{259, 'l', 's'});  // not in the vocabulary: merges
}

TEST_CASE("bpe: ByteLevel add_prefix_space", "[bpe]") {
  json j = fixture("bpe_gpt2.json");
  j["pre_tokenizer"]["add_prefix_space"] = true;
  auto tokenizer = fromJson(j);
  CHECK(tokenizer->encode("hello") == Ids{' ', 262});
  CHECK(tokenizer->encode(" hello") == Ids{' ', 262});
}

TEST_CASE("bpe: added token lstrip and rstrip", "[bpe]") {
  json j = fixture("bpe_split.json");
  auto plain = fromJson(j);
  CHECK(plain->encodeWithSpecials("hi  <|im_end|>  x") == Ids{'h', 'i', 264, 276, ' ', ' ', 'x'});
  for (json& token : j["added_tokens"]) {
    if (token["content"] == "<|im_end|>") token["lstrip"] = token["rstrip"] = true;
  }
  auto stripping = fromJson(j);
  CHECK(stripping->encodeWithSpecials("hi  <|im_end|>  x") == Ids{'h', 'i', 276, 'x'});
}

TEST_CASE("bpe: BOS from a TemplateProcessing post_processor", "[bpe]") {
  json j = fixture("bpe_split.json");
  j["added_tokens"].push_back({{"id", 278}, {"content", "<|begin_of_text|>"}, {"special", true}});
  json templateProcessing = {{"type", "TemplateProcessing"},
                             {"single",
                              {{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
                               {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}}};
  j["post_processor"] = {{"type", "Sequence"},
                         {"processors", {{{"type", "ByteLevel"}}, templateProcessing}}};
  auto tokenizer = fromJson(j);
  CHECK(tokenizer->bosId() == 278);
  // Never applied by encode: the chat template places BOS.
  CHECK(tokenizer->encode("hello") == Ids{262});
}

TEST_CASE("bpe: bytes missing from the vocabulary", "[bpe]") {
  json j = fixture("bpe_split.json");
  j["model"]["vocab"].erase("z");
  auto strict = fromJson(j);
  try {
    strict->encode("z");
    FAIL("encoded a byte with no token");
  } catch (const fp4lab::Error& e) {
    CHECK_THAT(e.problem(), Catch::Contains("0x7A"));
  }
  j["model"]["vocab"]["<unk>"] = 300;
  j["model"]["unk_token"] = "<unk>";
  CHECK(fromJson(j)->encode("az") == Ids{'a', 300});
}

TEST_CASE("bpe: long inputs", "[bpe]") {
  auto tokenizer = loadTokenizerJson(fixturePath("bpe_split.json"));
  // One piece of 100000 spaces (\s+(?!\S)): deep for a backtracking regex, long for BPE.
  const Ids spaces = tokenizer->encode(std::string(100000, ' '));
  REQUIRE(spaces.size() == 50000);
  CHECK(std::all_of(spaces.begin(), spaces.end(), [](int32_t id) { return id == 264; }));
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "hello the 1234 café\n";
  // Per line: hello, " the", " ", "123", "4", " caf" + é (5 tokens), "\n".
  CHECK(tokenizer->encode(text).size() == 20000u * 11);
}

TEST_CASE("bpe: malformed tokenizer.json is refused with the field named", "[bpe]") {
  const json good = fixture("bpe_split.json");
  auto mutated = [&](auto change) {
    json j = good;
    change(j);
    return loadError(j);
  };
  CHECK_THAT(mutated([](json& j) { j.erase("model"); }), Catch::Contains("model"));
  CHECK_THAT(mutated([](json& j) { j["model"]["type"] = "WordPiece"; }),
             Catch::Contains("model.type") && Catch::Contains("WordPiece"));
  CHECK_THAT(mutated([](json& j) { j["model"]["dropout"] = 0.1; }),
             Catch::Contains("model.dropout"));
  CHECK_THAT(mutated([](json& j) { j["model"]["byte_fallback"] = true; }),
             Catch::Contains("model.byte_fallback"));
  CHECK_THAT(mutated([](json& j) { j["model"]["vocab"] = json::array(); }),
             Catch::Contains("model.vocab"));
  CHECK_THAT(mutated([](json& j) { j["model"]["vocab"]["h"] = "seven"; }),
             Catch::Contains("model.vocab[\"h\"]"));
  CHECK_THAT(mutated([](json& j) { j["model"]["vocab"]["h"] = 101; }), Catch::Contains("id 101"));
  CHECK_THAT(mutated([](json& j) { j["model"]["merges"][3] = "hq e"; }),
             Catch::Contains("model.merges[3]") && Catch::Contains("\"hq\""));
  CHECK_THAT(mutated([](json& j) { j["model"]["merges"][2] = "e l l"; }),
             Catch::Contains("model.merges[2]"));
  CHECK_THAT(mutated([](json& j) { j["model"]["merges"][2] = 5; }),
             Catch::Contains("model.merges[2]"));
  CHECK_THAT(mutated([](json& j) {
               j["normalizer"] = {{"type", "NFKC"}};
             }),
             Catch::Contains("normalizer.type") && Catch::Contains("NFKC"));
  CHECK_THAT(mutated([](json& j) {
               j["pre_tokenizer"] = {{"type", "Metaspace"}};
             }),
             Catch::Contains("pre_tokenizer.type") && Catch::Contains("Metaspace"));
  CHECK_THAT(mutated([](json& j) { j["pre_tokenizer"] = nullptr; }), Catch::Contains("ByteLevel"));
  CHECK_THAT(mutated([](json& j) {
               j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
             }),
             Catch::Contains("pre_tokenizer.pretokenizers[0].pattern"));
  CHECK_THAT(mutated([](json& j) {
               j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "MergedWithNext";
             }),
             Catch::Contains("pre_tokenizer.pretokenizers[0].behavior"));
  CHECK_THAT(mutated([](json& j) {
               j["decoder"] = {{"type", "Metaspace"}};
             }),
             Catch::Contains("decoder.type"));
  CHECK_THAT(mutated([](json& j) { j["added_tokens"][1].erase("id"); }),
             Catch::Contains("added_tokens[1].id"));
  CHECK_THAT(mutated([](json& j) { j["added_tokens"][1]["content"] = ""; }),
             Catch::Contains("added_tokens[1].content"));
  CHECK_THAT(mutated([](json& j) { j["added_tokens"][0]["special"] = "yes"; }),
             Catch::Contains("added_tokens[0].special"));

  try {
    parseTokenizerJson("{\"model\": ", "broken.json");
    FAIL("accepted truncated JSON");
  } catch (const fp4lab::Error& e) {
    CHECK(e.where() == "broken.json");
    CHECK_THAT(e.problem(), Catch::Contains("JSON"));
  }
  CHECK_THROWS_AS(loadTokenizerJson(fixturePath("no_such_tokenizer.json")), fp4lab::Error);
}

TEST_CASE("bpe: NFC normalizer and Split String patterns are accepted", "[bpe]") {
  json j = fixture("bpe_split.json");
  j["normalizer"] = {{"type", "NFC"}};
  CHECK(fromJson(j)->encode("hello") == Ids{262});
  // A literal pattern: split on "l" (Isolated), so "ll" cannot merge.
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"String", "l"}};
  CHECK(fromJson(j)->encode("hello") == Ids{259, 'l', 'l', 'o'});
}
