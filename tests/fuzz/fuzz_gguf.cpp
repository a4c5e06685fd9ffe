// Fuzzer for the GGUF reader and importer: whatever the bytes, gguf::File either throws
// fp4lab::Error or opens the file with every tensor's data inside the data section, aligned,
// without overlaps and exactly blocks x block bytes long; each tensor then either decodes to
// fp32 (the types canDecode accepts) or decodeToFloat32 throws fp4lab::Error; the typed metadata
// accessors, the tokenizer rebuild and the whole import (into a temporary folder) either work or
// throw fp4lab::Error. Never a crash, a leak, an out-of-bounds read, another exception or
// undefined behaviour (ASan/UBSan, preset `fuzz`). Seeds: tests/fuzz/run-fuzzers.sh writes a
// tiny llama GGUF and one tensor of every type.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "../engine/temp_dir.h"
#include "fp4lab/error.h"
#include "fp4lab/io/gguf.h"
#include "fp4lab/io/gguf_import.h"

namespace gguf = fp4lab::io::gguf;

namespace {

void checkFile(const gguf::File& file, size_t size) {
  if (file.fileSize() != size || file.dataOffset() % file.alignment()) std::abort();
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (file.findTensor(t.name) != &t) std::abort();  // names resolve to their own entries
    if (t.ne.empty() || t.ne.size() > gguf::File::kMaxDims) std::abort();
    const uint64_t per = gguf::blockElements(t.type);
    if (t.ne[0] % per || t.bytes != t.numel() / per * gguf::blockBytes(t.type)) std::abort();
    if (t.offset < file.dataOffset() || t.offset > size || t.bytes > size - t.offset) std::abort();
    if ((t.offset - file.dataOffset()) % file.alignment()) std::abort();
    if (t.torchShape().size() != t.ne.size()) std::abort();
    ranges.emplace_back(t.offset, t.bytes);
    if (t.bytes) {  // the first and last byte are readable
      volatile uint8_t sink = file.data(t)[0] ^ file.data(t)[t.bytes - 1];
      (void)sink;
    }
    std::vector<float> out;
    if (gguf::canDecode(t.type)) {
      out.resize(t.numel());
      gguf::decodeToFloat32(t.type, file.data(t), t.numel(), out.data());
      volatile float sink = out.back();
      (void)sink;
    } else {
      try {
        float dummy[256];
        gguf::decodeToFloat32(t.type, file.data(t), gguf::blockElements(t.type), dummy);
        std::abort();  // a type canDecode refuses must throw
      } catch (const fp4lab::Error&) {
      }
    }
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i - 1].first + ranges[i - 1].second > ranges[i].first) std::abort();
  // The typed accessors: a value or fp4lab::Error, for every key.
  for (const auto& [key, value] : file.metadata()) {
    (void)value;
    try {
      (void)file.requireString(key);
    } catch (const fp4lab::Error&) {
    }
    try {
      (void)file.requireInteger(key);
    } catch (const fp4lab::Error&) {
    }
    try {
      (void)file.realOr(key, 0);
    } catch (const fp4lab::Error&) {
    }
    try {
      (void)file.boolOr(key, false);
    } catch (const fp4lab::Error&) {
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The reader maps a file: write the input to one, in a folder removed at exit.
  static const fp4lab::testing::TempDir dir("fp4lab-fuzz-gguf-");
  static const std::string path = dir.file("input.gguf");
  static const std::string output = dir.file("imported");
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    gguf::File file(path);
    checkFile(file, size);
    try {
      (void)gguf::buildTokenizerJson(file);
    } catch (const fp4lab::Error&) {
    }
  } catch (const fp4lab::Error&) {
    return 0;
  }
  // The whole import: hyperparameters, tensor plan, decode, rotary un-permutation, the folder.
  try {
    gguf::ImportOptions options;
    options.source = path;
    options.outputDir = output;
    options.force = true;
    options.float32 = size % 2;
    (void)gguf::importGguf(options);
  } catch (const fp4lab::Error&) {
  }
  return 0;
}
