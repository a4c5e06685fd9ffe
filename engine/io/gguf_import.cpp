// GGUF -> Hugging Face folder. The whole file is validated (names, types, shapes, metadata)
// before any tensor is decoded; tensors are decoded one at a time from the memory map.
#include "fp4lab/io/gguf_import.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "fp4lab/common/files.h"
#include "fp4lab/common/system.h"
#include "fp4lab/error.h"
#include "fp4lab/io/dtype.h"
#include "fp4lab/io/gguf.h"
#include "fp4lab/io/safetensors.h"

namespace fp4lab::io::gguf {
namespace {

using json = nlohmann::ordered_json;

std::string dumpJson(const json& j) {
  return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

// The shortest decimal that reads back as the same float (GGUF stores eps and theta as f32).
double shortestFloat(double value) {
  const float f = static_cast<float>(value);
  char buffer[64];
  for (int precision = 1; precision <= 9; ++precision) {
    std::snprintf(buffer, sizeof buffer, "%.*g", precision, static_cast<double>(f));
    if (std::strtof(buffer, nullptr) == f) return std::strtod(buffer, nullptr);
  }
  return f;
}

// GPT-2's bytes_to_unicode: the code point each byte is spelled with in a byte-level vocab.
struct ByteAlphabet {
  uint32_t codepoint[256];
  std::set<uint32_t> members;
  ByteAlphabet() {
    bool direct[256] = {};
    for (int b = 33; b <= 126; ++b) direct[b] = true;
    for (int b = 161; b <= 172; ++b) direct[b] = true;
    for (int b = 174; b <= 255; ++b) direct[b] = true;
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) codepoint[b] = direct[b] ? static_cast<uint32_t>(b) : next++;
    for (uint32_t c : codepoint) members.insert(c);
  }
};
const ByteAlphabet& byteAlphabet() {
  static const ByteAlphabet alphabet;
  return alphabet;
}

void appendUtf8(std::string& out, uint32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

// Whether every character of `text` (UTF-8) is in the byte alphabet; false for invalid UTF-8.
bool spelledInAlphabet(const std::string& text) {
  const auto& members = byteAlphabet().members;
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    uint32_t c;
    size_t len;
    if (s[i] < 0x80) {
      c = s[i], len = 1;
    } else if ((s[i] & 0xE0) == 0xC0) {
      c = s[i] & 0x1F, len = 2;
    } else if ((s[i] & 0xF0) == 0xE0) {
      c = s[i] & 0x0F, len = 3;
    } else if ((s[i] & 0xF8) == 0xF0) {
      c = s[i] & 0x07, len = 4;
    } else {
      return false;
    }
    if (i + len > n) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return false;
      c = (c << 6) | (s[i + k] & 0x3F);
    }
    if (!members.count(c)) return false;
    i += len;
  }
  return true;
}

// A token as a byte-level vocabulary spells it: as is when it already is in the alphabet
// (what llama.cpp stores for a gpt2 vocabulary), else its UTF-8 bytes respelled.
std::string byteLevelSpelling(const std::string& token) {
  if (spelledInAlphabet(token)) return token;
  std::string out;
  for (unsigned char b : token) appendUtf8(out, byteAlphabet().codepoint[b]);
  return out;
}

// The split regexes transformers applies for tokenizer.ggml.pre (its GGUF_PRE_TOKENIZER_SPLITS).
const char* kLlama3Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* kTekkenSplit =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* kGpt4oSplit =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* kQwen2Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* kQwen35Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

const char* splitFor(const std::string& pre) {
  static const std::map<std::string, const char*> splits = {
      {"llama3", kLlama3Split},       {"llama-v3", kLlama3Split},
      {"llama-bpe", kLlama3Split},    {"falcon3", kLlama3Split},
      {"falcon-h1", kLlama3Split},    {"pixtral", kLlama3Split},
      {"midm-2.0", kLlama3Split},     {"lfm2", kLlama3Split},
      {"jina-v5-nano", kLlama3Split}, {"dbrx", kLlama3Split},
      {"smaug-bpe", kLlama3Split},    {"tekken", kTekkenSplit},
      {"qwen2", kQwen2Split},         {"deepseek-r1-qwen", kQwen2Split},
      {"kormo", kQwen2Split},         {"f2llmv2", kQwen2Split},
      {"megrez", kQwen2Split},        {"qwen35", kQwen35Split},
      {"gpt-4o", kGpt4oSplit},        {"llama4", kGpt4oSplit},
      {"kanana2", kGpt4oSplit},       {"talkie", kGpt4oSplit},
      {"minimax-m2", kGpt4oSplit},
  };
  auto it = splits.find(pre);
  return it == splits.end() ? nullptr : it->second;
}

const Value& requireArray(const File& file, const std::string& key, ValueType element) {
  const Value* v = file.find(key);
  if (!v) throw Error("missing key '" + key + "'", file.path(), "the tokenizer cannot be rebuilt");
  if (v->type != ValueType::ARRAY || v->elementType != element)
    throw Error("key '" + key + "' must be an array of " + valueTypeName(element),
                file.path() + " (offset " + std::to_string(v->offset) + ")");
  return *v;
}

std::optional<int64_t> tokenId(const File& file, const std::string& key, size_t vocab) {
  const Value* v = file.find(key);
  if (!v) return std::nullopt;
  const int64_t id = file.requireInteger(key);
  if (id < 0 || static_cast<uint64_t>(id) >= vocab)
    throw Error("key '" + key + "' = " + std::to_string(id) + " is not a token id (vocabulary of " +
                    std::to_string(vocab) + ")",
                file.path() + " (offset " + std::to_string(v->offset) + ")");
  return id;
}

struct Hparams {
  int64_t hidden = 0, layers = 0, ffn = 0, heads = 0, kvHeads = 0, headDim = 0, context = 0;
  int64_t vocab = 0;
  double eps = 0, ropeTheta = 10000;
  json ropeScaling;  // null or {"rope_type": "linear", "factor": f}
  bool tied = false;
};

std::string archKey(const std::string& name) {
  return "llama." + name;
}

Hparams readHparams(const File& file) {
  Hparams h;
  h.hidden = file.requireInteger(archKey("embedding_length"));
  h.layers = file.requireInteger(archKey("block_count"));
  h.ffn = file.requireInteger(archKey("feed_forward_length"));
  h.heads = file.requireInteger(archKey("attention.head_count"));
  h.kvHeads = file.integerOr(archKey("attention.head_count_kv"), h.heads);
  h.context = file.integerOr(archKey("context_length"), 2048);
  const Value* eps = file.find(archKey("attention.layer_norm_rms_epsilon"));
  if (!eps || !eps->isReal())
    throw Error("missing or non-float key 'llama.attention.layer_norm_rms_epsilon'", file.path());
  h.eps = eps->type == ValueType::F32 ? shortestFloat(eps->real) : eps->real;
  const Value* theta = file.find(archKey("rope.freq_base"));
  if (theta) {
    h.ropeTheta = file.realOr(archKey("rope.freq_base"), 10000);
    if (theta->type == ValueType::F32) h.ropeTheta = shortestFloat(h.ropeTheta);
  }
  auto positive = [&](int64_t v, const char* key) {
    if (v <= 0 || v > (1ll << 24))
      throw Error(
          "key 'llama." + std::string(key) + "' = " + std::to_string(v) + " is out of range",
          file.path());
  };
  positive(h.hidden, "embedding_length");
  positive(h.layers, "block_count");
  positive(h.ffn, "feed_forward_length");
  positive(h.heads, "attention.head_count");
  positive(h.kvHeads, "attention.head_count_kv");
  positive(h.context, "context_length");
  if (!(h.eps > 0) || !(h.ropeTheta > 0))
    throw Error("rms epsilon and rope.freq_base must be positive", file.path());
  if (h.heads % h.kvHeads)
    throw Error("attention.head_count " + std::to_string(h.heads) +
                    " is not a multiple of head_count_kv " + std::to_string(h.kvHeads),
                file.path());
  h.headDim = file.integerOr(archKey("attention.key_length"), h.hidden / h.heads);
  if (h.headDim <= 0 || h.headDim % 2 ||
      file.integerOr(archKey("attention.value_length"), h.headDim) != h.headDim ||
      (!file.find(archKey("attention.key_length")) && h.hidden % h.heads))
    throw Error("unsupported head dimension " + std::to_string(h.headDim), file.path(),
                "even key_length == value_length is required");
  const int64_t rotary = file.integerOr(archKey("rope.dimension_count"), h.headDim);
  if (rotary != h.headDim)
    throw Error("partial rotary embedding (rope.dimension_count " + std::to_string(rotary) +
                    " of head dimension " + std::to_string(h.headDim) + ") is not supported",
                file.path());
  if (file.integerOr(archKey("expert_count"), 0) > 0)
    throw Error("mixture-of-experts llama files (llama.expert_count) are not supported",
                file.path(), "only dense llama models can be imported");
  const std::string scaling = file.stringOr(archKey("rope.scaling.type"), "none");
  if (scaling == "linear") {
    const double factor = file.realOr(archKey("rope.scaling.factor"), 1.0);
    if (factor != 1.0) h.ropeScaling = {{"rope_type", "linear"}, {"factor", shortestFloat(factor)}};
  } else if (scaling != "none") {
    throw Error("unsupported rope scaling '" + scaling + "' (key 'llama.rope.scaling.type')",
                file.path(), "supported: none, linear");
  }
  return h;
}

struct Planned {
  const TensorInfo* info;
  std::string hfName;
  std::vector<int64_t> shape;  // torch order
  int64_t permuteHeads = 0;    // q/k: the heads of the rotary permutation to undo
};

[[noreturn]] void tensorError(const File& file, const TensorInfo& t, const std::string& what,
                              const std::string& hint = {}) {
  throw Error(
      what, file.path() + " (tensor '" + t.name + "', offset " + std::to_string(t.infoOffset) + ")",
      hint);
}

std::string shapeText(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::vector<Planned> planTensors(const File& file, Hparams& h) {
  const TensorInfo* embed = file.findTensor("token_embd.weight");
  if (!embed) throw Error("missing tensor 'token_embd.weight'", file.path());
  if (embed->ne.size() != 2) tensorError(file, *embed, "token_embd.weight must be 2-D");
  h.vocab = static_cast<int64_t>(embed->ne[1]);
  h.tied = file.findTensor("output.weight") == nullptr;
  const int64_t q = h.heads * h.headDim, kv = h.kvHeads * h.headDim;
  std::map<std::string, std::pair<std::string, std::vector<int64_t>>> expected = {
      {"token_embd.weight", {"model.embed_tokens.weight", {h.vocab, h.hidden}}},
      {"output_norm.weight", {"model.norm.weight", {h.hidden}}},
  };
  if (!h.tied) expected["output.weight"] = {"lm_head.weight", {h.vocab, h.hidden}};
  struct LayerTensor {
    const char* gguf;
    const char* hf;
    std::vector<int64_t> shape;
  };
  const LayerTensor layerTensors[] = {
      {"attn_norm", "input_layernorm", {h.hidden}},
      {"ffn_norm", "post_attention_layernorm", {h.hidden}},
      {"attn_q", "self_attn.q_proj", {q, h.hidden}},
      {"attn_k", "self_attn.k_proj", {kv, h.hidden}},
      {"attn_v", "self_attn.v_proj", {kv, h.hidden}},
      {"attn_output", "self_attn.o_proj", {h.hidden, q}},
      {"ffn_gate", "mlp.gate_proj", {h.ffn, h.hidden}},
      {"ffn_up", "mlp.up_proj", {h.ffn, h.hidden}},
      {"ffn_down", "mlp.down_proj", {h.hidden, h.ffn}},
  };
  for (int64_t layer = 0; layer < h.layers; ++layer) {
    for (const auto& lt : layerTensors) {
      expected["blk." + std::to_string(layer) + "." + lt.gguf + ".weight"] = {
          "model.layers." + std::to_string(layer) + "." + lt.hf + ".weight", lt.shape};
    }
  }

  std::vector<Planned> plan;
  for (const TensorInfo& t : file.tensors()) {
    auto it = expected.find(t.name);
    if (it == expected.end()) {
      std::string hint = "only the tensors of a dense llama model are imported";
      if (t.name == "rope_freqs.weight")
        hint = "llama 3.1-style rope scaling (rope_freqs) is not supported";
      tensorError(file, t, "unexpected tensor", hint);
    }
    const std::vector<int64_t> shape = t.torchShape();
    if (shape != it->second.second)
      tensorError(file, t,
                  "shape " + shapeText(shape) + " does not match the model's " +
                      shapeText(it->second.second));
    if (!canDecode(t.type))
      tensorError(file, t,
                  std::string("unsupported tensor type ") +
                      tensorTypeName(static_cast<uint32_t>(t.type)) + " in " + t.name +
                      ": fp4lab decodes F32, F16, BF16, Q8_0, Q4_0, Q4_1, "
                      "Q5_0, Q5_1, Q4_K, Q5_K and Q6_K exactly",
                  "requantize the file to one of these with llama-quantize, or convert the "
                  "original Hugging Face model");
    Planned p{&t, it->second.first, shape, 0};
    if (endsWith(t.name, ".attn_q.weight")) p.permuteHeads = h.heads;
    if (endsWith(t.name, ".attn_k.weight")) p.permuteHeads = h.kvHeads;
    plan.push_back(std::move(p));
    expected.erase(it);
  }
  if (!expected.empty())
    throw Error("missing tensor '" + expected.begin()->first + "' (and " +
                    std::to_string(expected.size() - 1) + " more)",
                file.path(), "the file is not a complete llama model");
  return plan;
}

struct StagingGuard {
  std::string path;
  ~StagingGuard() {
    if (!path.empty()) files::removeTree(path);
  }
};

}  // namespace

void permuteRotaryRows(const float* src, float* dst, int64_t rows, int64_t cols, int64_t heads) {
  // dst[h, i, j] = src[h, j, i] with src viewed as [heads, 2, half] rows, dst as [heads, half, 2].
  const int64_t per = rows / heads, half = per / 2;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t j = 0; j < 2; ++j)
        std::memcpy(dst + (h * per + i * 2 + j) * cols, src + (h * per + j * half + i) * cols,
                    sizeof(float) * cols);
}

