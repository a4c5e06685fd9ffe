// GGUF reading (llama.cpp's model file): memory-mapped, fully validated, plain C++. Layout
// (versions 2 and 3, little-endian): "GGUF", u32 version, u64 tensor count, u64 key-value count,
// the key-value pairs (string key, u32 value type, value), the tensor infos (string name, u32
// n_dims, u64 ne[n_dims], u32 ggml type, u64 offset), padding to `general.alignment` (default
// 32), then the data section. ne[0] is the fastest axis: a torch shape is ne reversed. Quantized
// types store blocks along ne[0]. The decoders reproduce ggml's dequantization in fp32 (the same
// operations in the same order, so the result is bit for bit what gguf.quants.dequantize gives).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace fp4lab::io::gguf {

// Metadata value types (gguf_type).
enum class ValueType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};
const char* valueTypeName(ValueType type);

// Tensor types (ggml_type); the numbering is llama.cpp's. Only the known ones are accepted.
enum class TensorType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
};
// nullptr for a number that is not a known type.
const char* tensorTypeName(uint32_t type);
// Elements per block and bytes per block (1 and the element size for the plain types).
uint64_t blockElements(TensorType type);
uint64_t blockBytes(TensorType type);
// Whether decodeToFloat32 handles the type: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K,
// Q5_K, Q6_K.
bool canDecode(TensorType type);
// Decodes `count` elements (a multiple of blockElements) of `src` into fp32. Throws
// fp4lab::Error for a type canDecode refuses.
void decodeToFloat32(TensorType type, const uint8_t* src, uint64_t count, float* dst);

struct Value {
  ValueType type = ValueType::U8;
  ValueType elementType = ValueType::U8;  // arrays only
  uint64_t offset = 0;                    // file offset of the value
  // Scalars: integers in `integer` (u64 stored as its bits if above INT64_MAX: see `unsigned`),
  // floats in `real`, BOOL in `integer` (0/1), STRING in `text`.
  int64_t integer = 0;
  uint64_t unsignedInteger = 0;
  double real = 0;
  std::string text;
  // Arrays: the elements, in `texts` (strings), `integers` (integers, bools) or `reals`.
  uint64_t count = 0;
  std::vector<std::string> texts;
  std::vector<int64_t> integers;
  std::vector<double> reals;
  bool isInteger() const;
  bool isReal() const { return type == ValueType::F32 || type == ValueType::F64; }
};

struct TensorInfo {
  std::string name;
  TensorType type = TensorType::F32;
  std::vector<uint64_t> ne;  // GGUF order: ne[0] fastest
  uint64_t offset = 0;       // absolute file offset of the data
  uint64_t bytes = 0;
  uint64_t infoOffset = 0;  // file offset of the tensor info (for messages)
  uint64_t numel() const;
  std::vector<int64_t> torchShape() const;  // ne reversed
};

// A validated, memory-mapped GGUF file. Every structural problem (bad magic or version, counts,
// lengths, offsets or sizes past the end of the file, unknown value or tensor types, a bad
// alignment, duplicate keys or tensors, overlapping tensors, a row not a whole number of blocks)
// throws fp4lab::Error naming the file and the offset, key or tensor.
class File {
 public:
  static constexpr uint32_t kMaxDims = 4;
  static constexpr uint64_t kMaxStringBytes = 1ull << 30;

  explicit File(const std::string& path);
  ~File();
  File(File&&) noexcept;
  File& operator=(File&&) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& path() const;
  uint32_t version() const;
  uint64_t alignment() const;
  uint64_t dataOffset() const;
  uint64_t fileSize() const;
  const std::map<std::string, Value>& metadata() const;
  const Value* find(const std::string& key) const;
  const std::vector<TensorInfo>& tensors() const;  // in file order
  const TensorInfo* findTensor(const std::string& name) const;
  const uint8_t* data(const TensorInfo& tensor) const;

  struct Impl;  // opaque (public only for the parser's helpers)

  // Typed metadata access; a missing key (required) or a wrong type throws naming the key.
  std::string requireString(const std::string& key) const;
  int64_t requireInteger(const std::string& key) const;
  int64_t integerOr(const std::string& key, int64_t fallback) const;
  double realOr(const std::string& key, double fallback) const;  // also accepts integers
  std::string stringOr(const std::string& key, const std::string& fallback) const;
  bool boolOr(const std::string& key, bool fallback) const;

 private:
  std::unique_ptr<Impl> m_impl;
};

}  // namespace fp4lab::io::gguf
