// bench_analyze: `fp4lab analyze` throughput (weights/s) in each of the four formats, against the
// kernels' fake quantization of the same tensors, side by side in one run. On the largest model
// available: Hugging Face's SmolLM2-135M-Instruct where the setup script put it
// (~/.cache/fp4lab/models/smollm2-135m-instruct), else a synthetic BF16 llama folder written here.
//
// Per format, best of --reps:
//   analysis     analyzeModel (one format): reading each BF16 weight to fp32, weight histogram
//                and outliers, the fused pass with statistics and per-block errors, scale-code
//                and amax histograms; `threads` layers at once (the kernels' own threads inside);
//   fq           fp4_fake_quantize of the same fp32 tensors (already in memory) writing y: what
//                a fake-quantized layer's forward costs, layer after layer (kernel threads);
//   fq+stats     the same with statistics, per-block squared errors and amaxes (what the analysis
//                asks the kernels for);
//   read         reading the weights to fp32 alone (the floor of the analysis' I/O).
//
// Usage: bench_analyze [--model DIR] [--synthetic] [--reps N] [--threads N] [--quick]
// Plain C++ (fp4lab_analyze), no LibTorch.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "fp4lab/analyze/analyze.h"
#include "fp4lab/common/files.h"
#include "fp4lab/error.h"
#include "fp4lab/io/safetensors.h"
#include "fp4lab/kernels/fp4.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace an = fp4lab::analyze;
namespace files = fp4lab::files;

double seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A llama-shaped BF16 folder (no embeddings: the analysis skips them), random normal-ish bits.
void writeSynthetic(const std::string& dir, int layers, int hidden, int ffn) {
  files::createDirectories(dir);
  fp4lab::io::SafetensorsWriter w;
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto bf16 = [&](int64_t n) {
    std::vector<uint16_t> v(static_cast<size_t>(n));
    for (auto& x : v) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      // Sum of four uniforms: roughly normal, scale 0.02.
      float s = 0;
      for (int k = 0; k < 4; ++k) s += float((state >> (16 * k)) & 0xFFFF) / 65536.0f - 0.5f;
      const float f = s * 0.035f;
      uint32_t u;
      std::memcpy(&u, &f, 4);
      x = uint16_t((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
    }
    return v;
  };
  auto add = [&](const std::string& name, int64_t rows, int64_t cols) {
    const auto v = bf16(rows * cols);
    w.add(name, fp4lab::io::DType::BF16, {rows, cols}, v.data(), v.size() * 2);
  };
  for (int l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "self_attn.q_proj.weight", hidden, hidden);
    add(p + "self_attn.k_proj.weight", hidden / 4, hidden);
    add(p + "self_attn.v_proj.weight", hidden / 4, hidden);
    add(p + "self_attn.o_proj.weight", hidden, hidden);
    add(p + "mlp.gate_proj.weight", ffn, hidden);
    add(p + "mlp.up_proj.weight", ffn, hidden);
    add(p + "mlp.down_proj.weight", hidden, ffn);
  }
  w.write(files::join(dir, "model.safetensors"));
  files::writeFileAtomically(files::join(dir, "config.json"), "{\"model_type\": \"llama\"}");
}

struct Loaded {
  std::vector<an::Layer> layers;
  std::vector<std::vector<float>> weights;
  int64_t count = 0;
};

