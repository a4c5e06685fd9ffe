// `fp4lab import`: a GGUF file (llama architecture) to a Hugging Face folder that transformers and
// fp4lab load. The work is engine/io/gguf_import.cpp; this is the command line around it.
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cli.h"
#include "fp4lab/error.h"
#include "fp4lab/io/gguf_import.h"

namespace fp4lab::cli {
namespace {

const char* kImportUsage = "fp4lab import SRC.gguf --output-dir OUT [--dtype bf16|f32] [--force]";

void printImportHelp() {
  std::printf(
      "usage: %s\n\n"
      "Converts a GGUF file (llama architecture) into a Hugging Face LlamaForCausalLM folder:\n"
      "config.json, model.safetensors, tokenizer.json (rebuilt from the byte-level BPE\n"
      "vocabulary, merges and special tokens of tokenizer.ggml.*), tokenizer_config.json (with\n"
      "the chat template), special_tokens_map.json and generation_config.json.\n\n"
      "Tensors are decoded exactly as ggml does (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,\n"
      "Q4_K, Q5_K, Q6_K), llama.cpp's rotary row permutation of q_proj/k_proj is undone, and the\n"
      "values are rounded to BF16 (to nearest even) or kept in F32. Other tensor types are\n"
      "refused. The folder is written under a temporary name next to OUT and renamed at the end:\n"
      "on any error nothing is left at OUT.\n\n"
      "options:\n"
      "  --output-dir OUT    the folder to write (required)\n"
      "  --dtype bf16|f32    the tensors' dtype (default bf16)\n"
      "  --force             replace OUT if it is not empty\n",
      kImportUsage);
}

}  // namespace

int runImport(const std::vector<std::string>& argv) {
  Args args("import", argv, {"output-dir", "dtype"}, {"force", "help"});
  if (args.has("help")) {
    printImportHelp();
    return 0;
  }
  args.requirePositionals(1, kImportUsage);
  if (!args.has("output-dir"))
    throw Error("--output-dir is required", "fp4lab import", std::string("usage: ") + kImportUsage);
  io::gguf::ImportOptions options;
  options.source = args.positionals()[0];
  options.outputDir = args.get("output-dir", "");
  options.float32 = args.choice("dtype", {"bf16", "f32"}, "bf16") == "f32";
  options.force = args.has("force");
  const bool tty = isatty(STDERR_FILENO);
  if (tty) {
    options.progress = [](const std::string& tensor, size_t index, size_t count) {
      std::fprintf(stderr, "\r\033[K[%zu/%zu] %s", index + 1, count, tensor.c_str());
      std::fflush(stderr);
    };
  }
  const io::gguf::ImportSummary s = io::gguf::importGguf(options);
  if (tty) std::fprintf(stderr, "\r\033[K");
  std::printf(
      "%s -> %s: %s, %lld layers, vocabulary %lld, %zu tensors, %.1f MB read, %.1f MB "
      "written (%s)\n",
      options.source.c_str(), options.outputDir.c_str(), s.architecture.c_str(),
      static_cast<long long>(s.layers), static_cast<long long>(s.vocabSize), s.tensors,
      s.bytesIn / 1e6, s.bytesOut / 1e6, options.float32 ? "F32" : "BF16");
  return 0;
}

}  // namespace fp4lab::cli
