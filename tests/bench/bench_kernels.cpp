// Benchmark of the FP4 CPU kernels, side by side in one run: memcpy of the same bytes, the
// scalar reference, the vectorized backend on 1 and 2 threads, and the same fake quantization
// written as a composition of LibTorch tensor operations (what a PyTorch user runs today).
// Prints a markdown table (docs/performance.md). Usage: bench_kernels [--quick] [--max-elements N]
// [--sizes N,N,..] [--formats mxfp4,nvfp4] [--threads T,T,..] [--fake-only]. --fake-only times
// memcpy and fake-quant without statistics only (no LibTorch, quantize, dequantize, reference).
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "fp4lab/kernels/fp4.h"

namespace {

using Clock = std::chrono::steady_clock;

// Best time of several repetitions, each long enough to be measured (>= minSeconds in total).
double timeIt(const std::function<void()>& fn, double minSeconds) {
  fn();  // warm up: page faults, caches, thread start
  double best = 1e30, total = 0;
  int reps = 0;
  while ((total < minSeconds || reps < 3) && reps < 1000) {
    auto t0 = Clock::now();
    fn();
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::min(best, s);
    total += s;
    ++reps;
  }
  return best;
}

// NVFP4 and MXFP4 fake quantization as LibTorch operations: the usual emulation (float8 cast
// for the E4M3 scale, log2/ceil for the E8M0 exponent, thresholds for E2M1).
torch::Tensor e2m1RoundTorch(const torch::Tensor& scaled) {
  torch::Tensor a = scaled.abs();
  torch::Tensor q = torch::where(
      a > 5.0, 6.0,
      torch::where(
          a >= 3.5, 4.0,
          torch::where(
              a > 2.5, 3.0,
              torch::where(
                  a >= 1.75, 2.0,
                  torch::where(a > 1.25, 1.5,
                               torch::where(a >= 0.75, 1.0, torch::where(a > 0.25, 0.5, 0.0)))))));
  return torch::copysign(q.to(torch::kFloat), scaled);
}

torch::Tensor fakeQuantTorch(const torch::Tensor& x, fp4_format format) {
  int64_t block = format == FP4_FORMAT_MXFP4 ? 32 : 16;
  torch::Tensor xb = x.view({x.size(0), x.size(1) / block, block});
  torch::Tensor blockAmax = xb.abs().amax(-1, /*keepdim=*/true);
  if (format == FP4_FORMAT_MXFP4) {
    torch::Tensor e = torch::ceil(torch::log2(blockAmax / 6.0)).clamp(-127, 127);
    e = torch::where(blockAmax == 0, torch::full_like(e, -127), e);
    torch::Tensor scale = torch::exp2(e);
    return (e2m1RoundTorch(xb / scale) * scale).view_as(x);
  }
  torch::Tensor s2 = x.abs().max() / 2688.0;
  torch::Tensor sf =
      (blockAmax / (6.0 * s2)).clamp_max(448.0).to(torch::kFloat8_e4m3fn).to(torch::kFloat);
  torch::Tensor divisor = sf * s2;
  torch::Tensor safe = torch::where(divisor == 0, torch::ones_like(divisor), divisor);
  torch::Tensor q = e2m1RoundTorch(xb / safe) * divisor;
  return q.view_as(x);
}

// "4096,64K,1M" -> {4096, 65536, 1048576}.
std::vector<int64_t> parseList(const char* text) {
  std::vector<int64_t> values;
  for (const char* p = text; *p;) {
    char* end = nullptr;
    int64_t v = std::strtoll(p, &end, 10);
    if (end == p) break;
    if (*end == 'K' || *end == 'k') v <<= 10, ++end;
    if (*end == 'M' || *end == 'm') v <<= 20, ++end;
    values.push_back(v);
    p = *end == ',' ? end + 1 : end;
    if (*end != ',') break;
  }
  return values;
}

struct Row {
  std::string format, op, impl;
  int64_t elements;
  double seconds, bytes;
};

void printRow(const Row& r, double memcpySeconds, double torchSeconds) {
  double gbps = r.bytes / r.seconds / 1e9;
  std::printf("| %s | %s | %lld | %s | %.3f | %.2f | %.0f%% |", r.format.c_str(), r.op.c_str(),
              (long long)r.elements, r.impl.c_str(), r.elements / r.seconds / 1e9, gbps,
              100.0 * memcpySeconds / r.seconds);
  if (torchSeconds > 0)
    std::printf(" %.1fx |\n", torchSeconds / r.seconds);
  else
    std::printf(" |\n");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, fakeOnly = false;
  int64_t maxElements = int64_t(64) << 20;
  std::vector<int64_t> sizes = {int64_t(4) << 10, int64_t(64) << 10, int64_t(1) << 20,
                                int64_t(16) << 20, int64_t(64) << 20};
  std::vector<int64_t> threadCounts = {1, 2};
  std::vector<fp4_format> formats = {FP4_FORMAT_MXFP4, FP4_FORMAT_NVFP4};
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) {
      quick = true;
      sizes = {int64_t(4) << 10, int64_t(64) << 10};
    } else if (!std::strcmp(argv[i], "--fake-only")) {
      fakeOnly = true;
    } else if (!std::strcmp(argv[i], "--max-elements") && i + 1 < argc) {
      maxElements = std::atoll(argv[++i]);
    } else if (!std::strcmp(argv[i], "--sizes") && i + 1 < argc) {
      sizes = parseList(argv[++i]);
    } else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) {
      threadCounts = parseList(argv[++i]);
    } else if (!std::strcmp(argv[i], "--formats") && i + 1 < argc) {
      std::string list = argv[++i];
      formats.clear();
      if (list.find("mxfp4") != std::string::npos) formats.push_back(FP4_FORMAT_MXFP4);
      if (list.find("nvfp4") != std::string::npos) formats.push_back(FP4_FORMAT_NVFP4);
    } else {
      std::fprintf(stderr,
                   "usage: bench_kernels [--quick] [--max-elements N] [--sizes N,N,..] "
                   "[--formats mxfp4,nvfp4] [--threads T,T,..] [--fake-only]\n");
      return 2;
    }
  }
  const double minSeconds = quick ? 0.02 : 0.3;
  const int64_t cols = 4096;
  const int hw = int(std::max(1u, std::thread::hardware_concurrency()));

  fp4_set_backend(FP4_BACKEND_AUTO);
  std::printf("fp4lab kernel benchmark: backend %s, %d hardware threads, LibTorch %s\n\n",
              fp4_backend_name(fp4_get_backend()), hw, TORCH_VERSION);
  std::printf(
      "| format | op | elements | implementation | Gelem/s | GB/s | of memcpy | vs LibTorch |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");

  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (int64_t n : sizes) {
    if (n > maxElements) continue;
    const int64_t rows = std::max<int64_t>(1, n / cols), width = n / rows;
    std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
    for (float& v : x) v = normal(rng);
    std::vector<float> copy(static_cast<size_t>(n));
    fp4_set_num_threads(1);
    double memcpyOne =
        timeIt([&] { std::memcpy(copy.data(), x.data(), size_t(n) * 4); }, minSeconds);
    std::printf("| - | memcpy %lld floats (1 core) | %lld | memcpy | %.3f | %.2f | 100%% | |\n",
                (long long)n, (long long)n, n / memcpyOne / 1e9, 8.0 * n / memcpyOne / 1e9);

    for (fp4_format format : formats) {
      const char* fname = format == FP4_FORMAT_MXFP4 ? "MXFP4" : "NVFP4";
      fp4_config cfg = fp4_default_config(format);
      std::vector<uint8_t> codes(size_t(fp4_packed_bytes(rows, width)));
      std::vector<uint8_t> scales(size_t(fp4_scale_count(format, rows, width)));
      float s2 = 1;
      const double scaleBytes = double(scales.size());
      const double fakeBytes = 8.0 * n, quantBytes = 4.0 * n + n / 2.0 + scaleBytes,
                   dequantBytes = n / 2.0 + scaleBytes + 4.0 * n;

      // LibTorch composition, 1 thread (and all threads for the scaling comparison).
      torch::Tensor xt = torch::from_blob(x.data(), {rows, width}, torch::kFloat);
      at::set_num_threads(1);
      double torchOne = fakeOnly ? 0 : timeIt([&] { fakeQuantTorch(xt, format); }, minSeconds);
      if (!fakeOnly) {
        // How often the usual emulation disagrees with the spec (log2 rounding, E4M3 casts).
        torch::Tensor ref = fakeQuantTorch(xt, format);
        fp4_fake_quantize(&cfg, x.data(), rows, width, -1, y.data(), nullptr, nullptr, nullptr);
        torch::Tensor ours = torch::from_blob(y.data(), {rows, width}, torch::kFloat);
        double mismatch = (ref != ours).to(torch::kDouble).mean().item<double>();
        printRow({fname, "fake-quant",
                  "LibTorch ops, 1 thread (" + std::to_string(mismatch * 100).substr(0, 6) +
                      "% elements differ from spec)",
                  n, torchOne, fakeBytes},
                 memcpyOne, torchOne);
      }

      for (int64_t threadCount : threadCounts) {
        const int threads = int(threadCount);
        if (threads < 1 || threads > hw) continue;
        fp4_set_num_threads(threads);
        std::string impl = std::string(fp4_backend_name(fp4_get_backend())) + ", " +
                           std::to_string(threads) + (threads == 1 ? " thread" : " threads");
        if (fakeOnly) {
          double f = timeIt(
              [&] {
                fp4_fake_quantize(&cfg, x.data(), rows, width, -1, y.data(), nullptr, nullptr,
                                  nullptr);
              },
              minSeconds);
          printRow({fname, "fake-quant", impl, n, f, fakeBytes}, memcpyOne, 0);
          continue;
        }
        double q = timeIt(
            [&] {
              fp4_quantize(&cfg, x.data(), rows, width, -1, codes.data(), scales.data(), &s2);
            },
            minSeconds);
        double d = timeIt(
            [&] { fp4_dequantize(&cfg, codes.data(), scales.data(), s2, rows, width, y.data()); },
            minSeconds);
        double f = timeIt(
            [&] {
              fp4_fake_quantize(&cfg, x.data(), rows, width, -1, y.data(), nullptr, nullptr,
                                nullptr);
            },
            minSeconds);
        fp4_error_stats stats;
        double fs = timeIt(
            [&] {
              fp4_fake_quantize(&cfg, x.data(), rows, width, -1, y.data(), &stats, nullptr,
                                nullptr);
            },
            minSeconds);
        printRow({fname, "quantize", impl, n, q, quantBytes}, memcpyOne, 0);
        printRow({fname, "dequantize", impl, n, d, dequantBytes}, memcpyOne, 0);
        printRow({fname, "fake-quant", impl, n, f, fakeBytes}, memcpyOne, torchOne);
        printRow({fname, "fake-quant + stats", impl, n, fs, fakeBytes}, memcpyOne, torchOne);
      }
      if (!fakeOnly && n <= (int64_t(1) << 20)) {  // the reference is slow by design
        fp4_set_backend(FP4_BACKEND_REFERENCE);
        fp4_set_num_threads(1);
        double r = timeIt(
            [&] {
              fp4_fake_quantize(&cfg, x.data(), rows, width, -1, y.data(), nullptr, nullptr,
                                nullptr);
            },
            minSeconds);
        printRow({fname, "fake-quant", "reference, 1 thread", n, r, fakeBytes}, memcpyOne,
                 torchOne);
        fp4_set_backend(FP4_BACKEND_AUTO);
      }
    }
  }
  return 0;
}
