// Which GEMM multiplies the BF16 operands of the engine's linear layers (model::linear) on this
// machine: LibTorch's BF16 GEMM (oneDNN and MKL: fast with AMX tiles, and on CPUs whose AVX-512
// BF16 units it uses well), or its fp32 GEMM on the BF16-rounded operands (model/linear.cpp:
// twice as fast where the BF16 kernels are slow). Which one wins depends on the CPU, LibTorch's
// build and the shapes, so it is measured, not guessed from the CPU's features: both paths are
// timed on the model's own products (forward and the two backward products, BF16 operands, as a
// training step runs them), and the faster one is used. The timing is kept in a cache file, per
// CPU, LibTorch version, thread count and set of shapes, so a machine measures once.
//
// The choice changes speed only: both paths multiply the same BF16-rounded operands exactly and
// accumulate in fp32, in another order (the last bits of a run may differ between them, as between
// thread counts of LibTorch's GEMMs). FP4LAB_BF16_GEMM=bf16 or fp32 forces one.
//
// Plain C++: the measurement lives in gemm_choice.cpp.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace fp4lab::model {

enum class Bf16Gemm { LibTorch, Fp32 };
// "bf16" (LibTorch's BF16 GEMM) or "fp32", as FP4LAB_BF16_GEMM spells them.
const char* toString(Bf16Gemm gemm);

// The products of `count` linear layers alike in one step: x [rows, in] times w^T [in, out].
struct GemmShape {
  int64_t rows = 0, in = 0, out = 0, count = 1;
};

struct Bf16GemmChoice {
  Bf16Gemm gemm = Bf16Gemm::LibTorch;
  // The step's products on each path, in seconds, estimated from the timings (NaN when forced).
  double libTorchSeconds = NAN;
  double fp32Seconds = NAN;
  std::string source;  // "measured", "cached", or "FP4LAB_BF16_GEMM=..."
  int threads = 0;
  // One line for the log's `bf16_gemm` event, `inspect` and the progress output.
  std::string describe() const;
};

struct GemmChoiceOptions {
  bool backward = true;     // a training step (forward and both backward products), else forward
  std::string cacheFile;    // empty: measure every time
  double maxFlops = 2.5e8;  // see gemmTimingRows
  int64_t minRows = 128;
  int repeats = 3;  // per path and shape, alternating, after a warm-up; the fastest counts
};

// Chooses for `shapes` as above and makes model::linear use the choice in this process from now
// on. Every call with the same cache key returns the first answer (cached in the process too).
Bf16GemmChoice chooseBf16Gemm(const std::vector<GemmShape>& shapes,
                              const GemmChoiceOptions& options);

// Times both paths on `shapes` now, without the cache or FP4LAB_BF16_GEMM, and changes nothing.
Bf16GemmChoice measureBf16Gemm(const std::vector<GemmShape>& shapes,
                               const GemmChoiceOptions& options);

// The measurement's arithmetic. A forward product above options.maxFlops is timed at fewer rows
// (`low`, at least minRows and at most a quarter of its rows) and at twice as many, and its time at
// all its rows read off the line through the two: the time grows linearly with the rows, from
// costs that do not (the weight's casts, dW's writes), which scaling one timing would multiply too.
// gemmTimingRows gives `low`, or the product's own rows where it is timed whole.
int64_t gemmTimingRows(const GemmShape& shape, const GemmChoiceOptions& options);
// The line through (low, lowSeconds) and (2 low, highSeconds) at `rows`, never falling (timing
// noise can make the second point the faster) and never below either timing.
double extrapolateGemmSeconds(double lowSeconds, double highSeconds, int64_t low, int64_t rows);

// What model::linear uses now: LibTorch's own path until a choice is made (or FP4LAB_BF16_GEMM
// forces one).
Bf16Gemm currentBf16Gemm();
void setBf16Gemm(Bf16Gemm gemm);

// The cache's key for this machine and the shapes: the CPU (vendor, family, model, stepping, name
// and a hash of its feature flags: VMs often name Zen 3 and Zen 4 alike "AMD EPYC"), LibTorch's
// version, the thread count and the shapes.
std::string gemmCacheKey(const std::vector<GemmShape>& shapes, bool backward, int threads);
// The CPU's name and family/model, for messages ("AMD EPYC (family 25 model 1)").
std::string cpuName();

}  // namespace fp4lab::model
