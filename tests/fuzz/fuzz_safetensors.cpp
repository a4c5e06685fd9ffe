// Fuzzer for the safetensors reader: whatever the bytes, SafetensorsFile either throws
// fp4lab::Error or opens the file with every tensor's bytes inside the data section, in order,
// without gaps or overlaps, exactly shape x dtype long, and convertible to fp32; never a crash,
// an out-of-bounds read or undefined behaviour (ASan/UBSan, preset `fuzz`). Run by
// tests/fuzz/run-fuzzers.sh.
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <string>

#include "../engine/temp_dir.h"
#include "fp4lab/error.h"
#include "fp4lab/io/dtype.h"
#include "fp4lab/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The reader maps a file: write the input to one, in a folder removed at exit.
  static const fp4lab::testing::TempDir dir("fp4lab-fuzz-");
  static const std::string path = dir.file("input.safetensors");
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    fp4lab::io::SafetensorsFile file(path);
    uint64_t next = 0;  // the reader's promises about the tensors it accepted
    for (const fp4lab::io::TensorInfo& t : file.tensors()) {
      if (file.find(t.name) != &t) std::abort();  // names resolve to their own entries
      if (t.begin != next || t.end < t.begin) std::abort();
      if (t.numel() < 0 || t.bytes() != uint64_t(t.numel()) * fp4lab::io::dtypeSize(t.dtype))
        std::abort();
      next = t.end;
      volatile uint8_t sink = t.bytes() ? file.data(t)[t.bytes() - 1] : 0;
      (void)sink;
      if (int64_t(file.toFloat32(t).size()) != t.numel()) std::abort();
    }
    uint64_t headerBytes = 0;  // the file opened, so it has the 8-byte length prefix
    for (int i = 7; i >= 0; --i) headerBytes = headerBytes << 8 | data[i];
    if (next != size - 8 - headerBytes) std::abort();  // the tensors fill the data section
    (void)file.metadata();
  } catch (const fp4lab::Error&) {
  }
  return 0;
}
