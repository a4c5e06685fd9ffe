// GGUF reader and ggml block decoders. Every read is bounds-checked against the mapped size;
// every count is checked against the bytes left before anything is allocated for it.
#include "fp4lab/io/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>
#include <utility>

#include "fp4lab/error.h"
#include "fp4lab/io/dtype.h"

namespace fp4lab::io::gguf {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr uint64_t kDefaultAlignment = 32;

struct TypeTraits {
  TensorType type;
  const char* name;
  uint64_t blockElements;
  uint64_t blockBytes;
};

constexpr TypeTraits kTypes[] = {
    {TensorType::F32, "F32", 1, 4},
    {TensorType::F16, "F16", 1, 2},
    {TensorType::Q4_0, "Q4_0", 32, 18},
    {TensorType::Q4_1, "Q4_1", 32, 20},
    {TensorType::Q5_0, "Q5_0", 32, 22},
    {TensorType::Q5_1, "Q5_1", 32, 24},
    {TensorType::Q8_0, "Q8_0", 32, 34},
    {TensorType::Q8_1, "Q8_1", 32, 36},
    {TensorType::Q2_K, "Q2_K", 256, 84},
    {TensorType::Q3_K, "Q3_K", 256, 110},
    {TensorType::Q4_K, "Q4_K", 256, 144},
    {TensorType::Q5_K, "Q5_K", 256, 176},
    {TensorType::Q6_K, "Q6_K", 256, 210},
    {TensorType::Q8_K, "Q8_K", 256, 292},
    {TensorType::IQ2_XXS, "IQ2_XXS", 256, 66},
    {TensorType::IQ2_XS, "IQ2_XS", 256, 74},
    {TensorType::IQ3_XXS, "IQ3_XXS", 256, 98},
    {TensorType::IQ1_S, "IQ1_S", 256, 50},
    {TensorType::IQ4_NL, "IQ4_NL", 32, 18},
    {TensorType::IQ3_S, "IQ3_S", 256, 110},
    {TensorType::IQ2_S, "IQ2_S", 256, 82},
    {TensorType::IQ4_XS, "IQ4_XS", 256, 136},
    {TensorType::I8, "I8", 1, 1},
    {TensorType::I16, "I16", 1, 2},
    {TensorType::I32, "I32", 1, 4},
    {TensorType::I64, "I64", 1, 8},
    {TensorType::F64, "F64", 1, 8},
    {TensorType::IQ1_M, "IQ1_M", 256, 56},
    {TensorType::BF16, "BF16", 1, 2},
    {TensorType::TQ1_0, "TQ1_0", 256, 54},
    {TensorType::TQ2_0, "TQ2_0", 256, 66},
    {TensorType::MXFP4, "MXFP4", 32, 17},
};

const TypeTraits* traitsOf(uint32_t type) {
  for (const auto& t : kTypes)
    if (static_cast<uint32_t>(t.type) == type) return &t;
  return nullptr;
}

const TypeTraits& traitsOf(TensorType type) {
  const TypeTraits* t = traitsOf(static_cast<uint32_t>(type));
  if (!t) throw Error("unknown ggml tensor type " + std::to_string(static_cast<uint32_t>(type)));
  return *t;
}

inline uint16_t load16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}
inline uint32_t load32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

// IEEE half to float: exact.
inline float halfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  uint32_t mantissa = h & 0x3FFu;
  uint32_t bits;
  if (exponent == 0x1F) {
    bits = sign | 0x7F800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {
    // Subnormal: value = mantissa * 2^-24, exactly representable in fp32.
    const float value = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    std::memcpy(&bits, &value, sizeof bits);
    bits |= sign;
  }
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

inline float halfAt(const uint8_t* p) {
  return halfToFloat(load16(p));
}

// Q4_K / Q5_K: six-bit scale and min of sub-block j (0..7) from the 12 packed bytes.
inline void scaleMinK4(const uint8_t* s, int j, uint8_t& scale, uint8_t& min) {
  if (j < 4) {
    scale = s[j] & 0x3F;
    min = s[j + 4] & 0x3F;
  } else {
    scale = static_cast<uint8_t>((s[j + 4] & 0x0F) | ((s[j - 4] >> 2) & 0x30));
    min = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 2) & 0x30));
  }
}

