// Tokenizers: the byte tokenizer of the built-in tasks, and byte-level BPE read from a Hugging
// Face tokenizer.json (GPT-2, Llama-3, Qwen2 families). Token ids only; no tensors.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fp4lab::data {

// Encoding never adds BOS/EOS (a Hugging Face post_processor is not applied): the chat template
// decides where they go. Implementations are immutable after construction, so one tokenizer may be
// used from several threads at once.
class Tokenizer {
 public:
  virtual ~Tokenizer();

  // Plain text: a special token's string in `text` (say "<|im_end|>" typed by a user) is encoded
  // as ordinary text, never as the special id, so dataset content cannot forge control tokens.
  // Hugging Face added tokens that are not special (special: false) are still matched, as
  // Hugging Face does. Throws fp4lab::Error when a BPE tokenizer gets invalid UTF-8.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;

  // As Hugging Face's encode(text, add_special_tokens=False): every added token, special or not,
  // is matched verbatim (leftmost, then longest) before the rest is encoded. For text you trust.
  virtual std::vector<int32_t> encodeWithSpecials(std::string_view text) const = 0;

  // Ids back to UTF-8. Bytes that do not form valid UTF-8 (a character split by a truncation)
  // become U+FFFD. skipSpecial drops special tokens. An id that no token has (negative, past
  // vocabSize(), or a hole below it) is dropped, as Hugging Face's tokenizers drop it: a model's
  // embedding table is often padded past its tokenizer, and what a model generates there must not
  // end a run at its final grading. Bytes either side of a skipped special or a dropped id are
  // decoded together, as Hugging Face does.
  virtual std::string decode(const std::vector<int32_t>& ids, bool skipSpecial = false) const = 0;

  // One more than the largest id (vocabulary and added tokens). A model's embedding may be larger.
  virtual int32_t vocabSize() const = 0;

  // The id of a special (or other added) token given its text, e.g. "<|im_end|>".
  virtual std::optional<int32_t> specialToken(const std::string& content) const = 0;
  virtual bool isSpecial(int32_t id) const = 0;

  virtual std::string kind() const = 0;  // "byte" or "bpe"

  // As the tokenizer defines them; see makeByteTokenizer and loadTokenizerJson for the rules.
  virtual std::optional<int32_t> bosId() const = 0;
  virtual std::optional<int32_t> eosId() const = 0;
  virtual std::optional<int32_t> padId() const = 0;
};

// The byte tokenizer's fixed ids: 0..255 are the bytes themselves, then the specials below.
// These values are part of every checkpoint trained with it; never renumber them.
namespace byte_tokens {
constexpr int32_t kBos = 256;        // <|bos|>
constexpr int32_t kEos = 257;        // <|eos|>
constexpr int32_t kPad = 258;        // <|pad|>
constexpr int32_t kSystem = 259;     // <|system|>
constexpr int32_t kUser = 260;       // <|user|>
constexpr int32_t kAssistant = 261;  // <|assistant|>
constexpr int32_t kEnd = 262;        // <|end|>
constexpr int32_t kVocabSize = 263;
}  // namespace byte_tokens

// Every byte string encodes (no UTF-8 requirement); decode maps bytes back and renders specials as
// their strings. bos/eos/pad are <|bos|>, <|eos|>, <|pad|>.
std::unique_ptr<Tokenizer> makeByteTokenizer();

// A Hugging Face tokenizer.json whose model is byte-level BPE. Supported, anything else is
// rejected with an fp4lab::Error naming the field:
// - normalizer: null, or NFC. NFC is accepted but NOT applied: text is assumed to be NFC already
//   (true of nearly all text; decomposed accents would encode differently from Hugging Face).
// - pre_tokenizer: ByteLevel (GPT-2 regex when use_regex, add_prefix_space honoured), Split with a
//   Regex or String pattern and behavior Isolated (run with PCRE2, UTF + UCP), or a Sequence of
//   those; it must contain a ByteLevel step.
// - model: type BPE, merges as "a b" strings or [a, b] pairs, applied by rank (lowest first, then
//   leftmost); ignore_merges (Llama-3: a piece already in the vocabulary is one token); unk_token
//   for bytes missing from the vocabulary; no dropout, byte_fallback or subword prefix/suffix.
// - decoder: null or ByteLevel. post_processor: read only to find BOS (the leading special token
//   of a TemplateProcessing), never applied.
// - added_tokens: id, content, special, lstrip/rstrip (ASCII whitespace), single_word (ASCII word
//   characters).
// bosId: see post_processor. eosId: the first of <|end_of_text|>, <|endoftext|>, </s> present.
// padId: the first of <|pad|>, <|finetune_right_pad_id|>, <|endoftext|> present, else eosId.
// tokenizer_config.json and generation_config.json are not read.
std::unique_ptr<Tokenizer> loadTokenizerJson(const std::string& path);

// The same from the file's text; `where` names the source in errors.
std::unique_ptr<Tokenizer> parseTokenizerJson(std::string_view json, const std::string& where);

}  // namespace fp4lab::data
