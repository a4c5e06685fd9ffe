// Throughput of the CUDA kernels (fp4_cuda.h) per format and size, against a device-to-device
// copy of the same bytes in the same run, after one bit-exact check against the CPU reference.
// Without a CUDA device it says so and exits 0. Usage: bench_cuda [max_elements]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <vector>

#include "fp4lab/kernels/fp4.h"
#include "fp4lab/kernels/fp4_cuda.h"

namespace {

#define BENCH_CUDA(call)                                                                           \
  do {                                                                                             \
    cudaError_t err_ = (call);                                                                     \
    if (err_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "bench_cuda: %s failed: %s (%s:%d)\n", #call, cudaGetErrorString(err_), \
                   __FILE__, __LINE__);                                                            \
      std::exit(2);                                                                                \
    }                                                                                              \
  } while (0)

#define BENCH_FP4(call)                                                                      \
  do {                                                                                       \
    fp4_status st_ = (call);                                                                 \
    if (st_ != FP4_OK) {                                                                     \
      std::fprintf(stderr, "bench_cuda: %s failed: %s: %s\n", #call, fp4_status_string(st_), \
                   fp4_last_error());                                                        \
      std::exit(2);                                                                          \
    }                                                                                        \
  } while (0)

const char* formatName(fp4_format f) {
  return f == FP4_FORMAT_MXFP4 ? "MXFP4" : "NVFP4";
}

// Cheap reproducible test data: roughly normal (sum of uniforms) with a heavy tail.
std::vector<float> makeData(size_t n) {
  std::vector<float> x(n);
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto next = [&] {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    return float(state >> 40) * (1.0f / 16777216.0f);
  };
  for (size_t i = 0; i < n; ++i) {
    float v = next() + next() + next() + next() - 2.0f;
    x[i] = (i % 997 == 0) ? v * 40.0f : v;
  }
  return x;
}

// Mean milliseconds per call: two warm-up calls, then enough calls for about 20 ms of work.
double timeMs(const std::function<void()>& call, cudaStream_t stream) {
  cudaEvent_t start, stop;
  BENCH_CUDA(cudaEventCreate(&start));
  BENCH_CUDA(cudaEventCreate(&stop));
  call();
  call();
  BENCH_CUDA(cudaStreamSynchronize(stream));
  BENCH_CUDA(cudaEventRecord(start, stream));
  call();
  BENCH_CUDA(cudaEventRecord(stop, stream));
  BENCH_CUDA(cudaEventSynchronize(stop));
  float once = 0;
  BENCH_CUDA(cudaEventElapsedTime(&once, start, stop));
  int iterations = int(std::clamp(20.0 / std::max(double(once), 1e-3), 5.0, 2000.0));
  BENCH_CUDA(cudaEventRecord(start, stream));
  for (int i = 0; i < iterations; ++i) call();
  BENCH_CUDA(cudaEventRecord(stop, stream));
  BENCH_CUDA(cudaEventSynchronize(stop));
  float total = 0;
  BENCH_CUDA(cudaEventElapsedTime(&total, start, stop));
  BENCH_CUDA(cudaEventDestroy(start));
  BENCH_CUDA(cudaEventDestroy(stop));
  return double(total) / iterations;
}

struct Buffers {
  float* x = nullptr;
  float* y = nullptr;
  uint8_t* codes = nullptr;
  uint8_t* scales = nullptr;
};