// The block decoders, each one ggml block (the gguf package's dequantize_blocks, element order
// and arithmetic included). Products of a half scale and a small integer are exact in fp32, so
// a contraction into an FMA by the compiler cannot change any result.
void decodeQ8_0(const uint8_t* b, float* y) {
  const float d = halfAt(b);
  for (int i = 0; i < 32; ++i) y[i] = d * static_cast<float>(static_cast<int8_t>(b[2 + i]));
}
void decodeQ4_0(const uint8_t* b, float* y) {
  const float d = halfAt(b);
  const uint8_t* qs = b + 2;
  for (int i = 0; i < 16; ++i) {
    y[i] = d * static_cast<float>((qs[i] & 0x0F) - 8);
    y[i + 16] = d * static_cast<float>((qs[i] >> 4) - 8);
  }
}
void decodeQ4_1(const uint8_t* b, float* y) {
  const float d = halfAt(b), m = halfAt(b + 2);
  const uint8_t* qs = b + 4;
  for (int i = 0; i < 16; ++i) {
    y[i] = d * static_cast<float>(qs[i] & 0x0F) + m;
    y[i + 16] = d * static_cast<float>(qs[i] >> 4) + m;
  }
}
void decodeQ5_0(const uint8_t* b, float* y) {
  const float d = halfAt(b);
  const uint32_t qh = load32(b + 2);
  const uint8_t* qs = b + 6;
  for (int i = 0; i < 32; ++i) {
    const int low = i < 16 ? (qs[i] & 0x0F) : (qs[i - 16] >> 4);
    const int q = low | static_cast<int>(((qh >> i) & 1u) << 4);
    y[i] = d * static_cast<float>(q - 16);
  }
}
void decodeQ5_1(const uint8_t* b, float* y) {
  const float d = halfAt(b), m = halfAt(b + 2);
  const uint32_t qh = load32(b + 4);
  const uint8_t* qs = b + 8;
  for (int i = 0; i < 32; ++i) {
    const int low = i < 16 ? (qs[i] & 0x0F) : (qs[i - 16] >> 4);
    const int q = low | static_cast<int>(((qh >> i) & 1u) << 4);
    y[i] = d * static_cast<float>(q) + m;
  }
}
void decodeQ4_K(const uint8_t* b, float* y) {
  const float d = halfAt(b), dmin = halfAt(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qs = b + 16;
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, mn;
    scaleMinK4(scales, j, sc, mn);
    const float dl = d * static_cast<float>(sc), ml = dmin * static_cast<float>(mn);
    const int group = j / 2, shift = 4 * (j % 2);
    for (int l = 0; l < 32; ++l)
      y[j * 32 + l] = dl * static_cast<float>((qs[group * 32 + l] >> shift) & 0x0F) - ml;
  }
}
void decodeQ5_K(const uint8_t* b, float* y) {
  const float d = halfAt(b), dmin = halfAt(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, mn;
    scaleMinK4(scales, j, sc, mn);
    const float dl = d * static_cast<float>(sc), ml = dmin * static_cast<float>(mn);
    const int group = j / 2, shift = 4 * (j % 2);
    for (int l = 0; l < 32; ++l) {
      const int q = ((qs[group * 32 + l] >> shift) & 0x0F) | (((qh[l] >> j) & 1) << 4);
      y[j * 32 + l] = dl * static_cast<float>(q) - ml;
    }
  }
}
void decodeQ6_K(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
  const float d = halfAt(b + 208);
  for (int e = 0; e < 256; ++e) {
    const int half = e / 128, within = e % 128;
    const int low = (ql[half * 64 + within % 64] >> (4 * (within / 64))) & 0x0F;
    const int high = (qh[half * 32 + within % 32] >> (2 * (within / 32))) & 0x03;
    const float dl = d * static_cast<float>(scales[e / 16]);
    y[e] = dl * static_cast<float>((low | (high << 4)) - 32);
  }
}

