// Fuzzer for the data layer (plain C++): the first byte picks what the rest of the input is.
//   0: text. Valid UTF-8 must survive decode(encode(text)) with the byte tokenizer and both
//      byte-level BPE fixtures (tests/engine/data/data), with and without special tokens; any
//      bytes must go through the tokenizers and chat templates without a crash.
//   1: a JSONL dataset file, then every row tokenized with the byte chat template.
//   2: a Hugging Face tokenizer.json, then a round trip through it when it is accepted.
// Anything may throw fp4lab::Error; nothing may crash, read out of bounds or hit undefined
// behaviour (ASan/UBSan, preset `fuzz`). Run by tests/fuzz/run-fuzzers.sh.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "../engine/temp_dir.h"
#include "fp4lab/data/chat_template.h"
#include "fp4lab/data/dataset.h"
#include "fp4lab/data/tokenizer.h"
#include "fp4lab/data/utf8.h"
#include "fp4lab/error.h"

namespace {

using namespace fp4lab::data;

struct Tokenizers {
  std::unique_ptr<Tokenizer> byte = makeByteTokenizer();
  std::unique_ptr<Tokenizer> gpt2 =
      loadTokenizerJson(std::string(FP4LAB_FUZZ_DATA_DIR) + "/bpe_gpt2.json");
  std::unique_ptr<Tokenizer> split =
      loadTokenizerJson(std::string(FP4LAB_FUZZ_DATA_DIR) + "/bpe_split.json");
};

const Tokenizers& tokenizers() {
  static const Tokenizers t;
  return t;
}

void roundTrip(const Tokenizer& tokenizer, const std::string& text) {
  if (tokenizer.decode(tokenizer.encode(text)) != text) {
    std::fprintf(stderr, "fuzz_data: %s tokenizer: decode(encode(text)) != text\n",
                 tokenizer.kind().c_str());
    std::abort();
  }
  if (tokenizer.decode(tokenizer.encodeWithSpecials(text)) != text) {
    std::fprintf(stderr, "fuzz_data: %s tokenizer: decode(encodeWithSpecials(text)) != text\n",
                 tokenizer.kind().c_str());
    std::abort();
  }
}

void throughTemplate(const Tokenizer& tokenizer, const std::string& text) {
  const ChatTemplate chat(tokenizer);
  const TokenizedExample out = chat.apply({{"user", text}, {"assistant", text}});
  if (out.ids.size() != out.lossMask.size()) std::abort();
  (void)chat.prompt({{"system", text}, {"user", text}});
}

void text(const std::string& bytes) {
  const Tokenizers& t = tokenizers();
  throughTemplate(*t.byte, bytes);  // any bytes
  if (findInvalidUtf8(bytes)) {
    // Decoding is lossy there (U+FFFD, as Hugging Face): only no crash is asked.
    (void)t.byte->decode(t.byte->encode(bytes));
    (void)t.split->decode(t.split->encodeWithSpecials(bytes));
    return;
  }
  roundTrip(*t.byte, bytes);
  roundTrip(*t.gpt2, bytes);
  roundTrip(*t.split, bytes);
  throughTemplate(*t.split, bytes);
}

void jsonl(const std::string& bytes) {
  static const fp4lab::testing::TempDir dir("fp4lab-fuzz-");
  static const std::string path = dir.file("input.jsonl");
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return;
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  const ChatTemplate chat(*tokenizers().byte);
  for (const Example& example : readJsonl(path)) {
    if (example.messages.empty() == example.inputIds.empty()) std::abort();  // one kind per row
    if (!example.messages.empty()) {
      const TokenizedExample out = tokenize(example, chat);
      if (out.ids.size() != out.lossMask.size()) std::abort();
    }
  }
}

void tokenizerJson(const std::string& bytes) {
  const std::unique_ptr<Tokenizer> tokenizer = parseTokenizerJson(bytes, "fuzz input");
  const std::string sample = "Hello, world! 你好 123\n\t<|im_end|>";
  (void)tokenizer->decode(tokenizer->encodeWithSpecials(sample));
  (void)tokenizer->decode(tokenizer->encode(sample), true);
  (void)tokenizer->bosId(), (void)tokenizer->eosId(), (void)tokenizer->padId();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (data[0] % 3) {
      case 0:
        text(rest);
        break;
      case 1:
        jsonl(rest);
        break;
      default:
        tokenizerJson(rest);
        break;
    }
  } catch (const fp4lab::Error&) {
  }
  return 0;
}
