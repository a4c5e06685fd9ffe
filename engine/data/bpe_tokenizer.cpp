// Byte-level BPE from a Hugging Face tokenizer.json: added tokens, then the pre-tokenizer pipeline
// (PCRE2 for the Split regexes), then BPE merges by rank over the raw bytes of each piece.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <memory>
#include <queue>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "fp4lab/data/tokenizer.h"
#include "fp4lab/data/utf8.h"
#include "fp4lab/error.h"

namespace fp4lab::data {
namespace {

using nlohmann::json;

// What ByteLevel(use_regex=true) splits on: GPT-2's pattern, as Hugging Face spells it.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Ids beyond this are refused so that a corrupt file cannot make us allocate gigabytes.
constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 bytes are
// shifted to U+0100.. in byte order (space -> U+0120 'Ġ', newline -> U+010A 'Ċ'). Vocabulary
// strings are written in these characters; we convert them back to bytes once, at load.
class ByteLevelAlphabet {
 public:
  ByteLevelAlphabet() {
    m_byteOf.fill(-1);
    uint32_t shifted = 0;
    for (uint32_t byte = 0; byte < 256; ++byte) {
      const bool printable = (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) ||
                             (byte >= 0xAE && byte <= 0xFF);
      const uint32_t codepoint = printable ? byte : 256 + shifted++;
      m_byteOf[codepoint] = static_cast<int16_t>(byte);
    }
  }

  // The raw bytes a vocabulary string stands for, or nullopt when it has a character outside
  // the alphabet (a token written verbatim, which then decodes to its own text).
  std::optional<std::string> toBytes(const std::string& text) const {
    std::string bytes;
    for (size_t i = 0; i < text.size();) {
      const auto lead = static_cast<uint8_t>(text[i]);
      uint32_t codepoint = 0;
      size_t length = 1;
      if (lead < 0x80) {
        codepoint = lead;
      } else if ((lead & 0xE0) == 0xC0 && i + 1 < text.size()) {
        codepoint = ((lead & 0x1Fu) << 6) | (static_cast<uint8_t>(text[i + 1]) & 0x3Fu);
        length = 2;
      } else {
        return std::nullopt;  // the alphabet ends at U+0143: no 3- or 4-byte characters
      }
      if (codepoint >= m_byteOf.size() || m_byteOf[codepoint] < 0) return std::nullopt;
      bytes += static_cast<char>(m_byteOf[codepoint]);
      i += length;
    }
    return bytes;
  }