std::string offsetText(uint64_t offset) {
  return "offset " + std::to_string(offset);
}

}  // namespace

const char* valueTypeName(ValueType type) {
  static const char* names[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                "bool", "string", "array", "u64", "i64", "f64"};
  const auto index = static_cast<uint32_t>(type);
  return index < 13 ? names[index] : "unknown";
}

const char* tensorTypeName(uint32_t type) {
  const TypeTraits* t = traitsOf(type);
  return t ? t->name : nullptr;
}
uint64_t blockElements(TensorType type) {
  return traitsOf(type).blockElements;
}
uint64_t blockBytes(TensorType type) {
  return traitsOf(type).blockBytes;
}

bool canDecode(TensorType type) {
  switch (type) {
    case TensorType::F32:
    case TensorType::F16:
    case TensorType::BF16:
    case TensorType::Q8_0:
    case TensorType::Q4_0:
    case TensorType::Q4_1:
    case TensorType::Q5_0:
    case TensorType::Q5_1:
    case TensorType::Q4_K:
    case TensorType::Q5_K:
    case TensorType::Q6_K:
      return true;
    default:
      return false;
  }
}

void decodeToFloat32(TensorType type, const uint8_t* src, uint64_t count, float* dst) {
  const TypeTraits& t = traitsOf(type);
  if (count % t.blockElements)
    throw Error(std::to_string(count) + " elements are not a whole number of " + t.name +
                " blocks of " + std::to_string(t.blockElements));
  void (*block)(const uint8_t*, float*) = nullptr;
  switch (type) {
    case TensorType::F32:
      std::memcpy(dst, src, count * 4);
      return;
    case TensorType::F16:
      for (uint64_t i = 0; i < count; ++i) dst[i] = halfAt(src + 2 * i);
      return;
    case TensorType::BF16:
      for (uint64_t i = 0; i < count; ++i) dst[i] = bf16ToFloat(load16(src + 2 * i));
      return;
    case TensorType::Q8_0:
      block = decodeQ8_0;
      break;
    case TensorType::Q4_0:
      block = decodeQ4_0;
      break;
    case TensorType::Q4_1:
      block = decodeQ4_1;
      break;
    case TensorType::Q5_0:
      block = decodeQ5_0;
      break;
    case TensorType::Q5_1:
      block = decodeQ5_1;
      break;
    case TensorType::Q4_K:
      block = decodeQ4_K;
      break;
    case TensorType::Q5_K:
      block = decodeQ5_K;
      break;
    case TensorType::Q6_K:
      block = decodeQ6_K;
      break;
    default:
      throw Error(std::string("unsupported tensor type ") + t.name, "",
                  "supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K");
  }
  const uint64_t blocks = count / t.blockElements;
  for (uint64_t i = 0; i < blocks; ++i) block(src + i * t.blockBytes, dst + i * t.blockElements);
}

bool Value::isInteger() const {
  switch (type) {
    case ValueType::U8:
    case ValueType::I8:
    case ValueType::U16:
    case ValueType::I16:
    case ValueType::U32:
    case ValueType::I32:
    case ValueType::U64:
    case ValueType::I64:
      return true;
    default:
      return false;
  }
}

uint64_t TensorInfo::numel() const {
  uint64_t n = 1;
  for (uint64_t d : ne) n *= d;
  return n;
}

std::vector<int64_t> TensorInfo::torchShape() const {
  std::vector<int64_t> shape;
  for (auto it = ne.rbegin(); it != ne.rend(); ++it) shape.push_back(static_cast<int64_t>(*it));
  return shape;
}

struct File::Impl {
  std::string path;
  int fd = -1;
  const uint8_t* base = nullptr;
  uint64_t size = 0;
  uint32_t version = 0;
  uint64_t alignment = kDefaultAlignment;
  uint64_t dataOffset = 0;
  std::map<std::string, Value> metadata;
  std::vector<TensorInfo> tensors;
  std::map<std::string, size_t> tensorIndex;

