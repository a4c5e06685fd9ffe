// The GGUF reader: ggml block decoders against straightforward transcriptions of llama.cpp's
// dequantize_row_* on random blocks, a malformed-file suite built by mutating a small valid file,
// the rotary row permutation, and the importer's refusal and atomicity rules.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "fp4lab/common/files.h"
#include "fp4lab/error.h"
#include "fp4lab/io/dtype.h"
#include "fp4lab/io/gguf.h"
#include "fp4lab/io/gguf_import.h"

using namespace fp4lab;
using namespace fp4lab::io::gguf;

namespace {

float half(const uint8_t* p) {
  float f;
  io::convertToFloat32(io::DType::F16, p, 1, &f);
  return f;
}

// Random block bytes whose fp16 scale fields are finite (random other bits).
std::vector<uint8_t> randomBlocks(std::mt19937& rng, size_t bytes, std::vector<size_t> halfFields,
                                  size_t blockBytes) {
  std::vector<uint8_t> b(bytes);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  for (size_t block = 0; block < bytes / blockBytes; ++block) {
    for (size_t f : halfFields) {
      uint16_t h = static_cast<uint16_t>(rng()) & 0xBBFF;  // exponent < 31: finite
      std::memcpy(&b[block * blockBytes + f], &h, 2);
    }
  }
  return b;
}

// llama.cpp's ggml-quants.c reference loops, transcribed.
void refQ4_0(const uint8_t* x, float* y, int nb) {
  for (int i = 0; i < nb; ++i, x += 18) {
    const float d = half(x);
    for (int j = 0; j < 16; ++j) {
      y[i * 32 + j] = ((x[2 + j] & 0x0F) - 8) * d;
      y[i * 32 + j + 16] = ((x[2 + j] >> 4) - 8) * d;
    }
  }
}
void refQ4_1(const uint8_t* x, float* y, int nb) {
  for (int i = 0; i < nb; ++i, x += 20) {
    const float d = half(x), m = half(x + 2);
    for (int j = 0; j < 16; ++j) {
      y[i * 32 + j] = (x[4 + j] & 0x0F) * d + m;
      y[i * 32 + j + 16] = (x[4 + j] >> 4) * d + m;
    }
  }
}
void refQ8_0(const uint8_t* x, float* y, int nb) {
  for (int i = 0; i < nb; ++i, x += 34)
    for (int j = 0; j < 32; ++j) y[i * 32 + j] = static_cast<int8_t>(x[2 + j]) * half(x);
}
void refQ5_0(const uint8_t* x, float* y, int nb) {
  for (int i = 0; i < nb; ++i, x += 22) {
    const float d = half(x);
    uint32_t qh;
    std::memcpy(&qh, x + 2, 4);
    for (int j = 0; j < 16; ++j) {
      const uint8_t xh0 = ((qh >> j) << 4) & 0x10, xh1 = ((qh >> (j + 12))) & 0x10;
      y[i * 32 + j] = (((x[6 + j] & 0x0F) | xh0) - 16) * d;
      y[i * 32 + j + 16] = (((x[6 + j] >> 4) | xh1) - 16) * d;
    }
  }
}
void refQ5_1(const uint8_t* x, float* y, int nb) {
  for (int i = 0; i < nb; ++i, x += 24) {
    const float d = half(x), m = half(x + 2);
    uint32_t qh;
    std::memcpy(&qh, x + 4, 4);
    for (int j = 0; j < 16; ++j) {
      const uint8_t xh0 = ((qh >> j) << 4) & 0x10, xh1 = ((qh >> (j + 12))) & 0x10;
      y[i * 32 + j] = ((x[8 + j] & 0x0F) | xh0) * d + m;
      y[i * 32 + j + 16] = ((x[8 + j] >> 4) | xh1) * d + m;
    }
  }
}
void getScaleMinK4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
  }
}
void refQ4_K(const uint8_t* x, float* y, int nb) {
  for (int i = 0; i < nb; ++i, x += 144) {
    const float d = half(x), min = half(x + 2);
    const uint8_t* q = x + 16;
    int is = 0;
    for (int j = 0; j < 256; j += 64) {
      uint8_t sc, m;
      getScaleMinK4(is + 0, x + 4, &sc, &m);
      const float d1 = d * sc, m1 = min * m;
      getScaleMinK4(is + 1, x + 4, &sc, &m);
      const float d2 = d * sc, m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
      q += 32;
      is += 2;
    }
  }
}
void refQ5_K(const uint8_t* x, float* y, int nb) {
  for (int i = 0; i < nb; ++i, x += 176) {
    const float d = half(x), min = half(x + 2);
    const uint8_t* ql = x + 48;
    const uint8_t* qh = x + 16;
    int is = 0;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < 256; j += 64) {
      uint8_t sc, m;
      getScaleMinK4(is + 0, x + 4, &sc, &m);
      const float d1 = d * sc, m1 = min * m;
      getScaleMinK4(is + 1, x + 4, &sc, &m);
      const float d2 = d * sc, m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      ql += 32;
      is += 2;
      u1 <<= 2;
      u2 <<= 2;
    }
  }
}
void refQ6_K(const uint8_t* x, float* y, int nb) {
  for (int i = 0; i < nb; ++i, x += 210) {
    const float d = half(x + 208);
    const uint8_t* ql = x;
    const uint8_t* qh = x + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(x + 192);
    for (int n = 0; n < 256; n += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int8_t q1 = static_cast<int8_t>((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int8_t q2 = static_cast<int8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int8_t q3 = static_cast<int8_t>((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int8_t q4 = static_cast<int8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * sc[is + 0] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// A small GGUF file, built field by field.
struct Builder {
  std::vector<uint8_t> bytes;
  void u32(uint32_t v) { raw(&v, 4); }
  void u64(uint64_t v) { raw(&v, 8); }
  void f32(float v) { raw(&v, 4); }
  void raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    bytes.insert(bytes.end(), b, b + n);
  }
  void str(const std::string& s) {
    u64(s.size());
    raw(s.data(), s.size());
  }
  void kvString(const std::string& k, const std::string& v) {
    str(k);
    u32(8);
    str(v);
  }
  void kvU32(const std::string& k, uint32_t v) {
    str(k);
    u32(4);
    u32(v);
  }
  void kvF32(const std::string& k, float v) {
    str(k);
    u32(6);
    f32(v);
  }
  void kvStrings(const std::string& k, const std::vector<std::string>& v) {
    str(k);
    u32(9);
    u32(8);
    u64(v.size());
    for (const auto& s : v) str(s);
  }
  void kvI32s(const std::string& k, const std::vector<int32_t>& v) {
    str(k);
    u32(9);
    u32(5);
    u64(v.size());
    for (int32_t x : v) raw(&x, 4);
  }
  void pad(size_t alignment) {
    while (bytes.size() % alignment) bytes.push_back(0);
  }
};

struct SmallTensor {
  std::string name;
  std::vector<uint64_t> ne;
  TensorType type;
  std::vector<uint8_t> data;
};

// A complete one-layer llama GGUF (hidden 32, 2 heads, 1 kv head, ffn 64, vocab 8).
std::vector<uint8_t> tinyLlama(std::mt19937& rng, std::vector<SmallTensor>* tensorsOut = nullptr) {
  const uint64_t hidden = 32, ffn = 64, vocab = 8, kv = 16;
  std::vector<SmallTensor> tensors;
  auto f32Tensor = [&](const std::string& name, std::vector<uint64_t> ne) {
    uint64_t n = 1;
    for (auto d : ne) n *= d;
    std::vector<uint8_t> data(n * 4);
    std::normal_distribution<float> normal(0.f, 0.1f);
    for (uint64_t i = 0; i < n; ++i) {
      const float v = normal(rng);
      std::memcpy(&data[i * 4], &v, 4);
    }
    tensors.push_back({name, ne, TensorType::F32, data});
  };
  auto q8Tensor = [&](const std::string& name, std::vector<uint64_t> ne) {
    uint64_t n = 1;
    for (auto d : ne) n *= d;
    tensors.push_back({name, ne, TensorType::Q8_0, randomBlocks(rng, n / 32 * 34, {0}, 34)});
  };
  f32Tensor("token_embd.weight", {hidden, vocab});
  f32Tensor("output_norm.weight", {hidden});
  f32Tensor("blk.0.attn_norm.weight", {hidden});
  f32Tensor("blk.0.ffn_norm.weight", {hidden});
  q8Tensor("blk.0.attn_q.weight", {hidden, hidden});
  q8Tensor("blk.0.attn_k.weight", {hidden, kv});
  f32Tensor("blk.0.attn_v.weight", {hidden, kv});
  q8Tensor("blk.0.attn_output.weight", {hidden, hidden});
  q8Tensor("blk.0.ffn_gate.weight", {hidden, ffn});
  q8Tensor("blk.0.ffn_up.weight", {hidden, ffn});
  q8Tensor("blk.0.ffn_down.weight", {ffn, hidden});

  Builder b;
  b.u32(0x46554747);
  b.u32(3);
  b.u64(tensors.size());
  b.u64(15);
  b.kvString("general.architecture", "llama");
  b.kvU32("general.alignment", 32);
  b.kvU32("llama.embedding_length", hidden);
  b.kvU32("llama.block_count", 1);
  b.kvU32("llama.feed_forward_length", ffn);
  b.kvU32("llama.attention.head_count", 2);
  b.kvU32("llama.attention.head_count_kv", 1);
  b.kvU32("llama.context_length", 64);
  b.kvF32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  b.kvF32("llama.rope.freq_base", 10000.f);
  b.kvString("tokenizer.ggml.model", "gpt2");
  b.kvStrings("tokenizer.ggml.tokens", {"a", "b", "c", "ab", "\xC4\xA0",
                                        "\xC4\xA0"
                                        "a",
                                        "<s>", "</s>"});
  b.kvStrings("tokenizer.ggml.merges", {"a b", "\xC4\xA0 a"});
  b.kvI32s("tokenizer.ggml.token_type", {1, 1, 1, 1, 1, 1, 3, 3});
  b.kvU32("tokenizer.ggml.eos_token_id", 7);
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    b.str(t.name);
    b.u32(static_cast<uint32_t>(t.ne.size()));
    for (auto d : t.ne) b.u64(d);
    b.u32(static_cast<uint32_t>(t.type));
    b.u64(offset);
    offset += (t.data.size() + 31) / 32 * 32;
  }
  b.pad(32);
  for (size_t i = 0; i < tensors.size(); ++i) {
    b.raw(tensors[i].data.data(), tensors[i].data.size());
    if (i + 1 < tensors.size()) b.pad(32);
  }
  if (tensorsOut) *tensorsOut = tensors;
  return b.bytes;
}

struct TempDir {
  std::string path = files::makeTemporaryDirectory("/tmp/fp4lab-test-gguf-");
  ~TempDir() { files::removeTree(path); }
};

std::string writeBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  REQUIRE(f);
  if (!bytes.empty()) REQUIRE(std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size());
  std::fclose(f);
  return path;
}

// Opening must succeed or throw fp4lab::Error: anything else (another exception, a crash under
// the sanitizers) fails the test.
bool opensOrThrowsError(const std::string& path) {
  try {
    File file(path);
    for (const auto& t : file.tensors()) {
      if (!canDecode(t.type)) continue;
      std::vector<float> out(t.numel());
      decodeToFloat32(t.type, file.data(t), t.numel(), out.data());
    }
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace

TEST_CASE("gguf decoders match llama.cpp's reference loops on random blocks", "[gguf]") {
  std::mt19937 rng(1234);
  struct Case {
    TensorType type;
    std::vector<size_t> halves;
    void (*ref)(const uint8_t*, float*, int);
  };
  const Case cases[] = {
      {TensorType::Q4_0, {0}, refQ4_0},    {TensorType::Q4_1, {0, 2}, refQ4_1},
      {TensorType::Q8_0, {0}, refQ8_0},    {TensorType::Q5_0, {0}, refQ5_0},
      {TensorType::Q5_1, {0, 2}, refQ5_1}, {TensorType::Q4_K, {0, 2}, refQ4_K},
      {TensorType::Q5_K, {0, 2}, refQ5_K}, {TensorType::Q6_K, {208}, refQ6_K},
  };
  for (const Case& c : cases) {
    SECTION(tensorTypeName(static_cast<uint32_t>(c.type))) {
      const int nb = 37;
      const auto blocks = randomBlocks(rng, nb * blockBytes(c.type), c.halves, blockBytes(c.type));
      const uint64_t n = nb * blockElements(c.type);
      std::vector<float> got(n), want(n);
      decodeToFloat32(c.type, blocks.data(), n, got.data());
      c.ref(blocks.data(), want.data(), nb);
      CHECK(sameBits(got, want));
    }
  }
}

TEST_CASE("gguf plain types decode exactly", "[gguf]") {
  std::mt19937 rng(7);
  std::vector<uint8_t> raw(2 * 1000);
  for (auto& b : raw) b = static_cast<uint8_t>(rng());
  std::vector<float> got(1000), want(1000);
  decodeToFloat32(TensorType::F16, raw.data(), 1000, got.data());
  io::convertToFloat32(io::DType::F16, raw.data(), 1000, want.data());
  for (size_t i = 0; i < 1000; ++i) {
    if (std::isnan(want[i]))
      CHECK(std::isnan(got[i]));
    else
      CHECK(std::memcmp(&got[i], &want[i], 4) == 0);
  }
  decodeToFloat32(TensorType::BF16, raw.data(), 1000, got.data());
  io::convertToFloat32(io::DType::BF16, raw.data(), 1000, want.data());
  CHECK(std::memcmp(got.data(), want.data(), 4000) == 0);
  CHECK_THROWS_AS(decodeToFloat32(TensorType::Q2_K, raw.data(), 256, got.data()), Error);
  CHECK_THROWS_AS(decodeToFloat32(TensorType::Q4_0, raw.data(), 31, got.data()), Error);
  CHECK_FALSE(canDecode(TensorType::IQ4_XS));
  CHECK(tensorTypeName(5) == nullptr);
}

TEST_CASE("gguf rotary row permutation round-trips and matches llama.cpp's reshape", "[gguf]") {
  const int64_t heads = 3, per = 8, rows = heads * per, cols = 5;
  std::vector<float> w(rows * cols), p(rows * cols), back(rows * cols);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i);
  permuteRotaryRows(w.data(), p.data(), rows, cols, heads);
  // w.reshape(heads, 2, per/2, cols).swapaxes(1, 2): permuted row (h, i, j) = original (h, j, i).
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < per / 2; ++i)
      for (int64_t j = 0; j < 2; ++j)
        CHECK(p[(h * per + i * 2 + j) * cols + 1] == w[(h * per + j * per / 2 + i) * cols + 1]);
  unpermuteRotaryRows(p.data(), back.data(), rows, cols, heads);
  CHECK(back == w);
}

TEST_CASE("gguf reader reads a valid file", "[gguf]") {
  std::mt19937 rng(1);
  std::vector<SmallTensor> tensors;
  TempDir dir;
  const std::string path = writeBytes(files::join(dir.path, "m.gguf"), tinyLlama(rng, &tensors));
  File file(path);
  CHECK(file.version() == 3);
  CHECK(file.requireString("general.architecture") == "llama");
  CHECK(file.requireInteger("llama.block_count") == 1);
  CHECK(file.find("tokenizer.ggml.tokens")->texts.size() == 8);
  REQUIRE(file.tensors().size() == tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorInfo& t = file.tensors()[i];
    CHECK(t.name == tensors[i].name);
    CHECK(t.bytes == tensors[i].data.size());
    CHECK(std::memcmp(file.data(t), tensors[i].data.data(), t.bytes) == 0);
  }
  CHECK(file.findTensor("blk.0.attn_k.weight")->torchShape() == std::vector<int64_t>{16, 32});
  CHECK_THROWS_AS(file.requireInteger("general.architecture"), Error);
  CHECK_THROWS_AS(file.requireString("missing.key"), Error);
}

TEST_CASE("gguf reader: every truncation and every byte mutation throws fp4lab::Error or reads",
          "[gguf]") {
  std::mt19937 rng(2);
  TempDir dir;
  const auto good = tinyLlama(rng);
  const std::string path = files::join(dir.path, "bad.gguf");
  int refused = 0;
  for (size_t length = 0; length < good.size(); length += (length < 2000 ? 1 : 97)) {
    writeBytes(path, std::vector<uint8_t>(good.begin(), good.begin() + length));
    CHECK_FALSE(opensOrThrowsError(path));  // the last tensor ends at the end of the file
  }
  // Every byte of the header and infos set to values that break lengths and counts.
  const size_t infoEnd = File(writeBytes(path, good)).dataOffset();
  for (size_t at = 0; at < infoEnd; ++at) {
    for (uint8_t value : {uint8_t{0x00}, uint8_t{0xFF}, uint8_t{0x7F}, uint8_t{0x13}}) {
      auto bad = good;
      if (bad[at] == value) continue;
      bad[at] = value;
      writeBytes(path, bad);
      if (!opensOrThrowsError(path)) ++refused;
    }
  }
  CHECK(refused > 100);
}

TEST_CASE("gguf reader names the problem of specific malformations", "[gguf]") {
  std::mt19937 rng(3);
  TempDir dir;
  const auto good = tinyLlama(rng);
  const std::string path = files::join(dir.path, "bad.gguf");
  auto expectError = [&](std::vector<uint8_t> bytes, const std::string& fragment) {
    writeBytes(path, bytes);
    try {
      File file(path);
      FAIL("no error for " << fragment);
    } catch (const Error& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(fragment) != std::string::npos);
      CHECK(std::string(e.what()).find(path) != std::string::npos);
    }
  };
  auto patch64 = [](std::vector<uint8_t> b, size_t at, uint64_t v) {
    std::memcpy(&b[at], &v, 8);
    return b;
  };
  auto patch32 = [](std::vector<uint8_t> b, size_t at, uint32_t v) {
    std::memcpy(&b[at], &v, 4);
    return b;
  };
  expectError(patch32(good, 0, 0x46554748), "bad magic");
  expectError(patch32(good, 4, 1), "unsupported GGUF version 1");
  expectError(patch32(good, 4, 0x03000000), "unsupported GGUF version");
  expectError(patch64(good, 8, 1ull << 60), "tensor count");
  expectError(patch64(good, 16, ~0ull), "key-value count");
  expectError(patch64(good, 24, 1ull << 40), "runs past the end");  // first key's length
  // The first key is "general.architecture" (20 bytes) at 24: its value type at 52.
  expectError(patch32(good, 52, 13), "unknown value type 13");
  expectError(patch32(good, 52, 9), "array");
  // Tensor info fields: find the first tensor's name and patch after it.
  const std::string first = "token_embd.weight";
  const auto it = std::search(good.begin(), good.end(), first.begin(), first.end());
  const size_t dims = static_cast<size_t>(it - good.begin()) + first.size();
  expectError(patch32(good, dims, 5), "dimensions");
  expectError(patch64(good, dims + 4, 0), "dimension 0");
  expectError(patch64(good, dims + 4, 1ull << 47), "impossibly large");
  expectError(patch32(good, dims + 20, 5), "unknown tensor type 5");
  expectError(patch32(good, dims + 20, 12), "block size");  // ne[0] 32 as Q4_K (256)
  expectError(patch64(good, dims + 24, 1), "alignment");
  expectError(patch64(good, dims + 24, 1ull << 40), "past the end");
  expectError(patch64(good, dims + 24, 32), "overlaps");
  // general.alignment = 3.
  const std::string align = "general.alignment";
  const auto at = std::search(good.begin(), good.end(), align.begin(), align.end());
  expectError(patch32(good, static_cast<size_t>(at - good.begin()) + align.size() + 4, 3),
              "power of two");
}

TEST_CASE("gguf import writes a folder atomically and refuses to overwrite", "[gguf]") {
  std::mt19937 rng(4);
  TempDir dir;
  const std::string src = writeBytes(files::join(dir.path, "m.gguf"), tinyLlama(rng));
  const std::string out = files::join(dir.path, "out");
  ImportOptions options;
  options.source = src;
  options.outputDir = out;
  const ImportSummary s = importGguf(options);
  CHECK(s.tensors == 11);
  CHECK(s.layers == 1);
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json",
                        "tokenizer_config.json", "generation_config.json"})
    CHECK(files::isRegularFile(files::join(out, f)));
  const std::string config = files::readFile(files::join(out, "config.json"));
  CHECK(config.find("\"tie_word_embeddings\": true") != std::string::npos);

  // Not empty, no force: refused, untouched.
  const std::string before = files::readFile(files::join(out, "config.json"));
  CHECK_THROWS_WITH(importGguf(options), Catch::Contains("not empty"));
  CHECK(files::readFile(files::join(out, "config.json")) == before);
  options.force = true;
  options.float32 = true;
  importGguf(options);
  CHECK(files::readFile(files::join(out, "config.json")).find("float32") != std::string::npos);

  // A truncated file: an error, and nothing at the new output nor litter next to it.
  auto bytes = tinyLlama(rng);
  bytes.resize(bytes.size() - 10);
  options.source = writeBytes(files::join(dir.path, "short.gguf"), bytes);
  options.outputDir = files::join(dir.path, "out2");
  CHECK_THROWS_AS(importGguf(options), Error);
  CHECK_FALSE(files::exists(options.outputDir));
  CHECK(files::listDirectory(dir.path) == std::vector<std::string>{"m.gguf", "out", "short.gguf"});
}
