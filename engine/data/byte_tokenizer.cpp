// The byte tokenizer: ids 0..255 are bytes, 256..262 fixed specials. No vocabulary file, so the
// built-in tasks and tests need nothing downloaded.
#include <array>

#include "fp4lab/data/tokenizer.h"
#include "fp4lab/data/utf8.h"
#include "fp4lab/error.h"

namespace fp4lab::data {

Tokenizer::~Tokenizer() = default;

namespace {

// Indexed by id - 256; the order defines the ids in byte_tokens.
constexpr std::array<const char*, 7> kSpecialNames = {
    "<|bos|>", "<|eos|>", "<|pad|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"};
static_assert(kSpecialNames.size() == byte_tokens::kVocabSize - 256, "one name per special id");

class ByteTokenizer final : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    ids.reserve(text.size());
    for (char c : text) ids.push_back(static_cast<uint8_t>(c));
    return ids;
  }

  std::vector<int32_t> encodeWithSpecials(std::string_view text) const override {
    std::vector<int32_t> ids;
    ids.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
      int32_t special = -1;
      size_t length = 0;
      if (text[i] == '<') {
        for (size_t k = 0; k < kSpecialNames.size(); ++k) {
          const std::string_view name = kSpecialNames[k];
          if (text.compare(i, name.size(), name) == 0) {
            special = static_cast<int32_t>(256 + k);
            length = name.size();
            break;  // no special name is a prefix of another
          }
        }
      }
      if (special >= 0) {
        ids.push_back(special);
        i += length;
      } else {
        ids.push_back(static_cast<uint8_t>(text[i++]));
      }
    }
    return ids;
  }

  std::string decode(const std::vector<int32_t>& ids, bool skipSpecial) const override {
    std::string bytes, out;
    for (int32_t id : ids) {
      if (id >= 0 && id < 256) {
        bytes += static_cast<char>(id);
      } else if (id >= 256 && id < byte_tokens::kVocabSize) {
        if (skipSpecial) continue;  // the bytes around it stay joined, as in Hugging Face
        out += utf8Lossy(bytes);
        bytes.clear();
        out += kSpecialNames[id - 256];
      }  // else: no token, dropped (tokenizer.h)
    }
    return out + utf8Lossy(bytes);
  }

  int32_t vocabSize() const override { return byte_tokens::kVocabSize; }

  std::optional<int32_t> specialToken(const std::string& content) const override {
    for (size_t k = 0; k < kSpecialNames.size(); ++k) {
      if (content == kSpecialNames[k]) return static_cast<int32_t>(256 + k);
    }
    return std::nullopt;
  }

  bool isSpecial(int32_t id) const override { return id >= 256 && id < byte_tokens::kVocabSize; }
  std::string kind() const override { return "byte"; }
  std::optional<int32_t> bosId() const override { return byte_tokens::kBos; }
  std::optional<int32_t> eosId() const override { return byte_tokens::kEos; }
  std::optional<int32_t> padId() const override { return byte_tokens::kPad; }
};

}  // namespace

std::unique_ptr<Tokenizer> makeByteTokenizer() {
  return std::make_unique<ByteTokenizer>();
}

}  // namespace fp4lab::data