  ~Impl() {
    if (base && size) munmap(const_cast<uint8_t*>(base), size);
    if (fd >= 0) close(fd);
  }

  [[noreturn]] void fail(const std::string& what, uint64_t at, const std::string& context = {},
                         const std::string& hint = {}) const {
    std::string where =
        path + " (" + offsetText(at) + (context.empty() ? "" : ", " + context) + ")";
    throw Error(what, where,
                hint.empty() ? "the file is truncated or not a valid GGUF file" : hint);
  }
};

namespace {

// A bounds-checked cursor over the mapped bytes.
class Cursor {
 public:
  Cursor(const File::Impl& file) : m_file(file) {}
  uint64_t position() const { return m_pos; }
  uint64_t left() const { return m_file.size - m_pos; }
  void setContext(std::string context) { m_context = std::move(context); }

  void need(uint64_t bytes, const char* what) const {
    if (bytes > left())
      m_file.fail(std::string("unexpected end of file reading ") + what + " (" +
                      std::to_string(bytes) + " bytes needed, " + std::to_string(left()) + " left)",
                  m_pos, m_context);
  }
  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T value;
    std::memcpy(&value, m_file.base + m_pos, sizeof value);  // little-endian hosts only
    m_pos += sizeof(T);
    return value;
  }
  std::string readString(const char* what) {
    const uint64_t start = m_pos;
    const uint64_t length = read<uint64_t>(what);
    if (length > File::kMaxStringBytes || length > left())
      m_file.fail(std::string(what) + " length " + std::to_string(length) + " runs past the end " +
                      "of the file (" + std::to_string(left()) + " bytes left)",
                  start, m_context);
    std::string s(reinterpret_cast<const char*>(m_file.base + m_pos), length);
    m_pos += length;
    return s;
  }
  [[noreturn]] void fail(const std::string& what, uint64_t at) const {
    m_file.fail(what, at, m_context);
  }

 private:
  const File::Impl& m_file;
  uint64_t m_pos = 0;
  std::string m_context;
};

uint64_t scalarBytes(ValueType type) {
  switch (type) {
    case ValueType::U8:
    case ValueType::I8:
    case ValueType::BOOL:
      return 1;
    case ValueType::U16:
    case ValueType::I16:
      return 2;
    case ValueType::U32:
    case ValueType::I32:
    case ValueType::F32:
      return 4;
    case ValueType::U64:
    case ValueType::I64:
    case ValueType::F64:
      return 8;
    default:
      return 0;
  }
}

bool knownValueType(uint32_t type) {
  return type <= 12;
}

// Reads one scalar of `type` (not STRING or ARRAY) as integer / real.
void readScalar(Cursor& c, ValueType type, int64_t& integer, uint64_t& unsignedInteger,
                double& real) {
  const uint64_t at = c.position();
  switch (type) {
    case ValueType::U8:
      unsignedInteger = c.read<uint8_t>("a u8");
      integer = static_cast<int64_t>(unsignedInteger);
      break;
    case ValueType::I8:
      integer = c.read<int8_t>("an i8");
      break;
    case ValueType::U16:
      unsignedInteger = c.read<uint16_t>("a u16");
      integer = static_cast<int64_t>(unsignedInteger);
      break;
    case ValueType::I16:
      integer = c.read<int16_t>("an i16");
      break;
    case ValueType::U32:
      unsignedInteger = c.read<uint32_t>("a u32");
      integer = static_cast<int64_t>(unsignedInteger);
      break;
    case ValueType::I32:
      integer = c.read<int32_t>("an i32");
      break;
    case ValueType::U64:
      unsignedInteger = c.read<uint64_t>("a u64");
      integer = static_cast<int64_t>(unsignedInteger);
      break;
    case ValueType::I64:
      integer = c.read<int64_t>("an i64");
      break;
    case ValueType::F32:
      real = c.read<float>("an f32");
      break;
    case ValueType::F64:
      real = c.read<double>("an f64");
      break;
    case ValueType::BOOL: {
      const uint8_t b = c.read<uint8_t>("a bool");
      if (b > 1) c.fail("bool value " + std::to_string(b) + " is neither 0 nor 1", at);
      integer = b;
      break;
    }
    default:
      c.fail("not a scalar type", at);
  }
  if (type == ValueType::I8 || type == ValueType::I16 || type == ValueType::I32 ||
      type == ValueType::I64)
    unsignedInteger = static_cast<uint64_t>(integer);
}

}  // namespace