// One size per format against fp4_set_backend(FP4_BACKEND_REFERENCE): codes, scales, the
// global scale and fake-quant y must be identical, with the plain and the richest options.
bool verify(const Buffers& b, cudaStream_t stream) {
  const int64_t rows = 256, cols = 4096, n = rows * cols;
  std::vector<float> x = makeData(static_cast<size_t>(n));
  x[12345] = NAN;  // one non-finite block
  BENCH_CUDA(cudaMemcpy(b.x, x.data(), size_t(n) * 4, cudaMemcpyHostToDevice));
  BENCH_FP4(fp4_set_backend(FP4_BACKEND_REFERENCE));
  bool ok = true;
  for (fp4_format format : {FP4_FORMAT_MXFP4, FP4_FORMAT_NVFP4}) {
    for (int rich = 0; rich < 2; ++rich) {
      fp4_config cfg = fp4_default_config(format);
      if (rich) {
        cfg.hadamard = 1;
        cfg.rounding = FP4_ROUNDING_STOCHASTIC;
        cfg.seed = 42;
        cfg.nvfp4_2d_blocks = format == FP4_FORMAT_NVFP4;
        cfg.scale_rule = FP4_SCALE_RULE_FLOOR;
      }
      const int64_t blocks = fp4_scale_count(format, rows, cols);
      std::vector<uint8_t> refCodes(static_cast<size_t>(n / 2)),
          refScales(static_cast<size_t>(blocks));
      std::vector<uint8_t> codes(refCodes.size()), scales(refScales.size());
      std::vector<float> refY(static_cast<size_t>(n)), y(static_cast<size_t>(n));
      float refS2 = 0, s2 = 0;
      BENCH_FP4(fp4_quantize(&cfg, x.data(), rows, cols, -1.0f, refCodes.data(), refScales.data(),
                             &refS2));
      BENCH_FP4(fp4_fake_quantize(&cfg, x.data(), rows, cols, -1.0f, refY.data(), nullptr, nullptr,
                                  nullptr));
      BENCH_FP4(fp4_cuda_quantize(&cfg, b.x, rows, cols, -1.0f, b.codes, b.scales, &s2, stream));
      BENCH_FP4(fp4_cuda_fake_quantize(&cfg, b.x, rows, cols, -1.0f, b.y, nullptr, nullptr, nullptr,
                                       stream));
      BENCH_CUDA(cudaStreamSynchronize(stream));
      BENCH_CUDA(cudaMemcpy(codes.data(), b.codes, codes.size(), cudaMemcpyDeviceToHost));
      BENCH_CUDA(cudaMemcpy(scales.data(), b.scales, scales.size(), cudaMemcpyDeviceToHost));
      BENCH_CUDA(cudaMemcpy(y.data(), b.y, y.size() * 4, cudaMemcpyDeviceToHost));
      bool same = codes == refCodes && scales == refScales && std::memcmp(&s2, &refS2, 4) == 0 &&
                  std::memcmp(y.data(), refY.data(), y.size() * 4) == 0;
      std::printf("verify %s %s %lldx%lld against the CPU reference: %s\n", formatName(format),
                  rich ? "(hadamard, stochastic, floor/2-D)" : "(defaults)", (long long)rows,
                  (long long)cols, same ? "identical" : "MISMATCH");
      ok = ok && same;
    }
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  int devices = fp4_cuda_device_count();
  if (devices == 0) {
    std::printf("bench_cuda: no CUDA device; nothing to measure\n");
    return 0;
  }
  int64_t maxElements = int64_t(64) << 20;
  if (argc > 1) maxElements = std::max<int64_t>(4096, std::atoll(argv[1]));

  cudaDeviceProp prop;
  BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, %.1f GiB\n", prop.name, prop.multiProcessorCount,
              double(prop.totalGlobalMem) / (1 << 30));

  cudaStream_t stream;
  BENCH_CUDA(cudaStreamCreate(&stream));
  Buffers b;
  const size_t bufferElements = size_t(std::max<int64_t>(maxElements, 256 * 4096));
  BENCH_CUDA(cudaMalloc(&b.x, bufferElements * 4));
  BENCH_CUDA(cudaMalloc(&b.y, bufferElements * 4));
  BENCH_CUDA(cudaMalloc(&b.codes, bufferElements / 2));
  BENCH_CUDA(cudaMalloc(&b.scales, bufferElements / 16));

  if (!verify(b, stream)) {
    std::printf("bench_cuda: the CUDA results differ from the CPU reference; not timing them\n");
    return 1;
  }

  std::vector<float> x = makeData(bufferElements);
  BENCH_CUDA(cudaMemcpy(b.x, x.data(), bufferElements * 4, cudaMemcpyHostToDevice));

  // A device-to-device copy moving the same bytes (read + write) as the kernel, per byte count.
  std::map<int64_t, double> copyMs;
  auto copyBandwidth = [&](int64_t bytesMoved) {
    auto it = copyMs.find(bytesMoved);
    if (it == copyMs.end()) {
      size_t half = size_t(bytesMoved / 2);
      double ms = timeMs(
          [&] { BENCH_CUDA(cudaMemcpyAsync(b.y, b.x, half, cudaMemcpyDeviceToDevice, stream)); },
          stream);
      it = copyMs.emplace(bytesMoved, ms).first;
    }
    return double(bytesMoved) / (it->second * 1e-3) / 1e9;
  };

  std::printf("\n%-34s %10s %10s %10s %9s %12s %6s\n", "operation", "elements", "us/call",
              "Gelem/s", "GB/s", "copy GB/s", "ratio");
  for (int64_t n = 4096; n <= maxElements; n *= 4) {
    const int64_t cols = 4096, rows = n / cols;
    for (fp4_format format : {FP4_FORMAT_MXFP4, FP4_FORMAT_NVFP4}) {
      const int block = fp4_block_size(format);
      const float amax = fp4_tensor_amax(x.data(), n);
      float s2 = 0;
      fp4_config cfg = fp4_default_config(format);
      BENCH_FP4(fp4_cuda_quantize(&cfg, b.x, rows, cols, amax, b.codes, b.scales, &s2, stream));
      const int64_t quantBytes = 4 * n + n / 2 + n / block;
      const int64_t fakeBytes = 8 * n;
      struct Op {
        const char* name;
        int64_t bytes;
        std::function<void()> call;
      };
      fp4_config hadamard = cfg;
      hadamard.hadamard = 1;
      fp4_config tiles = cfg;
      tiles.nvfp4_2d_blocks = 1;
      fp4_config stochastic = cfg;
      stochastic.rounding = FP4_ROUNDING_STOCHASTIC;
      fp4_error_stats stats;
      std::vector<Op> ops = {
          {"quantize", quantBytes,
           [&] {
             BENCH_FP4(fp4_cuda_quantize(&cfg, b.x, rows, cols, amax, b.codes, b.scales, nullptr,
                                         stream));
           }},
          {"dequantize", quantBytes,
           [&] {
             BENCH_FP4(fp4_cuda_dequantize(&cfg, b.codes, b.scales, s2, rows, cols, b.y, stream));
           }},
          {"fake-quant", fakeBytes,
           [&] {
             BENCH_FP4(fp4_cuda_fake_quantize(&cfg, b.x, rows, cols, amax, b.y, nullptr, nullptr,
                                              nullptr, stream));
           }},
          {"fake-quant + stats (waits)", fakeBytes,
           [&] {
             BENCH_FP4(fp4_cuda_fake_quantize(&cfg, b.x, rows, cols, amax, b.y, &stats, nullptr,
                                              nullptr, stream));
           }},
          {"fake-quant hadamard", fakeBytes,
           [&] {
             BENCH_FP4(fp4_cuda_fake_quantize(&hadamard, b.x, rows, cols, amax, b.y, nullptr,
                                              nullptr, nullptr, stream));
           }},
          {"fake-quant stochastic", fakeBytes,
           [&] {
             BENCH_FP4(fp4_cuda_fake_quantize(&stochastic, b.x, rows, cols, amax, b.y, nullptr,
                                              nullptr, nullptr, stream));
           }},
      };
      if (format == FP4_FORMAT_NVFP4) {
        ops.push_back({"quantize, amax measured", quantBytes, [&] {
                         BENCH_FP4(fp4_cuda_quantize(&cfg, b.x, rows, cols, -1.0f, b.codes,
                                                     b.scales, nullptr, stream));
                       }});
        ops.push_back({"quantize 16x16 tiles", quantBytes, [&] {
                         BENCH_FP4(fp4_cuda_quantize(&tiles, b.x, rows, cols, amax, b.codes,
                                                     b.scales, nullptr, stream));
                       }});
      }
      for (const Op& op : ops) {
        double ms = timeMs(op.call, stream);
        double gbps = double(op.bytes) / (ms * 1e-3) / 1e9;
        double copy = copyBandwidth(op.bytes);
        char name[64];
        std::snprintf(name, sizeof name, "%s %s", formatName(format), op.name);
        std::printf("%-34s %10lld %10.2f %10.2f %9.1f %12.1f %6.2f\n", name, (long long)n, ms * 1e3,
                    double(n) / (ms * 1e-3) / 1e9, gbps, copy, gbps / copy);
      }
    }
    std::fflush(stdout);
  }
  std::printf(
      "\nGB/s counts the bytes each operation must move (fp32 in or out, 4-bit codes, "
      "scale bytes);\nratio = GB/s over a device-to-device cudaMemcpy moving the same "
      "bytes (read + write).\n");
  cudaFree(b.x);
  cudaFree(b.y);
  cudaFree(b.codes);
  cudaFree(b.scales);
  cudaStreamDestroy(stream);
  return 0;
}
