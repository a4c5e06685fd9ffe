// Chat templates (byte, ChatML, Llama-3) built id by id, so the loss mask is exact: special ids
// are appended directly and text is encoded in header, content and footer segments.
#include "fp4lab/data/chat_template.h"

#include "fp4lab/error.h"

namespace fp4lab::data {
namespace {

constexpr const char* kWhere = "chat template";

bool isKnownRole(const std::string& role) {
  return role == "system" || role == "user" || role == "assistant";
}

}  // namespace

struct ChatTemplate::Builder {
  TokenizedExample example;
  void add(int32_t id, uint8_t target) {
    example.ids.push_back(id);
    example.lossMask.push_back(target);
  }
  void add(const std::vector<int32_t>& ids, uint8_t target) {
    example.ids.insert(example.ids.end(), ids.begin(), ids.end());
    example.lossMask.insert(example.lossMask.end(), ids.size(), target);
  }
};

ChatTemplate::ChatTemplate(const Tokenizer& tokenizer) : m_tokenizer(tokenizer) {
  if (tokenizer.kind() == "byte") {
    m_kind = Kind::Byte;
    m_end = byte_tokens::kEnd;
    m_stop = {byte_tokens::kEnd, byte_tokens::kEos};
    return;
  }
  const auto imStart = tokenizer.specialToken("<|im_start|>");
  const auto imEnd = tokenizer.specialToken("<|im_end|>");
  if (imStart && imEnd) {
    m_kind = Kind::ChatML;
    m_begin = *imStart;
    m_end = *imEnd;
    m_stop = {*imEnd};
    // Base Qwen models end documents with <|endoftext|>; stop there too.
    if (auto endOfText = tokenizer.specialToken("<|endoftext|>")) m_stop.push_back(*endOfText);
    return;
  }
  const auto headerStart = tokenizer.specialToken("<|start_header_id|>");
  const auto headerEnd = tokenizer.specialToken("<|end_header_id|>");
  const auto endOfTurn = tokenizer.specialToken("<|eot_id|>");
  const auto beginOfText = tokenizer.specialToken("<|begin_of_text|>");
  if (headerStart && headerEnd && endOfTurn && beginOfText) {
    m_kind = Kind::Llama3;
    m_begin = *headerStart;
    m_headerEnd = *headerEnd;
    m_end = *endOfTurn;
    m_bos = *beginOfText;
    m_stop = {*endOfTurn};
    for (const char* name : {"<|end_of_text|>", "<|eom_id|>"}) {
      if (auto id = tokenizer.specialToken(name)) m_stop.push_back(*id);
    }
    return;
  }
  throw Error("the tokenizer's special tokens match no known chat template", kWhere,
              "supported: the byte tokenizer; ChatML (<|im_start|>, <|im_end|>: Qwen); Llama-3 "
              "(<|begin_of_text|>, <|start_header_id|>, <|end_header_id|>, <|eot_id|>)");
}

std::string ChatTemplate::name() const {
  switch (m_kind) {
    case Kind::Byte:
      return "byte";
    case Kind::ChatML:
      return "chatml";
    case Kind::Llama3:
      return "llama3";
  }
  return "unknown";
}

std::vector<int32_t> ChatTemplate::stopTokens() const {
  return m_stop;
}

void ChatTemplate::appendHeader(Builder& out, const std::string& role) const {
  switch (m_kind) {
    case Kind::Byte:
      out.add(role == "system" ? byte_tokens::kSystem
              : role == "user" ? byte_tokens::kUser
                               : byte_tokens::kAssistant,
              0);
      break;
    case Kind::ChatML:
      out.add(m_begin, 0);
      out.add(m_tokenizer.encode(role + "\n"), 0);
      break;
    case Kind::Llama3:
      out.add(m_begin, 0);
      out.add(m_tokenizer.encode(role), 0);
      out.add(m_headerEnd, 0);
      out.add(m_tokenizer.encode("\n\n"), 0);
      break;
  }
}

void ChatTemplate::appendMessage(Builder& out, const Message& message) const {
  if (!isKnownRole(message.role)) {
    throw Error("message role \"" + message.role + "\" is not system, user or assistant", kWhere);
  }
  const uint8_t target = message.role == "assistant" ? 1 : 0;
  appendHeader(out, message.role);
  out.add(m_tokenizer.encode(message.content), target);
  // The end-of-turn token is a target too: the model must learn to stop.
  out.add(m_end, target);
  if (m_kind == Kind::ChatML) out.add(m_tokenizer.encode("\n"), 0);
}

TokenizedExample ChatTemplate::apply(const std::vector<Message>& messages) const {
  if (messages.empty()) throw Error("the conversation has no messages", kWhere);
  Builder out;
  if (m_kind == Kind::Llama3) out.add(m_bos, 0);
  for (const Message& message : messages) appendMessage(out, message);
  if (m_kind == Kind::Byte && messages.back().role == "assistant") out.add(byte_tokens::kEos, 1);
  out.example.lossMask[0] = 0;  // nothing predicts the first token
  return std::move(out.example);
}

std::vector<int32_t> ChatTemplate::prompt(const std::vector<Message>& messages) const {
  Builder out;
  if (m_kind == Kind::Llama3) out.add(m_bos, 0);
  for (const Message& message : messages) appendMessage(out, message);
  appendHeader(out, "assistant");
  return std::move(out.example.ids);
}

TokenizedExample tokenizePreTokenized(const Example& example, int32_t vocabSize,
                                      const char* vocabularyOf) {
  for (size_t i = 0; i < example.inputIds.size(); ++i) {
    const int32_t id = example.inputIds[i];
    if (id < 0 || id >= vocabSize) {
      throw Error("input_ids[" + std::to_string(i) + "] = " + std::to_string(id) +
                      " is outside the " + vocabularyOf + "'s vocabulary of " +
                      std::to_string(vocabSize),
                  example.source, "was the dataset tokenized with another tokenizer?");
    }
  }
  TokenizedExample out;
  out.ids = example.inputIds;
  out.lossMask.assign(out.ids.size(), 1);
  if (!out.lossMask.empty()) out.lossMask[0] = 0;
  return out;
}

TokenizedExample tokenize(const Example& example, const ChatTemplate& chatTemplate) {
  if (!example.inputIds.empty())
    return tokenizePreTokenized(example, chatTemplate.tokenizer().vocabSize());
  if (example.messages.empty()) {
    throw Error("the example has neither messages nor input_ids", example.source);
  }
  try {
    return chatTemplate.apply(example.messages);
  } catch (const Error& e) {
    throw Error(e.problem(), example.source, e.hint());
  }
}

}  // namespace fp4lab::data
