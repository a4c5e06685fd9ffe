// Chat templates: conversations to token ids plus the loss mask that trains only on what the
// assistant says. The template is chosen from the tokenizer's special tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fp4lab/data/dataset.h"
#include "fp4lab/data/tokenizer.h"

namespace fp4lab::data {

// lossMask[i] == 1 when token i is a target, i.e. the loss includes predicting ids[i] from
// ids[0..i). lossMask[0] is always 0: nothing predicts the first token.
struct TokenizedExample {
  std::vector<int32_t> ids;
  std::vector<uint8_t> lossMask;
};

// The three layouts (masked spans in [brackets]; ⏎ is a newline):
//   byte:   <|system|>S<|end|><|user|>U<|end|><|assistant|>[A<|end|>]...[<|eos|>]
//           (<|eos|> closes a conversation whose last message is the assistant's)
//   chatml: <|im_start|>system⏎S<|im_end|>⏎<|im_start|>user⏎U<|im_end|>⏎
//           <|im_start|>assistant⏎[A<|im_end|>]⏎     (Qwen2/2.5; no default system message)
//   llama3: <|begin_of_text|><|start_header_id|>system<|end_header_id|>⏎⏎S<|eot_id|>
//           <|start_header_id|>user<|end_header_id|>⏎⏎U<|eot_id|>
//           <|start_header_id|>assistant<|end_header_id|>⏎⏎[A<|eot_id|>]
//           (Llama-3.0's layout: content is not trimmed, no 3.1 "Cutting Knowledge Date" preamble)
// Every assistant turn is trained on. Headers, content and footers are encoded separately, so a
// mask boundary always falls between tokens; the ids equal Hugging Face's (apply_chat_template,
// then encode) except when a content string starts with a newline that the pre-tokenizer regex
// would have fused with the header's newline. Keeping them apart is also what generation sees:
// the prompt ends at the header, and the model's first token starts the content.
class ChatTemplate {
 public:
  enum class Kind { Byte, ChatML, Llama3 };

  // byte tokenizer -> byte; tokenizer with <|im_start|> and <|im_end|> -> chatml; with
  // <|start_header_id|>, <|end_header_id|>, <|eot_id|> and <|begin_of_text|> -> llama3; else
  // fp4lab::Error. The tokenizer must outlive the template.
  explicit ChatTemplate(const Tokenizer& tokenizer);

  // Throws fp4lab::Error on an empty conversation or a role other than system, user, assistant.
  TokenizedExample apply(const std::vector<Message>& messages) const;

  // The conversation so far followed by the assistant header: what a model continues from.
  // apply(messages + {assistant, A}).ids starts with prompt(messages).
  std::vector<int32_t> prompt(const std::vector<Message>& messages) const;

  // Ids that end an assistant turn; generation stops at any of them.
  std::vector<int32_t> stopTokens() const;

  std::string name() const;  // "byte", "chatml", "llama3"
  Kind kind() const { return m_kind; }
  const Tokenizer& tokenizer() const { return m_tokenizer; }

 private:
  struct Builder;
  void appendMessage(Builder& out, const Message& message) const;
  void appendHeader(Builder& out, const std::string& role) const;

  const Tokenizer& m_tokenizer;
  Kind m_kind = Kind::Byte;
  // Marker ids; their meaning depends on m_kind (see the constructor).
  int32_t m_begin = -1;      // chatml <|im_start|>, llama3 <|start_header_id|>
  int32_t m_headerEnd = -1;  // llama3 <|end_header_id|>
  int32_t m_end = -1;        // byte <|end|>, chatml <|im_end|>, llama3 <|eot_id|>
  int32_t m_bos = -1;        // llama3 <|begin_of_text|>
  std::vector<int32_t> m_stop;
};

// Pre-tokenized examples: ids as given, every token but the first is a target. Chat examples:
// template.apply. Ids outside the tokenizer's vocabulary and template errors are reported as
// fp4lab::Error with where() = example.source.
TokenizedExample tokenize(const Example& example, const ChatTemplate& chatTemplate);
// A pre-tokenized example (example.inputIds non-empty) without a tokenizer: ids checked against
// `vocabSize` (the model's), every token but the first a target.
TokenizedExample tokenizePreTokenized(const Example& example, int32_t vocabSize,
                                      const char* vocabularyOf = "tokenizer");

}  // namespace fp4lab::data