Loaded load(const an::Options& o, double* readSeconds) {
  Loaded out;
  out.layers = an::selectLayers(o);
  const auto t0 = Clock::now();
  std::vector<fp4lab::io::SafetensorsFile> shards;
  for (const std::string& name : fp4lab::io::modelWeightFiles(o.modelDir))
    shards.emplace_back(files::join(o.modelDir, name));
  for (const an::Layer& l : out.layers)
    for (const auto& s : shards)
      if (const fp4lab::io::TensorInfo* t = s.find(l.tensor)) {
        out.weights.push_back(s.toFloat32(*t));
        break;
      }
  *readSeconds = seconds(t0);
  for (const an::Layer& l : out.layers) out.count += l.rows * l.cols;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = std::string(std::getenv("HOME") ? std::getenv("HOME") : "") +
                      "/.cache/fp4lab/models/smollm2-135m-instruct";
  bool synthetic = false, quick = false;
  int reps = 3, threads = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--model")
      model = next();
    else if (a == "--synthetic")
      synthetic = true;
    else if (a == "--quick")
      quick = true, synthetic = true, reps = 1;
    else if (a == "--reps")
      reps = std::max(1, std::atoi(next().c_str()));
    else if (a == "--threads")
      threads = std::max(0, std::atoi(next().c_str()));
    else {
      std::fprintf(stderr,
                   "usage: bench_analyze [--model DIR] [--synthetic] [--reps N] [--threads N] "
                   "[--quick]\n");
      return 2;
    }
  }
  try {
    std::string temporary;
    if (synthetic || !files::isRegularFile(files::join(model, "model.safetensors"))) {
      temporary = files::makeTemporaryDirectory("/tmp/fp4lab-bench-analyze-");
      model = files::join(temporary, "model");
      if (quick)
        writeSynthetic(model, 2, 256, 512);
      else
        writeSynthetic(model, 12, 768, 2048);
    }
    an::Options o;
    o.modelDir = model;
    o.threads = threads;
    double readSeconds = 0;
    Loaded data = load(o, &readSeconds);
    for (int r = 1; r < reps; ++r) {  // best of reps for the read floor too
      double s = 0;
      load(o, &s);
      readSeconds = std::min(readSeconds, s);
    }
    const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    std::printf(
        "model: %s\n%zu layers, %.1f M weights; %u hardware threads; analysis threads %d; "
        "kernel backend %s, kernel threads %d; best of %d\n",
        model.c_str(), data.layers.size(), double(data.count) / 1e6, hw,
        threads > 0 ? threads : int(hw), fp4_backend_name(fp4_get_backend()), fp4_get_num_threads(),
        reps);
    std::printf("read to fp32 alone: %.3f s (%.1f M weights/s)\n\n", readSeconds,
                double(data.count) / readSeconds / 1e6);
    std::printf("%-12s %14s %14s %14s %10s %10s\n", "format", "analysis M/s", "fq M/s",
                "fq+stats M/s", "an/fq", "an/fq+st");
    size_t maxRows = 0;
    for (const auto& w : data.weights) maxRows = std::max(maxRows, w.size());
    std::vector<float> y(maxRows), blockSq(maxRows / 16 + 1), blockAmax(maxRows / 16 + 1);
    for (const std::string& format : an::formatNames()) {
      const fp4_config cfg = an::formatConfig(format);
      double analysis = 1e30, fq = 1e30, fqStats = 1e30;
      for (int r = 0; r < reps; ++r) {
        an::Options one = o;
        one.formats = {format};
        auto t0 = Clock::now();
        const an::Analysis a = an::analyzeModel(one);
        analysis = std::min(analysis, seconds(t0));
        for (const an::Entry& e : a.entries)
          if (!e.measured) std::fprintf(stderr, "warning: %s not measured\n", e.format.c_str());
        for (int withStats = 0; withStats < 2; ++withStats) {
          t0 = Clock::now();
          for (size_t l = 0; l < data.layers.size(); ++l) {
            const an::Layer& L = data.layers[l];
            fp4_error_stats s;
            const fp4_status st =
                fp4_fake_quantize(&cfg, data.weights[l].data(), L.rows, L.cols, -1.0f, y.data(),
                                  withStats ? &s : nullptr, withStats ? blockSq.data() : nullptr,
                                  withStats ? blockAmax.data() : nullptr);
            if (st != FP4_OK) throw fp4lab::Error(fp4_last_error(), L.tensor);
          }
          (withStats ? fqStats : fq) = std::min(withStats ? fqStats : fq, seconds(t0));
        }
      }
      const double n = double(data.count) / 1e6;
      std::printf("%-12s %14.1f %14.1f %14.1f %10.2f %10.2f\n", format.c_str(), n / analysis,
                  n / fq, n / fqStats, analysis / fq, analysis / fqStats);
    }
    // All four formats in one analysis (what `fp4lab analyze` does by default: the weights are
    // read and histogrammed once), against the four fake quantizations.
    {
      double analysis = 1e30, fq = 1e30, fqStats = 1e30;
      for (int r = 0; r < reps; ++r) {
        auto t0 = Clock::now();
        an::analyzeModel(o);
        analysis = std::min(analysis, seconds(t0));
        for (int withStats = 0; withStats < 2; ++withStats) {
          t0 = Clock::now();
          for (const std::string& format : an::formatNames()) {
            const fp4_config cfg = an::formatConfig(format);
            for (size_t l = 0; l < data.layers.size(); ++l) {
              const an::Layer& L = data.layers[l];
              fp4_error_stats s;
              fp4_fake_quantize(&cfg, data.weights[l].data(), L.rows, L.cols, -1.0f, y.data(),
                                withStats ? &s : nullptr, withStats ? blockSq.data() : nullptr,
                                withStats ? blockAmax.data() : nullptr);
            }
          }
          (withStats ? fqStats : fq) = std::min(withStats ? fqStats : fq, seconds(t0));
        }
      }
      const double n = 4 * double(data.count) / 1e6;  // weight-format pairs
      std::printf("%-12s %14.1f %14.1f %14.1f %10.2f %10.2f\n", "all four", n / analysis, n / fq,
                  n / fqStats, analysis / fq, analysis / fqStats);
      std::printf("(all four: weight-format pairs per second)\n");
    }
    if (!temporary.empty()) files::removeTree(temporary);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_analyze: %s\n", e.what());
    return 1;
  }
  return 0;
}
