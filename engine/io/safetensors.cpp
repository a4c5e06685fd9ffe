// safetensors reader (mmap plus validation as strict as the reference Rust library) and atomic
// writer (temporary file in the destination folder, fsync, rename, fsync of the folder).
#include "fp4lab/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "fp4lab/common/files.h"
#include "fp4lab/error.h"

namespace fp4lab::io {

namespace {

using Json = nlohmann::json;

constexpr const char* kMetadataKey = "__metadata__";
// Real headers nest three levels; the cap keeps a hostile header from building a deep tree.
constexpr int kMaxJsonDepth = 64;

std::string systemError(const std::string& what, int error) {
  return what + ": " + std::strerror(error);
}

std::string tensorWhere(const std::string& path, const std::string& name) {
  return path + ", tensor '" + name + "'";
}

std::string supportedDTypes() {
  return "supported dtypes: BOOL, U8, I8, I16, U16, I32, U32, I64, U64, F16, BF16, F32, F64, "
         "F8_E4M3, F8_E5M2, F8_E8M0";
}

// Multiplies the dimensions and the element size, or returns nothing on negative dimensions
// or uint64 overflow.
std::optional<uint64_t> checkedByteSize(const std::vector<int64_t>& shape, DType dtype) {
  uint64_t product = 1;
  for (int64_t dim : shape) {
    if (dim < 0) return std::nullopt;
    if (__builtin_mul_overflow(product, static_cast<uint64_t>(dim), &product)) return std::nullopt;
  }
  if (__builtin_mul_overflow(product, static_cast<uint64_t>(dtypeSize(dtype)), &product)) {
    return std::nullopt;
  }
  return product;
}

std::string shapeText(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// Parses the header, rejecting duplicate keys (nlohmann would keep the last one silently, so a
// crafted header could show different tensors to different readers) and absurd nesting.
Json parseHeader(const char* begin, const char* end, const std::string& path) {
  std::vector<std::set<std::string>> openObjects;
  std::string duplicate;
  bool tooDeep = false;
  // Throwing from the callback is the only way to stop nlohmann's parser early.
  struct StopParse {};
  auto callback = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (depth > kMaxJsonDepth) {
      tooDeep = true;
      throw StopParse{};
    }
    switch (event) {
      case Json::parse_event_t::object_start:
        openObjects.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        openObjects.pop_back();
        break;
      case Json::parse_event_t::key:
        if (!openObjects.back().insert(parsed.get<std::string>()).second) {
          duplicate = parsed.get<std::string>();
          throw StopParse{};
        }
        break;
      default:
        break;
    }
    return true;
  };
  try {
    return Json::parse(begin, end, callback);
  } catch (const StopParse&) {
    if (tooDeep) {
      throw Error("header JSON nests deeper than " + std::to_string(kMaxJsonDepth) + " levels",
                  path, "the file is corrupt or not a safetensors file");
    }
    throw Error("header JSON has the key '" + duplicate + "' twice", path,
                "each tensor name must appear once; rewrite the file with a correct writer");
  } catch (const Json::exception& e) {
    throw Error(std::string("header is not valid UTF-8 JSON: ") + e.what(), path,
                "the file is corrupt or not a safetensors file");
  }
}

std::map<std::string, std::string> parseMetadata(const Json& value, const std::string& path) {
  const std::string where = path + ", " + kMetadataKey;
  if (!value.is_object()) {
    throw Error(
        std::string(kMetadataKey) + " must be a JSON object of strings, found " + value.type_name(),
        where, "the file is corrupt; rewrite it");
  }
  std::map<std::string, std::string> metadata;
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string()) {
      throw Error("metadata value for '" + key + "' must be a string, found " + item.type_name(),
                  where, "safetensors metadata maps strings to strings");
    }
    metadata.emplace(key, item.get<std::string>());
  }
  return metadata;
}