void unpermuteRotaryRows(const float* src, float* dst, int64_t rows, int64_t cols, int64_t heads) {
  const int64_t per = rows / heads, half = per / 2;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t j = 0; j < 2; ++j)
        std::memcpy(dst + (h * per + j * half + i) * cols, src + (h * per + i * 2 + j) * cols,
                    sizeof(float) * cols);
}

std::string buildTokenizerJson(const File& file) {
  const std::string model = file.stringOr("tokenizer.ggml.model", "");
  if (model != "gpt2")
    throw Error("unsupported tokenizer model '" + model + "' (key 'tokenizer.ggml.model')",
                file.path(), "only byte-level BPE vocabularies (\"gpt2\") are supported");
  const Value& tokens = requireArray(file, "tokenizer.ggml.tokens", ValueType::STRING);
  const Value& merges = requireArray(file, "tokenizer.ggml.merges", ValueType::STRING);
  const Value* types = file.find("tokenizer.ggml.token_type");
  if (types && (types->type != ValueType::ARRAY || !types->integers.size() ||
                types->integers.size() != tokens.texts.size()))
    throw Error("key 'tokenizer.ggml.token_type' must be an integer array as long as the tokens",
                file.path() + " (offset " + std::to_string(types->offset) + ")");
  const size_t n = tokens.texts.size();

  json vocab = json::object();
  std::vector<std::string> spelled(n);
  for (size_t i = 0; i < n; ++i) {
    spelled[i] = byteLevelSpelling(tokens.texts[i]);
    vocab[spelled[i]] = i;  // a repeated spelling keeps the last id, as a Python dict does
  }
  json mergeList = json::array();
  for (const std::string& merge : merges.texts) {
    const size_t space = merge.find(' ');
    if (space == std::string::npos || merge.find(' ', space + 1) != std::string::npos)
      throw Error("merge \"" + merge + "\" is not two tokens separated by one space",
                  file.path() + " (key 'tokenizer.ggml.merges')");
    mergeList.push_back({merge.substr(0, space), merge.substr(space + 1)});
  }

  // Added tokens: control (3) as special, user-defined (4) as plain; the special ids too.
  std::map<size_t, bool> added;  // id -> special
  if (types) {
    for (size_t i = 0; i < n; ++i) {
      const int64_t type = types->integers[i];
      if (type == 3 && spelledInAlphabet(tokens.texts[i])) added[i] = true;
      if (type == 4 && vocab.contains(tokens.texts[i]) && !added.count(i)) added[i] = false;
    }
  }
  for (const char* key : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                          "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id"}) {
    if (auto id = tokenId(file, key, n)) added[static_cast<size_t>(*id)] = true;
  }
  json addedTokens = json::array();
  for (const auto& [id, special] : added) {
    addedTokens.push_back({{"id", id},
                           {"content", tokens.texts[id]},
                           {"single_word", false},
                           {"lstrip", false},
                           {"rstrip", false},
                           {"normalized", false},
                           {"special", special}});
  }

  json byteLevel = {{"type", "ByteLevel"},
                    {"add_prefix_space", false},
                    {"trim_offsets", true},
                    {"use_regex", true}};
  json preTokenizer = byteLevel;
  if (const char* split = splitFor(file.stringOr("tokenizer.ggml.pre", ""))) {
    json noRegex = byteLevel;
    noRegex["use_regex"] = false;
    preTokenizer = {{"type", "Sequence"},
                    {"pretokenizers",
                     {{{"type", "Split"},
                       {"pattern", {{"Regex", split}}},
                       {"behavior", "Isolated"},
                       {"invert", false}},
                      noRegex}}};
  }

  json postProcessor = nullptr;
  const bool addBos = file.boolOr("tokenizer.ggml.add_bos_token", false);
  const bool addEos = file.boolOr("tokenizer.ggml.add_eos_token", false);
  const auto bos = tokenId(file, "tokenizer.ggml.bos_token_id", n);
  const auto eos = tokenId(file, "tokenizer.ggml.eos_token_id", n);
  if ((addBos && bos) || (addEos && eos)) {
    json single = json::array(), pair = json::array(), specials = json::object();
    auto special = [&](int64_t id) {
      const std::string& text = tokens.texts[id];
      specials[text] = {{"id", text}, {"ids", {id}}, {"tokens", {text}}};
      return json{{"SpecialToken", {{"id", text}, {"type_id", 0}}}};
    };
    auto sequence = [](const char* id) { return json{{"Sequence", {{"id", id}, {"type_id", 0}}}}; };
    if (addBos && bos) single.push_back(special(*bos)), pair.push_back(special(*bos));
    single.push_back(sequence("A"));
    pair.push_back(sequence("A"));
    if (addEos && eos) single.push_back(special(*eos)), pair.push_back(special(*eos));
    if (addBos && bos) pair.push_back(special(*bos));
    pair.push_back(sequence("B"));
    if (addEos && eos) pair.push_back(special(*eos));
    postProcessor = {{"type", "TemplateProcessing"},
                     {"single", single},
                     {"pair", pair},
                     {"special_tokens", specials}};
  }

  json root = {{"version", "1.0"},
               {"truncation", nullptr},
               {"padding", nullptr},
               {"added_tokens", addedTokens},
               {"normalizer", nullptr},
               {"pre_tokenizer", preTokenizer},
               {"post_processor", postProcessor},
               {"decoder",
                {{"type", "ByteLevel"},
                 {"add_prefix_space", true},
                 {"trim_offsets", true},
                 {"use_regex", true}}},
               {"model",
                {{"type", "BPE"},
                 {"dropout", nullptr},
                 {"unk_token", nullptr},
                 {"continuing_subword_prefix", ""},
                 {"end_of_word_suffix", ""},
                 {"fuse_unk", false},
                 {"byte_fallback", false},
                 {"ignore_merges", false},
                 {"vocab", vocab},
                 {"merges", mergeList}}}};
  return root.dump(-1, ' ', false, json::error_handler_t::replace);
}

