// safetensors reading (memory-mapped, fully validated) and writing (temporary file, fsync,
// rename). Spec: 8-byte little-endian header length N, N bytes of JSON, then the data section;
// each tensor's data_offsets are relative to the data section, contiguous and non-overlapping.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fp4lab/io/dtype.h"

namespace fp4lab::io {

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets inside the data section
  uint64_t end = 0;
  int64_t numel() const;
  uint64_t bytes() const { return end - begin; }
};

// A validated, memory-mapped safetensors file. Every structural problem (truncation, bad JSON,
// unknown dtype, offsets out of range, overlapping or non-contiguous tensors, a size that does
// not match shape x dtype, a header over 100 MB) throws fp4lab::Error naming the file and tensor.
class SafetensorsFile {
 public:
  static constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const;
  const std::vector<TensorInfo>& tensors() const;  // in data order
  const TensorInfo* find(const std::string& name) const;
  const TensorInfo& at(const std::string& name) const;  // throws fp4lab::Error if missing
  const std::map<std::string, std::string>& metadata() const;
  // Raw bytes of a tensor (little-endian, possibly unaligned: read with memcpy or convert*).
  const uint8_t* data(const TensorInfo& tensor) const;
  // The tensor converted to fp32 (F32, F16, BF16, F64, F8_E4M3, F8_E5M2, F8_E8M0, integers).
  std::vector<float> toFloat32(const TensorInfo& tensor) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

// Collects tensors and writes them as one safetensors file, atomically: a temporary file in
// the destination folder, fsync, rename. "__metadata__" always carries {"format": "pt"}.
class SafetensorsWriter {
 public:
  // Copies the bytes. `bytes` must equal numel(shape) * size(dtype) (U8 packed FP4 counts bytes).
  void add(const std::string& name, DType dtype, std::vector<int64_t> shape, const void* data,
           uint64_t bytes);
  void add(const std::string& name, DType dtype, std::vector<int64_t> shape,
           std::vector<uint8_t> bytes);
  void addFloat32(const std::string& name, std::vector<int64_t> shape,
                  const std::vector<float>& values);
  void setMetadata(const std::string& key, const std::string& value);
  size_t size() const { return m_tensors.size(); }
  // Throws fp4lab::Error (duplicate names, size mismatches, I/O errors); never leaves a
  // partial file at `path`.
  void write(const std::string& path) const;

 private:
  struct Pending {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::vector<Pending> m_tensors;
  std::map<std::string, std::string> m_metadata;
};

// The weight files of a Hugging Face model folder: model.safetensors, else the shards that
// model.safetensors.index.json's weight_map names (each once, sorted). File names, not paths.
// Throws fp4lab::Error for a folder without either, or a malformed index.
std::vector<std::string> modelWeightFiles(const std::string& dir);

}  // namespace fp4lab::io