File::File(const std::string& path) : m_impl(std::make_unique<Impl>()) {
  Impl& f = *m_impl;
  f.path = path;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0)
    throw Error(std::string("cannot open: ") + std::strerror(errno), path, "check the path");
  struct stat st;
  if (fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode))
    throw Error("not a regular file", path, "expected a .gguf file");
  f.size = static_cast<uint64_t>(st.st_size);
  if (f.size > 0) {
    void* p = mmap(nullptr, f.size, PROT_READ, MAP_PRIVATE, f.fd, 0);
    if (p == MAP_FAILED)
      throw Error(std::string("cannot memory-map: ") + std::strerror(errno), path);
    f.base = static_cast<const uint8_t*>(p);
  }

  Cursor c(f);
  c.setContext("header");
  const uint32_t magic = c.read<uint32_t>("the magic");
  if (magic != kMagic) f.fail("bad magic: not a GGUF file", 0, "header", "expected a .gguf file");
  f.version = c.read<uint32_t>("the version");
  if (f.version != 2 && f.version != 3)
    f.fail("unsupported GGUF version " + std::to_string(f.version), 4, "header",
           "versions 2 and 3 are supported (little-endian)");
  const uint64_t tensorCount = c.read<uint64_t>("the tensor count");
  const uint64_t kvCount = c.read<uint64_t>("the key-value count");
  // A key-value pair takes at least 8 + 4 + 1 bytes, a tensor info 8 + 4 + 4 + 8.
  if (kvCount > c.left() / 13)
    f.fail("key-value count " + std::to_string(kvCount) + " exceeds what the file can hold", 16,
           "header");
  if (tensorCount > c.left() / 24)
    f.fail("tensor count " + std::to_string(tensorCount) + " exceeds what the file can hold", 8,
           "header");

  for (uint64_t i = 0; i < kvCount; ++i) {
    const uint64_t keyOffset = c.position();
    c.setContext("key-value pair " + std::to_string(i));
    std::string key = c.readString("a key");
    if (key.empty()) f.fail("empty key", keyOffset, "key-value pair " + std::to_string(i));
    c.setContext("key '" + key + "'");
    Value value;
    const uint64_t typeOffset = c.position();
    const uint32_t rawType = c.read<uint32_t>("a value type");
    if (!knownValueType(rawType))
      c.fail("unknown value type " + std::to_string(rawType), typeOffset);
    value.type = static_cast<ValueType>(rawType);
    value.offset = c.position();
    if (value.type == ValueType::STRING) {
      value.text = c.readString("a string");
    } else if (value.type == ValueType::ARRAY) {
      const uint64_t elementTypeOffset = c.position();
      const uint32_t rawElement = c.read<uint32_t>("an array element type");
      if (!knownValueType(rawElement) || rawElement == static_cast<uint32_t>(ValueType::ARRAY))
        c.fail("unsupported array element type " + std::to_string(rawElement), elementTypeOffset);
      value.elementType = static_cast<ValueType>(rawElement);
      const uint64_t countOffset = c.position();
      value.count = c.read<uint64_t>("an array length");
      const uint64_t minBytes =
          value.elementType == ValueType::STRING ? 8 : scalarBytes(value.elementType);
      if (value.count > c.left() / minBytes)
        c.fail("array length " + std::to_string(value.count) + " runs past the end of the file",
               countOffset);
      if (value.elementType == ValueType::STRING) {
        value.texts.reserve(value.count);
        for (uint64_t k = 0; k < value.count; ++k) value.texts.push_back(c.readString("a string"));
      } else {
        const bool real =
            value.elementType == ValueType::F32 || value.elementType == ValueType::F64;
        (real ? value.reals.reserve(value.count) : value.integers.reserve(value.count));
        for (uint64_t k = 0; k < value.count; ++k) {
          int64_t integer = 0;
          uint64_t u = 0;
          double r = 0;
          readScalar(c, value.elementType, integer, u, r);
          if (real)
            value.reals.push_back(r);
          else
            value.integers.push_back(integer);
        }
      }
    } else {
      readScalar(c, value.type, value.integer, value.unsignedInteger, value.real);
    }
    if (!f.metadata.emplace(key, std::move(value)).second)
      f.fail("duplicate key '" + key + "'", keyOffset);
  }

  if (const Value* a = find("general.alignment")) {
    if (!a->isInteger() || a->unsignedInteger == 0 || a->integer < 0 ||
        (a->unsignedInteger & (a->unsignedInteger - 1)) || a->unsignedInteger > (1u << 30))
      f.fail(
          "general.alignment must be a power of two (got " +
              (a->isInteger() ? std::to_string(a->integer) : std::string(valueTypeName(a->type))) +
              ")",
          a->offset, "key 'general.alignment'");
    f.alignment = a->unsignedInteger;
  }

  f.tensors.reserve(tensorCount);
  for (uint64_t i = 0; i < tensorCount; ++i) {
    TensorInfo t;
    t.infoOffset = c.position();
    c.setContext("tensor info " + std::to_string(i));
    t.name = c.readString("a tensor name");
    if (t.name.empty()) c.fail("empty tensor name", t.infoOffset);
    c.setContext("tensor '" + t.name + "'");
    const uint64_t dimsOffset = c.position();
    const uint32_t dims = c.read<uint32_t>("the number of dimensions");
    if (dims == 0 || dims > kMaxDims)
      c.fail(
          std::to_string(dims) + " dimensions (1 to " + std::to_string(kMaxDims) + " are allowed)",
          dimsOffset);
    uint64_t numel = 1;
    for (uint32_t d = 0; d < dims; ++d) {
      const uint64_t neOffset = c.position();
      const uint64_t n = c.read<uint64_t>("a dimension");
      if (n == 0 || n > (1ull << 48) || numel > (1ull << 48) / n)
        c.fail("dimension " + std::to_string(d) + " = " + std::to_string(n) +
                   " is zero or makes the tensor impossibly large",
               neOffset);
      numel *= n;
      t.ne.push_back(n);
    }
    const uint64_t typeOffset = c.position();
    const uint32_t rawType = c.read<uint32_t>("the tensor type");
    const TypeTraits* traits = traitsOf(rawType);
    if (!traits) c.fail("unknown tensor type " + std::to_string(rawType), typeOffset);
    t.type = traits->type;
    if (t.ne[0] % traits->blockElements)
      c.fail("the first dimension " + std::to_string(t.ne[0]) + " is not a multiple of the " +
                 traits->name + " block size " + std::to_string(traits->blockElements),
             dimsOffset);
    t.bytes = numel / traits->blockElements * traits->blockBytes;
    const uint64_t offsetOffset = c.position();
    t.offset = c.read<uint64_t>("the tensor offset");
    if (t.offset % f.alignment)
      c.fail("data offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
                 std::to_string(f.alignment),
             offsetOffset);
    t.infoOffset = offsetOffset;
    if (!f.tensorIndex.emplace(t.name, f.tensors.size()).second)
      c.fail("duplicate tensor '" + t.name + "'", t.infoOffset);
    f.tensors.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment.
  const uint64_t end = c.position();
  f.dataOffset = (end + f.alignment - 1) / f.alignment * f.alignment;
  if (tensorCount && f.dataOffset > f.size)
    f.fail("the data section starts past the end of the file", end, "tensor data");
  const uint64_t dataBytes = f.size > f.dataOffset ? f.size - f.dataOffset : 0;
  std::vector<std::pair<uint64_t, size_t>> order;
  for (size_t i = 0; i < f.tensors.size(); ++i) {
    TensorInfo& t = f.tensors[i];
    if (t.offset > dataBytes || t.bytes > dataBytes - t.offset)
      f.fail("tensor data [" + std::to_string(t.offset) + ", +" + std::to_string(t.bytes) +
                 ") runs past the end of the file (data section of " + std::to_string(dataBytes) +
                 " bytes)",
             t.infoOffset, "tensor '" + t.name + "'");
    t.offset += f.dataOffset;
    order.emplace_back(t.offset, i);
  }
  std::sort(order.begin(), order.end());
  for (size_t k = 1; k < order.size(); ++k) {
    const TensorInfo& previous = f.tensors[order[k - 1].second];
    const TensorInfo& t = f.tensors[order[k].second];
    if (previous.offset + previous.bytes > t.offset)
      f.fail("tensor data overlaps tensor '" + previous.name + "'", t.infoOffset,
             "tensor '" + t.name + "'");
  }
}

