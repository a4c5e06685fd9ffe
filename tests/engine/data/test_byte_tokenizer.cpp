// The byte tokenizer's fixed ids and the UTF-8 helpers both tokenizers decode with.
#include <catch2/catch.hpp>

#include "fp4lab/data/tokenizer.h"
#include "fp4lab/data/utf8.h"
#include "fp4lab/error.h"

using namespace fp4lab::data;

TEST_CASE("byte tokenizer: ids are the bytes, specials are never parsed by encode", "[byte]") {
  auto tokenizer = makeByteTokenizer();
  CHECK(tokenizer->kind() == "byte");
  CHECK(tokenizer->vocabSize() == 263);
  CHECK(tokenizer->encode("Hi\n") == std::vector<int32_t>{72, 105, 10});
  // "é" is C3 A9; bytes above 127 must not come out negative (char is signed here).
  CHECK(tokenizer->encode("\xC3\xA9") == std::vector<int32_t>{0xC3, 0xA9});
  CHECK(tokenizer->encode("<|end|>") == std::vector<int32_t>{'<', '|', 'e', 'n', 'd', '|', '>'});
  CHECK(tokenizer->encode("").empty());
  // Not UTF-8 at all: the byte tokenizer does not care.
  CHECK(tokenizer->encode(std::string("\xFF\x00", 2)) == std::vector<int32_t>{255, 0});
}

TEST_CASE("byte tokenizer: special ids are fixed", "[byte]") {
  auto tokenizer = makeByteTokenizer();
  const std::vector<std::pair<std::string, int32_t>> specials = {
      {"<|bos|>", 256},  {"<|eos|>", 257},       {"<|pad|>", 258}, {"<|system|>", 259},
      {"<|user|>", 260}, {"<|assistant|>", 261}, {"<|end|>", 262}};
  for (const auto& [name, id] : specials) {
    CHECK(tokenizer->specialToken(name) == id);
    CHECK(tokenizer->isSpecial(id));
    CHECK(tokenizer->decode({id}) == name);
  }
  CHECK_FALSE(tokenizer->specialToken("<|im_end|>"));
  CHECK_FALSE(tokenizer->isSpecial(255));
  CHECK(tokenizer->bosId() == byte_tokens::kBos);
  CHECK(tokenizer->eosId() == byte_tokens::kEos);
  CHECK(tokenizer->padId() == byte_tokens::kPad);
}

TEST_CASE("byte tokenizer: encodeWithSpecials and decode", "[byte]") {
  auto tokenizer = makeByteTokenizer();
  const std::vector<int32_t> ids = tokenizer->encodeWithSpecials("<|user|>Hi<|end|><|x|>");
  CHECK(ids == std::vector<int32_t>{260, 'H', 'i', 262, '<', '|', 'x', '|', '>'});
  CHECK(tokenizer->decode(ids) == "<|user|>Hi<|end|><|x|>");
  CHECK(tokenizer->decode(ids, true) == "Hi<|x|>");
  // No token: dropped, as Hugging Face does (tokenizer.h); a model's padded vocabulary can
  // generate such ids.
  CHECK(tokenizer->decode({263}).empty());
  CHECK(tokenizer->decode({'H', 263, 'i', -1, 40000}) == "Hi");
  CHECK(tokenizer->decode({0xE4, 300, 0xBD, 0xA0}) == "你");
}

TEST_CASE("byte tokenizer: decode replaces broken UTF-8, encode/decode round-trips", "[byte]") {
  auto tokenizer = makeByteTokenizer();
  // "你" is E4 BD A0; cut after two bytes it is one replacement character.
  CHECK(tokenizer->decode({0xE4, 0xBD}) == "\xEF\xBF\xBD");
  CHECK(tokenizer->decode({0xE4, 0xBD, 0xA0}) == "\xE4\xBD\xA0");
  // A special between the bytes of a character breaks it: the lead byte is one replacement,
  // each orphaned continuation byte another.
  CHECK(tokenizer->decode({0xE4, 262, 0xBD, 0xA0}) ==
        "\xEF\xBF\xBD<|end|>\xEF\xBF\xBD\xEF\xBF\xBD");
  // Skipped, it does not: the character survives.
  CHECK(tokenizer->decode({0xE4, 262, 0xBD, 0xA0}, true) == "\xE4\xBD\xA0");
  const std::string text = "Grüße, 世界! 🙂\n\tend";
  CHECK(tokenizer->decode(tokenizer->encode(text)) == text);
}

TEST_CASE("utf8: validation finds the first ill-formed byte", "[utf8]") {
  CHECK_FALSE(findInvalidUtf8("plain ascii"));
  CHECK_FALSE(findInvalidUtf8("\xC3\xA9\xE4\xBD\xA0\xF0\x9F\x99\x82"));  // é 你 🙂
  CHECK(findInvalidUtf8("ab\x80") == 2u);                                // stray continuation byte
  CHECK(findInvalidUtf8("a\xC0\xAF") == 1u);                             // overlong '/'
  CHECK(findInvalidUtf8("\xED\xA0\x80") == 0u);                          // UTF-16 surrogate D800
  CHECK(findInvalidUtf8("\xF4\x90\x80\x80") == 0u);                      // above U+10FFFF
  CHECK(findInvalidUtf8("xy\xE4\xBD") == 2u);                            // truncated at the end
}

TEST_CASE("utf8: lossy decoding replaces maximal subparts", "[utf8]") {
  const std::string fffd = "\xEF\xBF\xBD";
  CHECK(utf8Lossy("ok") == "ok");
  CHECK(utf8Lossy("\xE4\xBD") == fffd);                    // one truncated character
  CHECK(utf8Lossy("\xE4\xBD\x41") == fffd + "A");          // truncated, then ASCII "A"
  CHECK(utf8Lossy("\x80\x80") == fffd + fffd);             // two stray continuations
  CHECK(utf8Lossy("\xC0\xAF") == fffd + fffd);             // C0 is never valid: two
  CHECK(utf8Lossy("\xED\xA0\x80") == fffd + fffd + fffd);  // surrogate: three (as Rust/ICU)
  CHECK(utf8Lossy("\xF0\x9F\x99") == fffd);                // emoji cut after three bytes
  CHECK(utf8Lossy("\xF0\x9F\x99\x82") == "\xF0\x9F\x99\x82");
}