 private:
  std::array<int16_t, 0x144> m_byteOf;  // code point -> byte, -1 outside the alphabet
};

const ByteLevelAlphabet& byteLevelAlphabet() {
  static const ByteLevelAlphabet alphabet;
  return alphabet;
}

std::string pcre2Message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
};
using MatchData = std::unique_ptr<pcre2_match_data, MatchDataDeleter>;

// A compiled Split pattern. The code is shared by all threads; match data is per call.
class Regex {
 public:
  Regex(const std::string& pattern, bool literal, const std::string& field,
        const std::string& where) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    // UCP makes \s, \w and friends Unicode-aware, as in the Oniguruma engine Hugging Face uses.
    // (PCRE2 refuses UCP together with LITERAL, where it means nothing anyway.)
    const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    m_code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options,
                           &error, &offset, nullptr);
    if (!m_code) {
      throw Error(field + " does not compile: " + pcre2Message(error) + " at offset " +
                      std::to_string(offset),
                  where, "the pattern must be a PCRE2-compatible regular expression");
    }
    // Without JIT (not built in, or no executable memory) pcre2_match interprets: same results.
    pcre2_jit_compile(m_code, PCRE2_JIT_COMPLETE);
  }
  ~Regex() { pcre2_code_free(m_code); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  MatchData newMatchData() const {
    return MatchData(pcre2_match_data_create_from_pattern(m_code, nullptr));
  }

  // Hugging Face's Split behavior "Isolated": every match is a piece, and so is every non-empty
  // stretch between matches. `subject` is valid UTF-8 (checked once per encode), hence
  // NO_UTF_CHECK, which also keeps this linear: PCRE2 would otherwise re-validate the whole
  // subject at every match.
  void splitIsolated(const std::string& subject, pcre2_match_data* data,
                     std::vector<std::string>& pieces) const {
    const auto* text = reinterpret_cast<PCRE2_SPTR>(subject.data());
    size_t pieceStart = 0, offset = 0;
    while (offset < subject.size()) {
      int rc = pcre2_match(m_code, text, subject.size(), offset, PCRE2_NO_UTF_CHECK, data, nullptr);
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
        // Long runs (thousands of spaces) can exhaust the JIT's small stack; the interpreter
        // uses the heap.
        rc = pcre2_match(m_code, text, subject.size(), offset, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                         data, nullptr);
      }
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) throw Error("pre-tokenizer regex failed: " + pcre2Message(rc), "tokenizer");
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
      const size_t start = ovector[0], end = ovector[1];
      if (end == start) {  // an empty match splits nothing; step over one character
        offset = start + 1;
        while (offset < subject.size() && (static_cast<uint8_t>(subject[offset]) & 0xC0) == 0x80) {
          ++offset;
        }
        continue;
      }
      if (start > pieceStart) pieces.push_back(subject.substr(pieceStart, start - pieceStart));
      pieces.push_back(subject.substr(start, end - start));
      pieceStart = offset = end;
    }
    if (pieceStart < subject.size()) pieces.push_back(subject.substr(pieceStart));
  }

 private:
  pcre2_code* m_code = nullptr;
};

// One pre-tokenizer operation on every current piece.
struct PreTokenizeStep {
  std::shared_ptr<const Regex> split;  // split Isolated by this pattern, or ...
  bool prefixSpace = false;            // ... prepend a space unless the piece starts with one
};

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false, lstrip = false, rstrip = false, singleWord = false;
};

struct Merge {
  int32_t rank;
  int32_t merged;
};

uint64_t pairKey(int32_t left, int32_t right) {
  return (uint64_t{static_cast<uint32_t>(left)} << 32) | static_cast<uint32_t>(right);
}

bool isAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}
bool isAsciiWordChar(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

std::string typeName(const json& value) {
  return value.type_name();
}

// Field accessors that name the field when the file is wrong.
const json& requireField(const json& object, const char* key, const std::string& field,
                         const std::string& where) {
  auto it = object.find(key);
  if (it == object.end()) throw Error(field + "." + key + " is missing", where);
  return *it;
}

bool optionalBool(const json& object, const char* key, bool fallback, const std::string& field,
                  const std::string& where) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) {
    throw Error(field + "." + key + " must be a boolean, not " + typeName(*it), where);
  }
  return it->get<bool>();
}

std::string typeOf(const json& object, const std::string& field, const std::string& where) {
  if (!object.is_object())
    throw Error(field + " must be an object, not " + typeName(object), where);
  const json& type = requireField(object, "type", field, where);
  if (!type.is_string()) throw Error(field + ".type must be a string", where);
  return type.get<std::string>();
}

int32_t tokenId(const json& value, const std::string& field, const std::string& where) {
  if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
      value.get<int64_t>() > kMaxTokenId) {
    throw Error(field + " must be a token id (an integer in [0, 2^24)), not " + value.dump(),
                where);
  }
  return static_cast<int32_t>(value.get<int64_t>());
}