TensorInfo parseTensor(const std::string& name, const Json& entry, uint64_t dataBytes,
                       const std::string& path) {
  const std::string where = tensorWhere(path, name);
  const std::string corrupt = "the file is corrupt; rewrite it with a correct writer";
  if (!entry.is_object()) {
    throw Error(std::string("entry must be a JSON object, found ") + entry.type_name(), where,
                corrupt);
  }
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!entry.contains(field)) {
      throw Error(std::string("entry has no \"") + field + "\" field", where, corrupt);
    }
  }

  TensorInfo info;
  info.name = name;
  const Json& dtype = entry["dtype"];
  if (!dtype.is_string()) {
    throw Error(std::string("dtype must be a string, found ") + dtype.type_name(), where,
                supportedDTypes());
  }
  std::optional<DType> parsed = parseDType(dtype.get<std::string>());
  if (!parsed) {
    throw Error("unknown dtype '" + dtype.get<std::string>() + "'", where, supportedDTypes());
  }
  info.dtype = *parsed;

  const Json& shape = entry["shape"];
  if (!shape.is_array()) {
    throw Error(std::string("shape must be an array, found ") + shape.type_name(), where, corrupt);
  }
  for (const Json& dim : shape) {
    // Non-negative JSON integers parse as unsigned; negatives and fractions do not.
    if (!dim.is_number_unsigned() ||
        dim.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      throw Error("shape " + shape.dump() + " must hold non-negative integers", where, corrupt);
    }
    info.shape.push_back(static_cast<int64_t>(dim.get<uint64_t>()));
  }
  std::optional<uint64_t> expectedBytes = checkedByteSize(info.shape, info.dtype);
  if (!expectedBytes) {
    throw Error("shape " + shape.dump() + " x " + dtypeName(info.dtype) + " overflows 64 bits",
                where, corrupt);
  }

  const Json& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned()) {
    throw Error("data_offsets " + offsets.dump() + " must be [begin, end] non-negative integers",
                where, corrupt);
  }
  info.begin = offsets[0].get<uint64_t>();
  info.end = offsets[1].get<uint64_t>();
  if (info.begin > info.end) {
    throw Error("data_offsets " + offsets.dump() + " end before they begin", where, corrupt);
  }
  if (info.end > dataBytes) {
    throw Error("data_offsets " + offsets.dump() + " run past the end of the data section (" +
                    std::to_string(dataBytes) + " bytes)",
                where, "the file is truncated or corrupt; download or write it again");
  }
  if (info.end - info.begin != *expectedBytes) {
    throw Error("data_offsets " + offsets.dump() + " cover " +
                    std::to_string(info.end - info.begin) + " bytes but shape " + shape.dump() +
                    " of " + dtypeName(info.dtype) + " needs " + std::to_string(*expectedBytes),
                where, "dtype, shape and data_offsets disagree; the file is corrupt");
  }
  return info;
}

// The reference library requires the tensors, sorted by offset, to tile the data section
// exactly: anything else is either overlap (aliasing) or bytes no tensor accounts for.
void checkLayout(const std::vector<TensorInfo>& tensors, uint64_t dataBytes,
                 const std::string& path) {
  uint64_t next = 0;
  const TensorInfo* previous = nullptr;
  for (const TensorInfo& tensor : tensors) {
    if (tensor.begin < next) {
      throw Error("tensor bytes [" + std::to_string(tensor.begin) + ", " +
                      std::to_string(tensor.end) + ") overlap tensor '" + previous->name +
                      "' which ends at " + std::to_string(next),
                  tensorWhere(path, tensor.name), "the file is corrupt; rewrite it");
    }
    if (tensor.begin > next) {
      throw Error("hole of " + std::to_string(tensor.begin - next) +
                      " bytes before this tensor (after " +
                      (previous ? "tensor '" + previous->name + "'" : "the header") + ")",
                  tensorWhere(path, tensor.name),
                  "tensors must be stored back to back; the file is corrupt");
    }
    next = tensor.end;
    previous = &tensor;
  }
  if (next != dataBytes) {
    throw Error(std::to_string(dataBytes - next) +
                    " bytes at the end of the data section belong to no tensor" +
                    (previous ? " (last tensor '" + previous->name + "')" : ""),
                path, "the file is corrupt or was appended to; rewrite it");
  }
}

}  // namespace

int64_t TensorInfo::numel() const {
  int64_t product = 1;
  for (int64_t dim : shape) {
    if (dim < 0 || __builtin_mul_overflow(product, dim, &product)) {
      throw Error("shape " + shapeText(shape) + " has no valid element count", name,
                  "dimensions must be non-negative and their product must fit in 64 bits");
    }
  }
  return product;
}

struct SafetensorsFile::Impl {
  std::string path;
  const uint8_t* mapping = nullptr;
  size_t mappingBytes = 0;
  const uint8_t* dataSection = nullptr;
  uint64_t dataBytes = 0;
  std::vector<TensorInfo> tensors;
  std::map<std::string, size_t> index;
  std::map<std::string, std::string> metadata;

  ~Impl() {
    if (mapping) munmap(const_cast<uint8_t*>(mapping), mappingBytes);
  }
};

