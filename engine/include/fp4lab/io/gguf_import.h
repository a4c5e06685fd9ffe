// GGUF (llama architecture) to a Hugging Face LlamaForCausalLM folder: config.json,
// model.safetensors (BF16, the round-to-nearest-even of ggml's exact decode, or F32),
// tokenizer.json rebuilt from tokenizer.ggml.* (byte-level BPE), tokenizer_config.json with the
// chat template, generation_config.json. Plain C++ (no LibTorch).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace fp4lab::io::gguf {

class File;

struct ImportOptions {
  std::string source;     // the .gguf file
  std::string outputDir;  // written atomically: a temporary sibling folder renamed at the end
  bool float32 = false;   // F32 tensors instead of BF16
  bool force = false;     // replace a non-empty outputDir
  std::function<void(const std::string& tensor, size_t index, size_t count)> progress;
};

struct ImportSummary {
  size_t tensors = 0;
  uint64_t bytesIn = 0;   // tensor data read from the GGUF file
  uint64_t bytesOut = 0;  // tensor data written
  std::string architecture, tokenizerModel;
  int64_t vocabSize = 0, layers = 0;
};

// Throws fp4lab::Error (malformed file, unsupported architecture or tensor type, a non-empty
// outputDir without force, I/O); on any error nothing is left at outputDir (an existing one is
// untouched).
ImportSummary importGguf(const ImportOptions& options);

// llama.cpp's convert_hf_to_gguf.py permutes the rows of q_proj/k_proj for its rotary layout:
// w.reshape(heads, 2, rows/heads/2, cols).swapaxes(1, 2). These apply it and its inverse to a
// row-major [rows, cols] matrix.
void permuteRotaryRows(const float* src, float* dst, int64_t rows, int64_t cols, int64_t heads);
void unpermuteRotaryRows(const float* src, float* dst, int64_t rows, int64_t cols, int64_t heads);

// The Hugging Face tokenizer.json for the file's tokenizer.ggml.* keys (model "gpt2" only).
std::string buildTokenizerJson(const File& file);

}  // namespace fp4lab::io::gguf