class BpeTokenizer final : public Tokenizer {
 public:
  BpeTokenizer(const json& root, const std::string& where) : m_where(where) {
    if (!root.is_object()) throw Error("tokenizer.json must be a JSON object", where);
    parseNormalizer(root.value("normalizer", json()), "normalizer");
    parseModel(requireField(root, "model", "tokenizer", where));
    parseAddedTokens(root.value("added_tokens", json()));
    const json& preTokenizer = root.value("pre_tokenizer", json());
    if (!preTokenizer.is_null()) parsePreTokenizer(preTokenizer, "pre_tokenizer");
    if (!m_byteLevel) {
      throw Error("pre_tokenizer has no ByteLevel step", where,
                  "only byte-level BPE (GPT-2, Llama-3, Qwen2 style) is supported");
    }
    const json& decoder = root.value("decoder", json());
    if (!decoder.is_null() && typeOf(decoder, "decoder", where) != "ByteLevel") {
      throw Error("decoder.type \"" + decoder["type"].get<std::string>() + "\" is not supported",
                  where, "supported: null, ByteLevel");
    }
    m_bos = findBos(root.value("post_processor", json()));
    for (const char* name : {"<|end_of_text|>", "<|endoftext|>", "</s>"}) {
      if ((m_eos = specialToken(name))) break;
    }
    for (const char* name : {"<|pad|>", "<|finetune_right_pad_id|>", "<|endoftext|>"}) {
      if ((m_pad = specialToken(name))) break;
    }
    if (!m_pad) m_pad = m_eos;
  }

  std::vector<int32_t> encode(std::string_view text) const override {
    return encodeText(text, false);
  }
  std::vector<int32_t> encodeWithSpecials(std::string_view text) const override {
    return encodeText(text, true);
  }

  std::string decode(const std::vector<int32_t>& ids, bool skipSpecial) const override {
    // Bytes accumulate across tokens (a character's bytes may be split between tokens) and are
    // decoded at each added token and at the end, as Hugging Face decodes groups of tokens.
    std::string bytes, out;
    for (int32_t id : ids) {
      if (id < 0 || id >= static_cast<int32_t>(m_idToBytes.size()) || m_idKind[id] == kNoToken)
        continue;  // no token: dropped (tokenizer.h)
      if (m_idKind[id] == kVocabToken) {
        bytes += m_idToBytes[id];
        continue;
      }
      // A skipped special leaves the bytes around it joined, as in Hugging Face.
      if (skipSpecial && m_idKind[id] == kSpecialToken) continue;
      out += utf8Lossy(bytes);
      bytes.clear();
      out += m_idToBytes[id];
    }
    return out + utf8Lossy(bytes);
  }

  int32_t vocabSize() const override { return static_cast<int32_t>(m_idToBytes.size()); }

  std::optional<int32_t> specialToken(const std::string& content) const override {
    auto it = m_addedByContent.find(content);
    if (it == m_addedByContent.end()) return std::nullopt;
    return m_added[it->second].id;
  }

  bool isSpecial(int32_t id) const override {
    return id >= 0 && id < vocabSize() && m_idKind[id] == kSpecialToken;
  }
  std::string kind() const override { return "bpe"; }
  std::optional<int32_t> bosId() const override { return m_bos; }
  std::optional<int32_t> eosId() const override { return m_eos; }
  std::optional<int32_t> padId() const override { return m_pad; }

 private:
  enum : uint8_t { kNoToken, kVocabToken, kAddedToken, kSpecialToken };

  // One heap entry: merge the symbol at `position` with its right neighbour.
  struct Candidate {
    int32_t rank, position, merged;
    bool operator<(const Candidate& other) const {  // priority_queue pops the largest
      return rank != other.rank ? rank > other.rank : position > other.position;
    }
  };

  void parseNormalizer(const json& normalizer, const std::string& field) {
    if (normalizer.is_null()) return;
    const std::string type = typeOf(normalizer, field, m_where);
    if (type == "NFC") return;  // accepted, not applied: see tokenizer.h
    if (type == "Sequence") {
      const json& list = requireField(normalizer, "normalizers", field, m_where);
      if (!list.is_array()) throw Error(field + ".normalizers must be an array", m_where);
      for (size_t i = 0; i < list.size(); ++i) {
        parseNormalizer(list[i], field + ".normalizers[" + std::to_string(i) + "]");
      }
      return;
    }
    throw Error(field + ".type \"" + type + "\" is not supported", m_where,
                "supported normalizers: null, NFC");
  }