SafetensorsFile::SafetensorsFile(const std::string& path) : m_impl(std::make_unique<Impl>()) {
  Impl& impl = *m_impl;
  impl.path = path;
  const std::string notSafetensors = "the file is truncated or not a safetensors file";

  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw Error(systemError("cannot open", errno), path, "check the path and its permissions");
  }
  struct stat status {};
  if (::fstat(fd, &status) != 0) {
    const int error = errno;
    ::close(fd);
    throw Error(systemError("cannot stat", error), path, "check the path and its permissions");
  }
  if (!S_ISREG(status.st_mode)) {
    ::close(fd);
    throw Error("not a regular file", path, "pass the path of a .safetensors file");
  }
  const uint64_t fileBytes = static_cast<uint64_t>(status.st_size);
  if (fileBytes < 8) {
    ::close(fd);
    throw Error(
        "file is " + std::to_string(fileBytes) + " bytes, shorter than the 8-byte header length",
        path, notSafetensors);
  }
  if (fileBytes > std::numeric_limits<size_t>::max()) {
    ::close(fd);
    throw Error("file is too large to map", path, "use a 64-bit build");
  }
  void* mapped = ::mmap(nullptr, fileBytes, PROT_READ, MAP_PRIVATE, fd, 0);
  const int mapError = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (mapped == MAP_FAILED) {
    throw Error(systemError("cannot map", mapError), path, "check free address space and memory");
  }
  impl.mapping = static_cast<const uint8_t*>(mapped);
  impl.mappingBytes = fileBytes;

  uint64_t headerBytes = 0;
  for (int i = 7; i >= 0; --i) headerBytes = (headerBytes << 8) | impl.mapping[i];
  if (headerBytes > kMaxHeaderBytes) {
    throw Error("huge header: length prefix says " + std::to_string(headerBytes) +
                    " bytes, over the 100 MB limit",
                path, notSafetensors);
  }
  if (headerBytes > fileBytes - 8) {
    throw Error("header length " + std::to_string(headerBytes) + " runs past the end of the " +
                    std::to_string(fileBytes) + "-byte file",
                path, notSafetensors);
  }
  const char* headerBegin = reinterpret_cast<const char*>(impl.mapping + 8);
  const Json header = parseHeader(headerBegin, headerBegin + headerBytes, path);
  if (!header.is_object()) {
    throw Error(std::string("header must be a JSON object, found ") + header.type_name(), path,
                notSafetensors);
  }
  impl.dataSection = impl.mapping + 8 + headerBytes;
  impl.dataBytes = fileBytes - 8 - headerBytes;

  for (const auto& [name, entry] : header.items()) {
    if (name == kMetadataKey) {
      impl.metadata = parseMetadata(entry, path);
    } else {
      impl.tensors.push_back(parseTensor(name, entry, impl.dataBytes, path));
    }
  }
  std::sort(impl.tensors.begin(), impl.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  checkLayout(impl.tensors, impl.dataBytes, path);
  for (size_t i = 0; i < impl.tensors.size(); ++i) impl.index.emplace(impl.tensors[i].name, i);
}

SafetensorsFile::~SafetensorsFile() = default;
SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;

const std::string& SafetensorsFile::path() const {
  return m_impl->path;
}

const std::vector<TensorInfo>& SafetensorsFile::tensors() const {
  return m_impl->tensors;
}

const TensorInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = m_impl->index.find(name);
  return it == m_impl->index.end() ? nullptr : &m_impl->tensors[it->second];
}

const TensorInfo& SafetensorsFile::at(const std::string& name) const {
  if (const TensorInfo* tensor = find(name)) return *tensor;
  throw Error("no tensor named '" + name + "'", m_impl->path,
              "the file holds " + std::to_string(m_impl->tensors.size()) +
                  " tensors; check the name against the checkpoint");
}

const std::map<std::string, std::string>& SafetensorsFile::metadata() const {
  return m_impl->metadata;
}

const uint8_t* SafetensorsFile::data(const TensorInfo& tensor) const {
  // A TensorInfo from another file (or edited by hand) must not turn into an out-of-range read.
  if (tensor.begin > tensor.end || tensor.end > m_impl->dataBytes) {
    throw Error("tensor offsets [" + std::to_string(tensor.begin) + ", " +
                    std::to_string(tensor.end) + ") lie outside this file's data section",
                tensorWhere(m_impl->path, tensor.name), "use a TensorInfo obtained from this file");
  }
  return m_impl->dataSection + tensor.begin;
}

std::vector<float> SafetensorsFile::toFloat32(const TensorInfo& tensor) const {
  const uint8_t* bytes = data(tensor);
  std::optional<uint64_t> expected = checkedByteSize(tensor.shape, tensor.dtype);
  if (!expected || *expected != tensor.bytes()) {
    throw Error("shape " + shapeText(tensor.shape) + " of " + dtypeName(tensor.dtype) +
                    " does not match its " + std::to_string(tensor.bytes()) + " bytes",
                tensorWhere(m_impl->path, tensor.name), "use a TensorInfo obtained from this file");
  }
  std::vector<float> values(tensor.bytes() / dtypeSize(tensor.dtype));
  convertToFloat32(tensor.dtype, bytes, values.size(), values.data());
  return values;
}

// ---- writer ----

