// `fp4lab import`: a GGUF file (llama architecture) or a model folder in any layout fp4lab reads,
// to a Hugging Face folder that transformers and fp4lab load. The work is engine/io/gguf_import.cpp
// and run::importModelFolder; this is the command line around them.
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cli.h"
#include "fp4lab/error.h"
#include "fp4lab/common/files.h"
#include "fp4lab/io/gguf_import.h"
#include "fp4lab/run/model.h"

namespace fp4lab::cli {
namespace {

const char* kImportUsage =
    "fp4lab import SRC.gguf|MODEL_DIR --output-dir OUT [--dtype bf16|f32] [--force]";

void printImportHelp() {
  std::printf(
      "usage: %s\n\n"
      "Converts a GGUF file (llama architecture), or a model folder in any layout fp4lab\n"
      "reads, into a plain Hugging Face folder.\n\n"
      "A folder: an fp4lab export (modelopt-nvfp4, compressed-tensors-nvfp4/mxfp4,\n"
      "gpt-oss-mxfp4), Hugging Face's gpt-oss MXFP4 checkpoint, a run's model (its BF16\n"
      "weights) or any Hugging Face folder fp4lab loads. Every quantized weight is decoded\n"
      "exactly and rounded once to BF16 (to nearest even), or kept in F32.\n\n"
      "A GGUF file becomes a Hugging Face LlamaForCausalLM folder:\n"
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
  const std::string source = args.positionals()[0];
  if (files::isDirectory(source)) {
    const bool float32 = args.choice("dtype", {"bf16", "f32"}, "bf16") == "f32";
    const std::string out = args.get("output-dir", "");
    const run::FolderImportSummary s =
        run::importModelFolder(source, out, float32, args.has("force"));
    std::printf("%s -> %s: %s (%s), %lld tensors, %.1f M parameters (%s)\n", source.c_str(),
                out.c_str(), s.architecture.c_str(),
                s.layout == "hf" ? "a Hugging Face folder" : (s.layout + " decoded").c_str(),
                static_cast<long long>(s.tensors), double(s.parameters) / 1e6,
                float32 ? "F32" : "BF16");
    return 0;
  }
  io::gguf::ImportOptions options;
  options.source = source;
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
