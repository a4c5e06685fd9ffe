// `fp4lab quantize` and `fp4lab dequantize`: FP4 over the tensors of a safetensors file, with a
// per-tensor error table. The kernels' front door for users who have a checkpoint and a question.
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "cli.h"
#include "fp4lab/error.h"
#include "fp4lab/io/safetensors.h"
#include "fp4lab/kernels/fp4.h"

namespace fp4lab::cli {
namespace {

namespace fs = std::filesystem;
using io::DType;

const char* kQuantizeUsage =
    "fp4lab quantize IN.safetensors OUT.safetensors [--format nvfp4|mxfp4]\n"
    "                [--scale-rule ceil|floor] [--2d] [--force]";
const char* kDequantizeUsage = "fp4lab dequantize IN.safetensors OUT.safetensors [--force]";

void printQuantizeHelp() {
  std::printf(
      "usage: %s\n\n"
      "Quantizes every floating-point tensor of IN whose last dimension is a multiple of the\n"
      "block size (32 for MXFP4, 16 for NVFP4) and writes, for each tensor <t>:\n"
      "  <t>               U8  packed E2M1 codes, two per byte, even element in the low nibble\n"
      "  <t>.scales        U8  block scales (E8M0 for MXFP4, E4M3 for NVFP4)\n"
      "  <t>.global_scale  F32 NVFP4 tensor scale (amax / 2688)\n"
      "  <t>.dequant       F32 the dequantized values\n"
      "Other tensors are copied unchanged and listed. Prints SQNR, relative L2, max abs error and\n"
      "the clipped and flushed-to-zero fractions per tensor.\n\n"
      "options:\n"
      "  --format nvfp4|mxfp4     the format (default nvfp4)\n"
      "  --scale-rule ceil|floor  MXFP4 shared-exponent rule (default ceil, as ModelOpt/cuBLAS)\n"
      "  --2d                     NVFP4 16x16 weight tiles (one scale per tile)\n"
      "  --force                  replace OUT if it exists\n",
      kQuantizeUsage);
}

std::string shapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

int64_t numelOf(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

void checkPaths(const std::string& in, const std::string& out, bool force, const char* command) {
  std::error_code ec;
  if (!fs::exists(in, ec)) throw Error("input file does not exist", in, "check the path");
  if (fs::exists(out, ec)) {
    if (fs::equivalent(in, out, ec))
      throw Error("output is the input file; refusing to overwrite it", out,
                  "write to another path");
    if (!force)
      throw Error("output file exists", out,
                  std::string("pass --force to replace it, or choose another path (fp4lab ") +
                      command + ")");
  }
}

void check(fp4_status status, const std::string& where) {
  if (status != FP4_OK)
    throw Error(std::string(fp4_status_string(status)) + ": " + fp4_last_error(), where);
}

struct QuantizeOptions {
  fp4_config cfg;
  std::string formatName;
};

void printRow(const std::string& name, const std::string& shape, const fp4_error_stats& s) {
  std::printf("%-44s %-16s %9.2f %9.5f %11.4g %8.4f%% %8.4f%%", name.c_str(), shape.c_str(),
              fp4_stats_sqnr_db(&s), fp4_stats_rel_l2(&s), s.max_abs_err,
              100.0 * fp4_stats_clip_fraction(&s), 100.0 * fp4_stats_zero_fraction(&s));
  if (s.nonfinite)
    std::printf("  (%" PRId64 " NaN/Inf values: their blocks decode to NaN)", s.nonfinite);
  std::printf("\n");
}

}  // namespace

int runQuantize(const std::vector<std::string>& argv) {
  Args args("quantize", argv, {"format", "scale-rule"}, {"2d", "force", "help"});
  if (args.has("help")) {
    printQuantizeHelp();
    return 0;
  }
  args.requirePositionals(2, kQuantizeUsage);
  const std::string in = args.positionals()[0], out = args.positionals()[1];
  std::string format = args.choice("format", {"nvfp4", "mxfp4"}, "nvfp4");
  fp4_config cfg = fp4_default_config(format == "mxfp4" ? FP4_FORMAT_MXFP4 : FP4_FORMAT_NVFP4);
  if (args.has("scale-rule")) {
    if (format != "mxfp4")
      throw Error("--scale-rule applies to MXFP4 only (NVFP4 scales are E4M3)", "fp4lab quantize");
    cfg.scale_rule = args.choice("scale-rule", {"ceil", "floor"}, "ceil") == "floor"
                         ? FP4_SCALE_RULE_FLOOR
                         : FP4_SCALE_RULE_CEIL;
  }
  if (args.has("2d")) {
    if (format != "nvfp4") throw Error("--2d applies to NVFP4 only", "fp4lab quantize");
    cfg.nvfp4_2d_blocks = 1;
  }
  checkPaths(in, out, args.has("force"), "quantize");

  io::SafetensorsFile file(in);
  if (file.metadata().count("fp4lab.format"))
    throw Error("the file is already the output of fp4lab quantize", in,
                "run fp4lab dequantize on it first, or quantize the original file");
  const int block = fp4_block_size(cfg.format);
  std::set<std::string> inputNames;
  for (const auto& t : file.tensors()) inputNames.insert(t.name);

  io::SafetensorsWriter writer;
  writer.setMetadata("fp4lab.format", format);
  writer.setMetadata("fp4lab.scale_rule",
                     cfg.scale_rule == FP4_SCALE_RULE_FLOOR ? "floor" : "ceil");
  writer.setMetadata("fp4lab.2d_blocks", cfg.nvfp4_2d_blocks ? "1" : "0");
  writer.setMetadata("fp4lab.version", FP4LAB_VERSION);

  std::printf("%s: %zu tensors, %s (%s, block %d)\n\n", in.c_str(), file.tensors().size(),
              format == "mxfp4" ? "MXFP4" : "NVFP4",
              format == "mxfp4"
                  ? (cfg.scale_rule == FP4_SCALE_RULE_FLOOR ? "E8M0 floor" : "E8M0 ceil")
                  : (cfg.nvfp4_2d_blocks ? "E4M3, 16x16 tiles" : "E4M3 + FP32"),
              block);
  std::printf("%-44s %-16s %9s %9s %11s %9s %9s\n", "tensor", "shape", "SQNR dB", "rel L2",
              "max |err|", "clipped", "flushed");
  fp4_error_stats total;
  fp4_stats_clear(&total);
  std::vector<std::string> copied;
  int quantized = 0;
  for (const auto& t : file.tensors()) {
    std::string reason;
    if (!io::isFloatingPoint(t.dtype))
      reason = std::string(io::dtypeName(t.dtype)) + " is not floating point";
    else if (t.shape.empty())
      reason = "a scalar";
    else if (t.numel() == 0)
      reason = "empty";
    else if (t.shape.back() % block != 0)
      reason = "last dimension " + std::to_string(t.shape.back()) + " is not a multiple of " +
               std::to_string(block);
    if (!reason.empty()) {
      writer.add(t.name, t.dtype, t.shape, file.data(t), t.bytes());
      copied.push_back(t.name + " " + io::dtypeName(t.dtype) + " " + shapeString(t.shape) + ": " +
                       reason);
      continue;
    }
    for (const char* suffix : {".scales", ".global_scale", ".dequant"})
      if (inputNames.count(t.name + suffix))
        throw Error("the input already has a tensor named " + t.name + suffix +
                        ", which quantizing " + t.name + " would write",
                    in, "is this file already quantized? Use fp4lab dequantize");
    const int64_t cols = t.shape.back(), rows = t.numel() / cols;
    std::vector<float> x = file.toFloat32(t);
    std::vector<uint8_t> codes(size_t(fp4_packed_bytes(rows, cols)));
    std::vector<uint8_t> scales(size_t(fp4_scale_count(cfg.format, rows, cols)));
    std::vector<float> y(x.size());
    float globalScale = 1.0f;
    fp4_error_stats stats;
    check(
        fp4_quantize(&cfg, x.data(), rows, cols, -1.0f, codes.data(), scales.data(), &globalScale),
        in + ": " + t.name);
    check(fp4_fake_quantize(&cfg, x.data(), rows, cols, -1.0f, y.data(), &stats, nullptr, nullptr),
          in + ": " + t.name);
    std::vector<int64_t> codeShape = t.shape, scaleShape = t.shape;
    codeShape.back() = cols / 2;
    scaleShape.back() = cols / block;
    writer.add(t.name, DType::U8, codeShape, std::move(codes));
    writer.add(t.name + ".scales", DType::U8, scaleShape, std::move(scales));
    if (cfg.format == FP4_FORMAT_NVFP4)
      writer.add(t.name + ".global_scale", DType::F32, {}, &globalScale, sizeof globalScale);
    writer.addFloat32(t.name + ".dequant", t.shape, y);
    printRow(t.name, shapeString(t.shape), stats);
    fp4_stats_merge(&total, &stats);
    ++quantized;
  }
  if (quantized > 1) printRow("all quantized tensors", "", total);
  if (quantized == 0) std::printf("(no tensor could be quantized)\n");
  if (!copied.empty()) {
    std::printf("\ncopied unchanged (%zu):\n", copied.size());
    for (const auto& c : copied) std::printf("  %s\n", c.c_str());
  }
  writer.write(out);
  std::printf("\nwrote %s (%zu tensors)\n", out.c_str(), writer.size());
  return 0;
}

int runDequantize(const std::vector<std::string>& argv) {
  Args args("dequantize", argv, {}, {"force", "help"});
  if (args.has("help")) {
    std::printf(
        "usage: %s\n\nDecodes every <t> that has a <t>.scales companion (as written by fp4lab\n"
        "quantize) back to an F32 tensor <t>, checks it against <t>.dequant when present, and\n"
        "copies other tensors unchanged.\n",
        kDequantizeUsage);
    return 0;
  }
  args.requirePositionals(2, kDequantizeUsage);
  const std::string in = args.positionals()[0], out = args.positionals()[1];
  checkPaths(in, out, args.has("force"), "dequantize");
  io::SafetensorsFile file(in);
  auto formatIt = file.metadata().find("fp4lab.format");
  if (formatIt == file.metadata().end() ||
      (formatIt->second != "mxfp4" && formatIt->second != "nvfp4"))
    throw Error("no fp4lab.format (mxfp4 or nvfp4) in the file's __metadata__", in,
                "dequantize reads files written by fp4lab quantize");
  fp4_config cfg =
      fp4_default_config(formatIt->second == "mxfp4" ? FP4_FORMAT_MXFP4 : FP4_FORMAT_NVFP4);
  const int block = fp4_block_size(cfg.format);

  std::set<std::string> companions;
  for (const auto& t : file.tensors())
    if (file.find(t.name + ".scales"))
      for (const char* suffix : {".scales", ".global_scale", ".dequant"})
        companions.insert(t.name + suffix);

  io::SafetensorsWriter writer;
  int decoded = 0, mismatched = 0;
  for (const auto& t : file.tensors()) {
    if (companions.count(t.name)) continue;
    const io::TensorInfo* scalesInfo = file.find(t.name + ".scales");
    if (!scalesInfo) {
      writer.add(t.name, t.dtype, t.shape, file.data(t), t.bytes());
      continue;
    }
    std::string where = in + ": " + t.name;
    if (t.dtype != DType::U8 || scalesInfo->dtype != DType::U8 || t.shape.empty())
      throw Error("packed codes and scales must be U8 tensors of rank >= 1", where);
    std::vector<int64_t> shape = t.shape;
    shape.back() *= 2;
    const int64_t cols = shape.back(), rows = numelOf(shape) / std::max<int64_t>(cols, 1);
    std::vector<int64_t> expectedScales = shape;
    expectedScales.back() = cols / block;
    if (cols % block != 0 || scalesInfo->shape != expectedScales)
      throw Error("scales have shape " + shapeString(scalesInfo->shape) + ", expected " +
                      shapeString(expectedScales) + " for codes of shape " + shapeString(t.shape),
                  where, "the file is not a consistent fp4lab quantize output");
    float globalScale = 1.0f;
    if (cfg.format == FP4_FORMAT_NVFP4) {
      const io::TensorInfo* g = file.find(t.name + ".global_scale");
      if (!g || g->dtype != DType::F32 || g->numel() != 1)
        throw Error("NVFP4 tensor without an F32 scalar .global_scale", where);
      std::memcpy(&globalScale, file.data(*g), 4);
    }
    std::vector<float> y(size_t(rows * cols));
    check(fp4_dequantize(&cfg, file.data(t), file.data(*scalesInfo), globalScale, rows, cols,
                         y.data()),
          where);
    if (const io::TensorInfo* stored = file.find(t.name + ".dequant")) {
      std::vector<float> expected = file.toFloat32(*stored);
      if (expected.size() != y.size() ||
          std::memcmp(expected.data(), y.data(), y.size() * 4) != 0) {
        std::fprintf(stderr, "warning: %s decodes differently from its stored .dequant\n",
                     t.name.c_str());
        ++mismatched;
      }
    }
    writer.addFloat32(t.name, shape, y);
    ++decoded;
  }
  writer.write(out);
  std::printf(
      "decoded %d %s tensors (%d differ from their stored .dequant); wrote %s (%zu tensors)\n",
      decoded, formatIt->second == "mxfp4" ? "MXFP4" : "NVFP4", mismatched, out.c_str(),
      writer.size());
  return mismatched ? 1 : 0;
}

}  // namespace fp4lab::cli
