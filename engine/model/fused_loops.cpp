// The generic (baseline x86-64 or other architecture) variant of the fused loops, and the
// run-time choice between it and the AVX2 and AVX-512 builds of the same source.
#define FUSED_ISA generic
#include "model/fused_loops.inl"

#include <cstring>
#include <stdexcept>
#include <string>

namespace fp4lab::model::fused {

#if defined(__x86_64__)
namespace avx512 {
extern const LoopTable kTable;
}
namespace avx2 {
extern const LoopTable kTable;
}
#endif

namespace {

using Table = LoopTable;
const Table& kGeneric = generic::kTable;
#if defined(__x86_64__)
const Table& kAvx2 = avx2::kTable;
const Table& kAvx512 = avx512::kTable;
#endif

bool runsHere(const Table* table) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (table == &kAvx512) {
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  }
  if (table == &kAvx2) return __builtin_cpu_supports("avx2");
#endif
  return table == &kGeneric;
}

const Table* const kTables[] = {
#if defined(__x86_64__)
    &kAvx512, &kAvx2,
#endif
    &kGeneric};  // best first

const Table* bestTable() {
  for (const Table* table : kTables) {
    if (runsHere(table)) return table;
  }
  return &kGeneric;
}

const Table*& active() {
  static const Table* table = bestTable();
  return table;
}

}  // namespace

const char* isaName() {
  return active()->name;
}

void forceIsa(const char* name) {
  if (name == nullptr) {
    active() = bestTable();
    return;
  }
  for (const Table* table : kTables) {
    if (std::strcmp(table->name, name) != 0) continue;
    // A variant this CPU cannot run is refused rather than dying on an illegal instruction.
    if (!runsHere(table)) {
      throw std::invalid_argument(std::string("fused loops: this CPU cannot run the ") + name +
                                  " variant");
    }
    active() = table;
    return;
  }
  throw std::invalid_argument(std::string("fused loops: no variant named '") + name +
                              "' (generic, avx2, avx512)");
}

void rmsNormForward(const RmsNormArgs& args, void* y, float* rstd) {
  active()->rmsNormForward(args, y, rstd);
}
void rmsNormBackward(const RmsNormArgs& args, const float* rstd, const void* dy, void* dx,
                     float* dwSum) {
  active()->rmsNormBackward(args, rstd, dy, dx, dwSum);
}
void swigluForward(Type type, const void* g, const void* u, void* h, int64_t n) {
  active()->swigluForward(type, g, u, h, n);
}
void swigluBackward(Type type, const void* dh, const void* g, const void* u, void* dg, void* du,
                    int64_t n) {
  active()->swigluBackward(type, dh, g, u, dg, du, n);
}
void ropeForward(const RopeArgs& args, const void* x, void* y) {
  active()->ropeForward(args, x, y);
}
void ropeBackward(const RopeArgs& args, const void* dy, void* dx) {
  active()->ropeBackward(args, dy, dx);
}
void attentionProbs(const float* s, const float* lse, float scale, int64_t firstRow, int64_t rows,
                    int64_t cols, float* p, uint16_t* pb) {
  active()->attentionProbs(s, lse, scale, firstRow, rows, cols, p, pb);
}
void klForward(const KlArgs& args, float* stats, float* kl) {
  active()->klForward(args, stats, kl);
}

void klBackward(const KlArgs& args, const float* stats, const float* scale, void* ds) {
  active()->klBackward(args, stats, scale, ds);
}

void attentionScoreGrad(const float* p, const float* dp, const float* delta, int64_t firstRow,
                        int64_t rows, int64_t cols, uint16_t* ds) {
  active()->attentionScoreGrad(p, dp, delta, firstRow, rows, cols, ds);
}

void convert(Type from, const void* x, Type to, void* y, int64_t n) {
  active()->convert(from, x, to, y, n);
}

void clipGradient(Type type, const void* grad, const void* x, float clip, void* out, int64_t n) {
  active()->clipGradient(type, grad, x, clip, out, n);
}

}  // namespace fp4lab::model::fused