ImportSummary importGguf(const ImportOptions& options) {
  const std::string out = files::withoutTrailingSlash(options.outputDir);
  if (out.empty()) throw Error("no output folder given", "fp4lab import", "pass --output-dir OUT");
  if (files::exists(out)) {
    if (!files::isDirectory(out))
      throw Error("the output exists and is not a folder", out, "choose another --output-dir");
    if (!files::listDirectory(out).empty() && !options.force)
      throw Error("the output folder is not empty", out,
                  "pass --force to replace it, or choose another --output-dir");
    if (files::samePath(files::parentOf(options.source), out))
      throw Error("the source file is inside the output folder", out,
                  "choose another --output-dir");
  }

  File file(options.source);
  const std::string arch = file.requireString("general.architecture");
  if (arch != "llama")
    throw Error("unsupported architecture '" + arch + "' (key 'general.architecture')", file.path(),
                "only llama GGUF files are imported");
  Hparams h = readHparams(file);
  std::vector<Planned> plan = planTensors(file, h);
  const std::string tokenizerJson = buildTokenizerJson(file);
  const size_t vocabTokens = requireArray(file, "tokenizer.ggml.tokens", ValueType::STRING).count;
  if (vocabTokens > static_cast<size_t>(h.vocab))
    throw Error("the vocabulary has " + std::to_string(vocabTokens) +
                    " tokens but token_embd.weight only " + std::to_string(h.vocab) + " rows",
                file.path());
  const auto& texts = file.find("tokenizer.ggml.tokens")->texts;
  const auto bos = tokenId(file, "tokenizer.ggml.bos_token_id", vocabTokens);
  const auto eos = tokenId(file, "tokenizer.ggml.eos_token_id", vocabTokens);
  const auto unk = tokenId(file, "tokenizer.ggml.unknown_token_id", vocabTokens);
  const auto pad = tokenId(file, "tokenizer.ggml.padding_token_id", vocabTokens);
  const Value* chatTemplate = file.find("tokenizer.chat_template");
  if (chatTemplate && chatTemplate->type != ValueType::STRING)
    throw Error("key 'tokenizer.chat_template' must be a string", file.path());

  const std::string parent = files::parentOf(out);
  files::createDirectories(parent);
  StagingGuard staging{
      files::makeTemporaryDirectory(files::join(parent, "." + files::baseName(out) + ".import-"))};

  // Tensors: decode, undo the rotary permutation, round.
  ImportSummary summary;
  SafetensorsWriter writer;
  std::vector<float> decoded, unpermuted;
  for (size_t i = 0; i < plan.size(); ++i) {
    const Planned& p = plan[i];
    if (options.progress) options.progress(p.hfName, i, plan.size());
    const uint64_t numel = p.info->numel();
    decoded.resize(numel);
    decodeToFloat32(p.info->type, file.data(*p.info), numel, decoded.data());
    const float* values = decoded.data();
    if (p.permuteHeads) {
      const int64_t rows = p.shape[0], cols = p.shape[1];
      if (rows % (2 * p.permuteHeads))
        tensorError(file, *p.info, "rows are not a multiple of 2 x heads");
      unpermuted.resize(numel);
      unpermuteRotaryRows(decoded.data(), unpermuted.data(), rows, cols, p.permuteHeads);
      values = unpermuted.data();
    }
    std::vector<uint8_t> bytes;
    if (options.float32) {
      bytes.resize(numel * 4);
      std::memcpy(bytes.data(), values, numel * 4);
    } else {
      bytes.resize(numel * 2);
      for (uint64_t k = 0; k < numel; ++k) {
        const uint16_t b = floatToBf16(values[k]);
        bytes[2 * k] = static_cast<uint8_t>(b);
        bytes[2 * k + 1] = static_cast<uint8_t>(b >> 8);
      }
    }
    summary.bytesIn += p.info->bytes;
    summary.bytesOut += bytes.size();
    writer.add(p.hfName, options.float32 ? DType::F32 : DType::BF16, p.shape, std::move(bytes));
  }
  decoded = {};
  unpermuted = {};
  writer.write(files::join(staging.path, "model.safetensors"));

  const char* dtype = options.float32 ? "float32" : "bfloat16";
  json config = {{"architectures", {"LlamaForCausalLM"}},
                 {"model_type", "llama"},
                 {"vocab_size", h.vocab},
                 {"hidden_size", h.hidden},
                 {"intermediate_size", h.ffn},
                 {"num_hidden_layers", h.layers},
                 {"num_attention_heads", h.heads},
                 {"num_key_value_heads", h.kvHeads},
                 {"head_dim", h.headDim},
                 {"hidden_act", "silu"},
                 {"max_position_embeddings", h.context},
                 {"rms_norm_eps", h.eps},
                 {"rope_theta", h.ropeTheta},
                 {"rope_scaling", h.ropeScaling},
                 {"attention_bias", false},
                 {"mlp_bias", false},
                 {"tie_word_embeddings", h.tied},
                 {"initializer_range", 0.02}};
  json ropeParameters = {{"rope_type", "default"}, {"rope_theta", h.ropeTheta}};
  if (!h.ropeScaling.is_null()) {
    ropeParameters["rope_type"] = "linear";
    ropeParameters["factor"] = h.ropeScaling["factor"];
  }
  config["rope_parameters"] = ropeParameters;
  if (bos) config["bos_token_id"] = *bos;
  if (eos) config["eos_token_id"] = *eos;
  if (pad) config["pad_token_id"] = *pad;
  config["torch_dtype"] = dtype;
  config["dtype"] = dtype;
  files::writeFileAtomically(files::join(staging.path, "config.json"), dumpJson(config));

  json generation = {{"_from_model_config", true}};
  if (bos) generation["bos_token_id"] = *bos;
  if (eos) generation["eos_token_id"] = *eos;
  if (pad) generation["pad_token_id"] = *pad;
  files::writeFileAtomically(files::join(staging.path, "generation_config.json"),
                             dumpJson(generation));

  files::writeFileAtomically(files::join(staging.path, "tokenizer.json"), tokenizerJson);
  json tokenizerConfig = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                          {"add_bos_token", file.boolOr("tokenizer.ggml.add_bos_token", false)},
                          {"add_eos_token", file.boolOr("tokenizer.ggml.add_eos_token", false)},
                          {"clean_up_tokenization_spaces", false},
                          {"model_max_length", h.context}};
  json specialMap = json::object();
  auto special = [&](const char* name, const std::optional<int64_t>& id) {
    if (!id) return;
    tokenizerConfig[name] = texts[*id];
    specialMap[name] = texts[*id];
  };
  special("bos_token", bos);
  special("eos_token", eos);
  special("unk_token", unk);
  special("pad_token", pad);
  if (chatTemplate) tokenizerConfig["chat_template"] = chatTemplate->text;
  files::writeFileAtomically(files::join(staging.path, "tokenizer_config.json"),
                             dumpJson(tokenizerConfig));
  files::writeFileAtomically(files::join(staging.path, "special_tokens_map.json"),
                             dumpJson(specialMap));

  files::publishFolder(staging.path, out);
  staging.path.clear();

  summary.tensors = plan.size();
  summary.architecture = arch;
  summary.tokenizerModel = "gpt2";
  summary.vocabSize = h.vocab;
  summary.layers = h.layers;
  return summary;
}

}  // namespace fp4lab::io::gguf