  void parsePreTokenizer(const json& step, const std::string& field) {
    const std::string type = typeOf(step, field, m_where);
    if (type == "Sequence") {
      const json& list = requireField(step, "pretokenizers", field, m_where);
      if (!list.is_array()) throw Error(field + ".pretokenizers must be an array", m_where);
      for (size_t i = 0; i < list.size(); ++i) {
        parsePreTokenizer(list[i], field + ".pretokenizers[" + std::to_string(i) + "]");
      }
    } else if (type == "ByteLevel") {
      m_byteLevel = true;
      // Hugging Face's defaults when the keys are absent.
      if (optionalBool(step, "add_prefix_space", true, field, m_where)) {
        m_steps.push_back({nullptr, true});
      }
      if (optionalBool(step, "use_regex", true, field, m_where)) {
        m_steps.push_back(
            {std::make_shared<Regex>(kGpt2Pattern, false, field + " (GPT-2 regex)", m_where)});
      }
    } else if (type == "Split") {
      const json& pattern = requireField(step, "pattern", field, m_where);
      const bool isRegex = pattern.is_object() && pattern.contains("Regex");
      const bool isString = pattern.is_object() && pattern.contains("String");
      const json& text = isRegex ? pattern["Regex"] : isString ? pattern["String"] : pattern;
      if ((!isRegex && !isString) || !text.is_string()) {
        throw Error(field + ".pattern must be {\"Regex\": string} or {\"String\": string}",
                    m_where);
      }
      const json& behavior = requireField(step, "behavior", field, m_where);
      if (behavior != "Isolated") {
        throw Error(field + ".behavior " + behavior.dump() + " is not supported", m_where,
                    "supported: Isolated");
      }
      if (optionalBool(step, "invert", false, field, m_where)) {
        throw Error(field + ".invert true is not supported", m_where);
      }
      m_steps.push_back({std::make_shared<Regex>(text.get<std::string>(), isString,
                                                 field + ".pattern", m_where)});
    } else {
      throw Error(field + ".type \"" + type + "\" is not supported", m_where,
                  "supported pre-tokenizers: ByteLevel, Split (Isolated), Sequence of these");
    }
  }

  void setToken(int32_t id, std::string bytes, uint8_t kind) {
    if (id >= static_cast<int32_t>(m_idToBytes.size())) {
      m_idToBytes.resize(id + 1);
      m_idKind.resize(id + 1, kNoToken);
    }
    m_idToBytes[id] = std::move(bytes);
    m_idKind[id] = kind;
  }

  void parseModel(const json& model) {
    const std::string type = typeOf(model, "model", m_where);
    if (type != "BPE") {
      throw Error("model.type \"" + type + "\" is not supported", m_where,
                  "only byte-level BPE models are supported");
    }
    const json& dropout = model.value("dropout", json());
    if (!dropout.is_null() && !(dropout.is_number() && dropout.get<double>() == 0.0)) {
      throw Error("model.dropout " + dropout.dump() + " is not supported", m_where,
                  "BPE dropout makes encoding random; set it to null");
    }
    if (optionalBool(model, "byte_fallback", false, "model", m_where)) {
      throw Error("model.byte_fallback true is not supported", m_where,
                  "that is SentencePiece-style BPE; only byte-level BPE is supported");
    }
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      const json& affix = model.value(key, json());
      if (!affix.is_null() && affix != "") {
        throw Error(std::string("model.") + key + " " + affix.dump() + " is not supported",
                    m_where);
      }
    }
    m_ignoreMerges = optionalBool(model, "ignore_merges", false, "model", m_where);