namespace {

std::string checkedJsonString(const std::string& text, const std::string& where) {
  try {
    return Json(text).dump();
  } catch (const Json::exception&) {
    throw Error("'" + text + "' is not valid UTF-8", where,
                "safetensors headers are JSON; names and metadata must be UTF-8");
  }
}

}  // namespace

void SafetensorsWriter::add(const std::string& name, DType dtype, std::vector<int64_t> shape,
                            const void* data, uint64_t bytes) {
  if (bytes > 0 && data == nullptr) {
    throw Error("null data for " + std::to_string(bytes) + " bytes", "tensor '" + name + "'",
                "pass the tensor's bytes");
  }
  const uint8_t* first = static_cast<const uint8_t*>(data);
  add(name, dtype, std::move(shape), std::vector<uint8_t>(first, first + bytes));
}

void SafetensorsWriter::add(const std::string& name, DType dtype, std::vector<int64_t> shape,
                            std::vector<uint8_t> bytes) {
  const std::string where = "tensor '" + name + "'";
  if (name == kMetadataKey) {
    throw Error("'__metadata__' is reserved and cannot name a tensor", where,
                "use setMetadata() for metadata");
  }
  checkedJsonString(name, where);
  for (const Pending& pending : m_tensors) {
    if (pending.name == name) {
      throw Error("a tensor with this name was already added", where,
                  "tensor names in one file must be unique");
    }
  }
  std::optional<uint64_t> expected = checkedByteSize(shape, dtype);
  if (!expected) {
    throw Error("shape " + shapeText(shape) + " is negative or overflows", where,
                "dimensions must be non-negative and their product must fit in 64 bits");
  }
  if (*expected != bytes.size()) {
    throw Error("got " + std::to_string(bytes.size()) + " bytes but shape " + shapeText(shape) +
                    " of " + dtypeName(dtype) + " needs " + std::to_string(*expected),
                where, "packed formats are stored as U8 with a shape counting bytes");
  }
  m_tensors.push_back(Pending{name, dtype, std::move(shape), std::move(bytes)});
}

void SafetensorsWriter::addFloat32(const std::string& name, std::vector<int64_t> shape,
                                   const std::vector<float>& values) {
  add(name, DType::F32, std::move(shape), values.data(), values.size() * sizeof(float));
}

void SafetensorsWriter::setMetadata(const std::string& key, const std::string& value) {
  const std::string where = std::string(kMetadataKey) + " '" + key + "'";
  checkedJsonString(key, where);
  checkedJsonString(value, where);
  if (key == "format" && value != "pt") {
    throw Error("format must stay \"pt\"", where, "readers such as transformers expect it");
  }
  m_metadata[key] = value;
}

void SafetensorsWriter::write(const std::string& path) const {
  nlohmann::ordered_json header;
  nlohmann::ordered_json metadata = nlohmann::ordered_json::object();
  for (const auto& [key, value] : m_metadata) metadata[key] = value;
  metadata["format"] = "pt";
  header[kMetadataKey] = metadata;
  uint64_t offset = 0;
  for (const Pending& tensor : m_tensors) {
    header[tensor.name] = {{"dtype", dtypeName(tensor.dtype)},
                           {"shape", tensor.shape},
                           {"data_offsets", {offset, offset + tensor.bytes.size()}}};
    offset += tensor.bytes.size();
  }
  std::string headerText = header.dump();
  // Padding to 8 bytes keeps the data section aligned for readers that map it directly.
  headerText.append((8 - (8 + headerText.size()) % 8) % 8, ' ');

  uint8_t prefix[8];
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<uint8_t>(headerText.size() >> (8 * i));

  files::AtomicFile file(path);
  file.write(prefix, sizeof prefix);
  file.write(headerText.data(), headerText.size());
  for (const Pending& tensor : m_tensors) file.write(tensor.bytes.data(), tensor.bytes.size());
  file.commit();
}

std::vector<std::string> modelWeightFiles(const std::string& dir) {
  if (files::isRegularFile(files::join(dir, "model.safetensors"))) return {"model.safetensors"};
  const std::string index = files::join(dir, "model.safetensors.index.json");
  if (!files::isRegularFile(index))
    throw Error("not a model folder: no model.safetensors (or model.safetensors.index.json)", dir,
                "a Hugging Face model folder holds config.json and model.safetensors");
  const nlohmann::json j = nlohmann::json::parse(files::readFile(index), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") ||
      !j["weight_map"].is_object())
    throw Error("no \"weight_map\" object", index, "is the index complete?");
  std::vector<std::string> names;
  for (const auto& item : j["weight_map"].items()) {
    if (!item.value().is_string()) throw Error("a weight_map entry is not a file name", index);
    const std::string f = item.value().get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos)
      throw Error("a shard name with a folder in it (or empty): '" + f + "'", index);
    if (std::find(names.begin(), names.end(), f) == names.end()) names.push_back(f);
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace fp4lab::io