File::~File() = default;
File::File(File&&) noexcept = default;
File& File::operator=(File&&) noexcept = default;

const std::string& File::path() const {
  return m_impl->path;
}
uint32_t File::version() const {
  return m_impl->version;
}
uint64_t File::alignment() const {
  return m_impl->alignment;
}
uint64_t File::dataOffset() const {
  return m_impl->dataOffset;
}
uint64_t File::fileSize() const {
  return m_impl->size;
}
const std::map<std::string, Value>& File::metadata() const {
  return m_impl->metadata;
}
const Value* File::find(const std::string& key) const {
  auto it = m_impl->metadata.find(key);
  return it == m_impl->metadata.end() ? nullptr : &it->second;
}
const std::vector<TensorInfo>& File::tensors() const {
  return m_impl->tensors;
}
const TensorInfo* File::findTensor(const std::string& name) const {
  auto it = m_impl->tensorIndex.find(name);
  return it == m_impl->tensorIndex.end() ? nullptr : &m_impl->tensors[it->second];
}
const uint8_t* File::data(const TensorInfo& tensor) const {
  return m_impl->base + tensor.offset;
}

namespace {
[[noreturn]] void badKey(const File& file, const std::string& key, const Value* v,
                         const std::string& expected) {
  if (!v) throw Error("missing key '" + key + "'", file.path(), "expected " + expected);
  throw Error("key '" + key + "' is " + valueTypeName(v->type) + ", expected " + expected,
              file.path() + " (offset " + std::to_string(v->offset) + ")");
}
}  // namespace

std::string File::requireString(const std::string& key) const {
  const Value* v = find(key);
  if (!v || v->type != ValueType::STRING) badKey(*this, key, v, "a string");
  return v->text;
}
int64_t File::requireInteger(const std::string& key) const {
  const Value* v = find(key);
  if (!v || !v->isInteger() || (v->type == ValueType::U64 && v->integer < 0))
    badKey(*this, key, v, "an integer");
  return v->integer;
}
int64_t File::integerOr(const std::string& key, int64_t fallback) const {
  return find(key) ? requireInteger(key) : fallback;
}
double File::realOr(const std::string& key, double fallback) const {
  const Value* v = find(key);
  if (!v) return fallback;
  if (v->isReal()) return v->real;
  if (v->isInteger()) return static_cast<double>(v->integer);
  badKey(*this, key, v, "a number");
}
std::string File::stringOr(const std::string& key, const std::string& fallback) const {
  return find(key) ? requireString(key) : fallback;
}
bool File::boolOr(const std::string& key, bool fallback) const {
  const Value* v = find(key);
  if (!v) return fallback;
  if (v->type != ValueType::BOOL) badKey(*this, key, v, "a bool");
  return v->integer != 0;
}

}  // namespace fp4lab::io::gguf