    const json& vocab = requireField(model, "vocab", "model", m_where);
    if (!vocab.is_object()) throw Error("model.vocab must be an object", m_where);
    std::unordered_map<std::string, int32_t> idOfText;
    idOfText.reserve(vocab.size());
    m_byteIds.fill(-1);
    for (const auto& [text, value] : vocab.items()) {
      const int32_t id = tokenId(value, "model.vocab[\"" + text + "\"]", m_where);
      if (id < static_cast<int32_t>(m_idKind.size()) && m_idKind[id] != kNoToken) {
        throw Error("model.vocab gives id " + std::to_string(id) + " to two tokens", m_where);
      }
      std::optional<std::string> bytes = byteLevelAlphabet().toBytes(text);
      if (bytes) {
        if (bytes->size() == 1) m_byteIds[static_cast<uint8_t>((*bytes)[0])] = id;
        m_idOfBytes.emplace(*bytes, id);
      }
      setToken(id, bytes ? *bytes : text, kVocabToken);
      idOfText.emplace(text, id);
    }

    const json& merges = requireField(model, "merges", "model", m_where);
    if (!merges.is_array()) throw Error("model.merges must be an array", m_where);
    m_merges.reserve(merges.size());
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      const std::string field = "model.merges[" + std::to_string(rank) + "]";
      const json& merge = merges[rank];
      std::string left, right;
      if (merge.is_string()) {
        const std::string text = merge.get<std::string>();
        const size_t space = text.find(' ');
        if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
          throw Error(field + " " + merge.dump() + " is not two tokens separated by one space",
                      m_where);
        }
        left = text.substr(0, space), right = text.substr(space + 1);
      } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
                 merge[1].is_string()) {
        left = merge[0].get<std::string>(), right = merge[1].get<std::string>();
      } else {
        throw Error(field + " must be \"left right\" or [\"left\", \"right\"], not " + merge.dump(),
                    m_where);
      }
      const auto lookup = [&](const std::string& text) {
        auto it = idOfText.find(text);
        if (it == idOfText.end()) {
          throw Error(field + ": token \"" + text + "\" is not in model.vocab", m_where);
        }
        return it->second;
      };
      const int32_t leftId = lookup(left), rightId = lookup(right), merged = lookup(left + right);
      // A repeated pair keeps its first (best) rank.
      m_merges.emplace(pairKey(leftId, rightId), Merge{static_cast<int32_t>(rank), merged});
    }

    const json& unk = model.value("unk_token", json());
    if (unk.is_string()) {
      auto it = idOfText.find(unk.get<std::string>());
      if (it != idOfText.end()) m_unk = it->second;
    }
  }

  void parseAddedTokens(const json& list) {
    if (list.is_null()) return;
    if (!list.is_array()) throw Error("added_tokens must be an array", m_where);
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string field = "added_tokens[" + std::to_string(i) + "]";
      const json& entry = list[i];
      if (!entry.is_object()) throw Error(field + " must be an object", m_where);
      AddedToken token;
      token.id = tokenId(requireField(entry, "id", field, m_where), field + ".id", m_where);
      const json& content = requireField(entry, "content", field, m_where);
      if (!content.is_string() || content.get<std::string>().empty()) {
        throw Error(field + ".content must be a non-empty string", m_where);
      }
      token.content = content.get<std::string>();
      token.special = optionalBool(entry, "special", false, field, m_where);
      token.lstrip = optionalBool(entry, "lstrip", false, field, m_where);
      token.rstrip = optionalBool(entry, "rstrip", false, field, m_where);
      token.singleWord = optionalBool(entry, "single_word", false, field, m_where);
      if (m_addedByContent.count(token.content)) {
        throw Error(field + ": \"" + token.content + "\" is added twice", m_where);
      }
      setToken(token.id, token.content, token.special ? kSpecialToken : kAddedToken);
      m_addedByContent.emplace(token.content, m_added.size());
      m_addedByFirstByte[static_cast<uint8_t>(token.content[0])].push_back(m_added.size());
      m_added.push_back(std::move(token));
    }
    // Longest first, so the first match at a position is the longest one.
    for (auto& candidates : m_addedByFirstByte) {
      std::stable_sort(candidates.begin(), candidates.end(), [&](size_t a, size_t b) {
        return m_added[a].content.size() > m_added[b].content.size();
      });
    }
  }

  std::optional<int32_t> findBos(const json& processor) const {
    if (!processor.is_object()) return std::nullopt;
    const std::string type = processor.value("type", std::string());
    if (type == "Sequence" && processor.contains("processors") &&
        processor["processors"].is_array()) {
      for (const json& inner : processor["processors"]) {
        if (auto bos = findBos(inner)) return bos;
      }
      return std::nullopt;
    }
    if (type != "TemplateProcessing") return std::nullopt;
    const json& single = processor.value("single", json());
    if (!single.is_array() || single.empty() || !single[0].is_object()) return std::nullopt;
    const json& first = single[0].value("SpecialToken", json());
    if (!first.is_object() || !first.contains("id") || !first["id"].is_string()) {
      return std::nullopt;
    }
    return specialToken(first["id"].get<std::string>());
  }

  std::vector<int32_t> encodeText(std::string_view text, bool allAdded) const {
    if (auto offset = findInvalidUtf8(text)) {
      throw Error(
          "cannot encode text that is not valid UTF-8 (byte " + std::to_string(*offset) + ")",
          m_where);
    }
    std::vector<MatchData> matchData;
    for (const PreTokenizeStep& step : m_steps) {
      matchData.push_back(step.split ? step.split->newMatchData() : nullptr);
    }
    std::vector<int32_t> ids;
    size_t segmentStart = 0;
    for (size_t i = 0; i < text.size();) {
      const AddedToken* found = nullptr;
      for (size_t index : m_addedByFirstByte[static_cast<uint8_t>(text[i])]) {
        const AddedToken& token = m_added[index];
        if ((token.special && !allAdded) || text.compare(i, token.content.size(), token.content)) {
          continue;
        }
        const size_t end = i + token.content.size();
        if (token.singleWord && ((i > 0 && isAsciiWordChar(text[i - 1])) ||
                                 (end < text.size() && isAsciiWordChar(text[end])))) {
          continue;
        }
        found = &token;
        break;
      }
      if (!found) {
        ++i;
        continue;
      }
      size_t start = i, end = i + found->content.size();
      if (found->lstrip) {
        while (start > segmentStart && isAsciiSpace(text[start - 1])) --start;
      }
      if (found->rstrip) {
        while (end < text.size() && isAsciiSpace(text[end])) ++end;
      }
      encodeSegment(text.substr(segmentStart, start - segmentStart), matchData, ids);
      ids.push_back(found->id);
      segmentStart = i = end;
    }
    encodeSegment(text.substr(segmentStart), matchData, ids);
    return ids;
  }

  void encodeSegment(std::string_view segment, const std::vector<MatchData>& matchData,
                     std::vector<int32_t>& ids) const {
    if (segment.empty()) return;
    std::vector<std::string> pieces{std::string(segment)}, next;
    for (size_t s = 0; s < m_steps.size(); ++s) {
      next.clear();
      for (std::string& piece : pieces) {
        if (m_steps[s].split) {
          m_steps[s].split->splitIsolated(piece, matchData[s].get(), next);
        } else {
          next.push_back(piece.empty() || piece[0] == ' ' ? std::move(piece) : " " + piece);
        }
      }
      pieces.swap(next);
    }
    for (const std::string& piece : pieces) encodePiece(piece, ids);
  }

  int32_t byteId(uint8_t byte) const {
    if (m_byteIds[byte] >= 0) return m_byteIds[byte];
    if (m_unk) return *m_unk;
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02X", byte);
    throw Error(std::string("byte ") + hex + " has no token and model.unk_token is not set",
                m_where);
  }

  // BPE over the bytes of one piece: repeatedly merge the adjacent pair of lowest rank (leftmost
  // on ties). A heap of candidates with lazy invalidation keeps long pieces O(n log n).
  void encodePiece(const std::string& piece, std::vector<int32_t>& ids) const {
    if (m_ignoreMerges) {
      auto it = m_idOfBytes.find(piece);
      if (it != m_idOfBytes.end()) {
        ids.push_back(it->second);
        return;
      }
    }
    const int32_t n = static_cast<int32_t>(piece.size());
    if (n == 1) {
      ids.push_back(byteId(static_cast<uint8_t>(piece[0])));
      return;
    }
    struct Symbol {
      int32_t id, previous, next;
    };
    std::vector<Symbol> symbols(n);
    for (int32_t i = 0; i < n; ++i) {
      symbols[i] = {byteId(static_cast<uint8_t>(piece[i])), i - 1, i + 1 < n ? i + 1 : -1};
    }
    std::priority_queue<Candidate> queue;
    const auto consider = [&](int32_t position) {
      if (position < 0 || symbols[position].next < 0) return;
      auto it = m_merges.find(pairKey(symbols[position].id, symbols[symbols[position].next].id));
      if (it != m_merges.end()) queue.push({it->second.rank, position, it->second.merged});
    };
    for (int32_t i = 0; i + 1 < n; ++i) consider(i);
    while (!queue.empty()) {
      const Candidate top = queue.top();
      queue.pop();
      Symbol& left = symbols[top.position];
      // Stale when the symbol was absorbed (id -1) or either side has changed since the push.
      if (left.id < 0 || left.next < 0) continue;
      auto it = m_merges.find(pairKey(left.id, symbols[left.next].id));
      if (it == m_merges.end() || it->second.rank != top.rank) continue;
      Symbol& right = symbols[left.next];
      left.id = top.merged;
      left.next = right.next;
      if (right.next >= 0) symbols[right.next].previous = top.position;
      right.id = -1;
      consider(left.previous);
      consider(top.position);
    }
    for (int32_t i = 0; i >= 0; i = symbols[i].next) ids.push_back(symbols[i].id);
  }

  std::string m_where;
  std::vector<std::string> m_idToBytes;  // raw bytes (vocabulary) or text (added tokens)
  std::vector<uint8_t> m_idKind;
  std::unordered_map<std::string, int32_t> m_idOfBytes;  // for ignore_merges
  std::array<int32_t, 256> m_byteIds{};
  std::unordered_map<uint64_t, Merge> m_merges;
  bool m_ignoreMerges = false;
  std::optional<int32_t> m_unk, m_bos, m_eos, m_pad;
  std::vector<PreTokenizeStep> m_steps;
  bool m_byteLevel = false;
  std::vector<AddedToken> m_added;
  std::unordered_map<std::string, size_t> m_addedByContent;
  std::array<std::vector<size_t>, 256> m_addedByFirstByte;
};

}  // namespace

std::unique_ptr<Tokenizer> parseTokenizerJson(std::string_view text, const std::string& where) {
  json root;
  try {
    root = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    throw Error(std::string("not valid JSON: ") + e.what(), where);
  }
  try {
    return std::make_unique<BpeTokenizer>(root, where);
  } catch (const json::exception& e) {  // a type we did not check by hand
    throw Error(std::string("malformed tokenizer.json: ") + e.what(), where);
  }
}

std::unique_ptr<Tokenizer> loadTokenizerJson(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file)
    throw Error("cannot open the tokenizer", path, "expected a Hugging Face tokenizer.json");
  std::ostringstream text;
  text << file.rdbuf();
  return parseTokenizerJson(text.str(), path);
}

}  // namespace fp4lab::data
