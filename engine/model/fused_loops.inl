// The loops of fused_loops.h, compiled once per instruction set: each fused_loops_<isa>.cpp
// defines FUSED_ISA and includes this file with its own compiler flags (see engine/CMakeLists.txt).
// The code is written so the compiler vectorizes it (fixed 16-lane accumulators, branch-free
// selects) and must not be built with -ffast-math or FMA contraction: every variant has to do the
// same IEEE operations in the same order.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "fp4lab/io/dtype.h"
#include "model/fused_loops_table.h"

namespace fp4lab::model::fused::FUSED_ISA {
namespace {

using bf16 = uint16_t;
constexpr int kLanes = 16;

inline float load(const float* p, int64_t i) {
  return p[i];
}
inline float load(const bf16* p, int64_t i) {
  return io::bf16ToFloat(p[i]);
}

inline void store(float* p, int64_t i, float value) {
  p[i] = value;
}
inline void store(bf16* p, int64_t i, float value) {
  p[i] = io::floatToBf16(value);
}

// value rounded to T, as a float: the cast Hugging Face's RMSNorm makes before the weight.
inline float roundTo(float value, const float*) {
  return value;
}
inline float roundTo(float value, const bf16*) {
  const bf16 narrow = io::floatToBf16(value);
  return load(&narrow, 0);
}

// exp(x), within 2 ulp of the exact value where that is a normal float, branch-free so that it
// vectorizes. Outside that range the result saturates at about 1e-38 and 2e38 (NaN gives the
// low end; callers keep NaN through their other operand). The clamps act on the exponent and the
// reduced argument rather than on x, so the compiler cannot turn the saturated ends into
// constants and duplicate the caller's division for them.
inline float expClamped(float x) {
  // x = k ln2 + r with |r| <= ln2 / 2; ln2 split in two so that k * ln2hi is exact.
  float t = x * 1.44269504088896341f;
  t = t > -125.0f ? t : -125.0f;  // false for NaN
  t = t < 127.0f ? t : 127.0f;
  const float k = (t + 12582912.0f) - 12582912.0f;
  float r = x - k * 0.693359375f;
  r = r - k * -2.12194440e-4f;
  r = r > -0.36f ? r : -0.36f;
  r = r < 0.36f ? r : 0.36f;
  // Minimax polynomial for (exp(r) - 1 - r) / r^2 on [-ln2/2, ln2/2] (Cephes expf).
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float mantissa = p * (r * r) + r + 1.0f;
  const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(k) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return mantissa * scale;
}

// Sum of the 16 lanes in a fixed tree order.
inline float reduceLanes(float* acc) {
  for (int stride = kLanes / 2; stride > 0; stride /= 2) {
    for (int l = 0; l < stride; ++l) acc[l] += acc[l + stride];
  }
  return acc[0];
}

template <class X, class W, class O>
void rmsNormForwardRows(const X* x, const W* w, O* y, float* rstd, int64_t rows, int64_t dim,
                        float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const X* xr = x + r * dim;
    O* yr = y + r * dim;
    float acc[kLanes] = {};
    int64_t j = 0;
    for (; j + kLanes <= dim; j += kLanes) {
      for (int l = 0; l < kLanes; ++l) {
        const float v = load(xr, j + l);
        acc[l] += v * v;
      }
    }
    for (int l = 0; j < dim; ++j, ++l) {
      const float v = load(xr, j);
      acc[l] += v * v;
    }
    const float inv = 1.0f / std::sqrt(reduceLanes(acc) / static_cast<float>(dim) + eps);
    rstd[r] = inv;
    for (j = 0; j < dim; ++j) store(yr, j, load(w, j) * roundTo(load(xr, j) * inv, xr));
  }
}

template <bool kWeightGrad, class X, class W, class O>
void rmsNormBackwardRows(const X* x, const W* w, const float* rstd, const O* dy, X* dx,
                         float* dwSum, int64_t rows, int64_t dim) {
  for (int64_t r = 0; r < rows; ++r) {
    const X* xr = x + r * dim;
    const O* dyr = dy + r * dim;
    X* dxr = dx + r * dim;
    const float inv = rstd[r];
    // dx = inv * (g - xhat * mean(g * xhat)) with g = dy * w, xhat = x * inv.
    float acc[kLanes] = {};
    int64_t j = 0;
    for (; j + kLanes <= dim; j += kLanes) {
      for (int l = 0; l < kLanes; ++l) {
        const float g = load(dyr, j + l) * load(w, j + l);
        acc[l] += g * (load(xr, j + l) * inv);
      }
    }
    for (int l = 0; j < dim; ++j, ++l) {
      const float g = load(dyr, j) * load(w, j);
      acc[l] += g * (load(xr, j) * inv);
    }
    const float mean = reduceLanes(acc) / static_cast<float>(dim);
    for (j = 0; j < dim; ++j) {
      const float xhat = load(xr, j) * inv;
      const float g = load(dyr, j) * load(w, j);
      store(dxr, j, inv * (g - xhat * mean));
      if constexpr (kWeightGrad) dwSum[j] += load(dyr, j) * roundTo(xhat, xr);
    }
  }
}

template <class T>
void swigluForwardLoop(const T* g, const T* u, T* h, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float gate = load(g, i);
    store(h, i, gate / (1.0f + expClamped(-gate)) * load(u, i));
  }
}

template <class T>
void swigluBackwardLoop(const T* dh, const T* g, const T* u, T* dg, T* du, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float gate = load(g, i);
    const float sigmoid = 1.0f / (1.0f + expClamped(-gate));
    const float grad = load(dh, i);
    store(du, i, grad * (gate * sigmoid));
    store(dg, i, grad * load(u, i) * (sigmoid * (1.0f + gate * (1.0f - sigmoid))));
  }
}

template <class X, class Y>
void ropeForwardRows(const RopeArgs& a, const X* x, Y* y) {
  const int64_t half = a.dim / 2;
  for (int64_t r = 0; r < a.rows; ++r) {
    const int64_t position = (a.firstRow + r) % a.seqLen;
    const float* c = a.cos + position * a.dim;
    const float* s = a.sin + position * a.dim;
    for (int64_t h = 0; h < a.heads; ++h) {
      const X* xr = x + (r * a.heads + h) * a.dim;
      Y* yr = y + (r * a.heads + h) * a.dim;
      for (int64_t j = 0; j < half; ++j) {
        const float x1 = load(xr, j), x2 = load(xr, j + half);
        store(yr, j, x1 * c[j] - x2 * s[j]);
        store(yr, j + half, x2 * c[j + half] + x1 * s[j + half]);
      }
    }
  }
}

template <class X, class Y>
void ropeBackwardRows(const RopeArgs& a, const Y* dy, X* dx) {
  const int64_t half = a.dim / 2;
  for (int64_t r = 0; r < a.rows; ++r) {
    const int64_t position = (a.firstRow + r) % a.seqLen;
    const float* c = a.cos + position * a.dim;
    const float* s = a.sin + position * a.dim;
    for (int64_t h = 0; h < a.heads; ++h) {
      const Y* gr = dy + (r * a.heads + h) * a.dim;
      X* dr = dx + (r * a.heads + h) * a.dim;
      for (int64_t j = 0; j < half; ++j) {
        const float g1 = load(gr, j), g2 = load(gr, j + half);
        store(dr, j, g1 * c[j] + g2 * s[j + half]);
        store(dr, j + half, g2 * c[j + half] - g1 * s[j]);
      }
    }
  }
}

// Calls f with typed (x, y) pointers for args' type pair.
template <class F>
void withRopeTypes(const RopeArgs& a, const void* x, const void* y, F&& f) {
  const bool xf = a.xType == Type::F32, yf = a.yType == Type::F32;
  if (xf && yf) f(static_cast<const float*>(x), static_cast<const float*>(y));
  if (xf && !yf) f(static_cast<const float*>(x), static_cast<const bf16*>(y));
  if (!xf && yf) f(static_cast<const bf16*>(x), static_cast<const float*>(y));
  if (!xf && !yf) f(static_cast<const bf16*>(x), static_cast<const bf16*>(y));
}

// Calls f with typed pointers for the (x, w) type pair of args; y's type follows from them.
template <class F>
void withRmsTypes(const RmsNormArgs& args, F&& f) {
  const auto xf = static_cast<const float*>(args.x);
  const auto xb = static_cast<const bf16*>(args.x);
  const auto wf = static_cast<const float*>(args.w);
  const auto wb = static_cast<const bf16*>(args.w);
  if (args.xType == Type::F32 && args.wType == Type::F32) f(xf, wf, static_cast<float*>(nullptr));
  if (args.xType == Type::F32 && args.wType == Type::BF16) f(xf, wb, static_cast<float*>(nullptr));
  if (args.xType == Type::BF16 && args.wType == Type::F32) f(xb, wf, static_cast<float*>(nullptr));
  if (args.xType == Type::BF16 && args.wType == Type::BF16) f(xb, wb, static_cast<bf16*>(nullptr));
}

}  // namespace

void rmsNormForward(const RmsNormArgs& args, void* y, float* rstd) {
  withRmsTypes(args, [&](auto x, auto w, auto o) {
    rmsNormForwardRows(x, w, static_cast<decltype(o)>(y), rstd, args.rows, args.dim, args.eps);
  });
}

void rmsNormBackward(const RmsNormArgs& args, const float* rstd, const void* dy, void* dx,
                     float* dwSum) {
  withRmsTypes(args, [&](auto x, auto w, auto o) {
    using X = std::remove_const_t<std::remove_pointer_t<decltype(x)>>;
    using O = std::remove_pointer_t<decltype(o)>;
    const auto dyTyped = static_cast<const O*>(dy);
    const auto dxTyped = static_cast<X*>(dx);
    if (dwSum) {
      rmsNormBackwardRows<true>(x, w, rstd, dyTyped, dxTyped, dwSum, args.rows, args.dim);
    } else {
      rmsNormBackwardRows<false>(x, w, rstd, dyTyped, dxTyped, dwSum, args.rows, args.dim);
    }
  });
}

void ropeForward(const RopeArgs& args, const void* x, void* y) {
  withRopeTypes(args, x, y, [&](auto xTyped, auto yTyped) {
    using Y = std::remove_const_t<std::remove_pointer_t<decltype(yTyped)>>;
    ropeForwardRows(args, xTyped, const_cast<Y*>(yTyped));
  });
}

void ropeBackward(const RopeArgs& args, const void* dy, void* dx) {
  withRopeTypes(args, dx, dy, [&](auto dxTyped, auto dyTyped) {
    using X = std::remove_const_t<std::remove_pointer_t<decltype(dxTyped)>>;
    ropeBackwardRows(args, dyTyped, const_cast<X*>(dxTyped));
  });
}

void swigluForward(Type type, const void* g, const void* u, void* h, int64_t n) {
  if (type == Type::F32) {
    swigluForwardLoop(static_cast<const float*>(g), static_cast<const float*>(u),
                      static_cast<float*>(h), n);
  } else {
    swigluForwardLoop(static_cast<const bf16*>(g), static_cast<const bf16*>(u),
                      static_cast<bf16*>(h), n);
  }
}

void swigluBackward(Type type, const void* dh, const void* g, const void* u, void* dg, void* du,
                    int64_t n) {
  if (type == Type::F32) {
    swigluBackwardLoop(static_cast<const float*>(dh), static_cast<const float*>(g),
                       static_cast<const float*>(u), static_cast<float*>(dg),
                       static_cast<float*>(du), n);
  } else {
    swigluBackwardLoop(static_cast<const bf16*>(dh), static_cast<const bf16*>(g),
                       static_cast<const bf16*>(u), static_cast<bf16*>(dg), static_cast<bf16*>(du),
                       n);
  }
}

void attentionProbs(const float* s, const float* lse, float scale, int64_t firstRow, int64_t rows,
                    int64_t cols, float* p, uint16_t* pb) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t kept = std::min(firstRow + r + 1, cols);
    const float* sr = s + r * cols;
    float* pr = p + r * cols;
    bf16* pbr = pb + r * cols;
    const float shift = lse[r];
    for (int64_t c = 0; c < kept; ++c) {
      const float value = expClamped(sr[c] * scale - shift);
      pr[c] = value;
      store(pbr, c, value);
    }
    for (int64_t c = kept; c < cols; ++c) {
      pr[c] = 0.0f;
      pbr[c] = 0;
    }
  }
}

void attentionScoreGrad(const float* p, const float* dp, const float* delta, int64_t firstRow,
                        int64_t rows, int64_t cols, uint16_t* ds) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t kept = std::min(firstRow + r + 1, cols);
    const float* pr = p + r * cols;
    const float* dpr = dp + r * cols;
    bf16* dsr = ds + r * cols;
    const float d = delta[r];
    for (int64_t c = 0; c < kept; ++c) store(dsr, c, pr[c] * (dpr[c] - d));
    for (int64_t c = kept; c < cols; ++c) dsr[c] = 0;
  }
}

template <class T>
void klForwardRows(const T* t, const T* s, int64_t rows, int64_t cols, float invT, float* stats,
                   float* kl) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* tr = t + r * cols;
    const T* sr = s + r * cols;
    float maxT[kLanes], maxS[kLanes];
    for (int l = 0; l < kLanes; ++l) maxT[l] = maxS[l] = -INFINITY;
    int64_t j = 0;
    for (; j + kLanes <= cols; j += kLanes)
      for (int l = 0; l < kLanes; ++l) {
        maxT[l] = std::max(maxT[l], load(tr, j + l) * invT);
        maxS[l] = std::max(maxS[l], load(sr, j + l) * invT);
      }
    for (int l = 0; j < cols; ++j, ++l) {
      maxT[l] = std::max(maxT[l], load(tr, j) * invT);
      maxS[l] = std::max(maxS[l], load(sr, j) * invT);
    }
    float mt = maxT[0], ms = maxS[0];
    for (int l = 1; l < kLanes; ++l) mt = std::max(mt, maxT[l]), ms = std::max(ms, maxS[l]);
    float zt[kLanes] = {}, zs[kLanes] = {}, cross[kLanes] = {};
    j = 0;
    for (; j + kLanes <= cols; j += kLanes)
      for (int l = 0; l < kLanes; ++l) {
        const float a = load(tr, j + l) * invT - mt, b = load(sr, j + l) * invT - ms;
        const float e = expClamped(a);
        zt[l] += e;
        zs[l] += expClamped(b);
        cross[l] += e * (a - b);
      }
    for (int l = 0; j < cols; ++j, ++l) {
      const float a = load(tr, j) * invT - mt, b = load(sr, j) * invT - ms;
      const float e = expClamped(a);
      zt[l] += e;
      zs[l] += expClamped(b);
      cross[l] += e * (a - b);
    }
    const float sumT = reduceLanes(zt), sumS = reduceLanes(zs), sumCross = reduceLanes(cross);
    const float logZt = std::log(sumT), logZs = std::log(sumS);
    stats[4 * r] = mt, stats[4 * r + 1] = logZt, stats[4 * r + 2] = ms, stats[4 * r + 3] = logZs;
    kl[r] = sumCross / sumT - logZt + logZs;
  }
}

template <class T>
void klBackwardRows(const T* t, const T* s, int64_t rows, int64_t cols, float invT,
                    const float* stats, const float* scale, T* ds) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* tr = t + r * cols;
    const T* sr = s + r * cols;
    T* dr = ds + r * cols;
    const float shiftT = stats[4 * r] + stats[4 * r + 1],
                shiftS = stats[4 * r + 2] + stats[4 * r + 3];
    const float k = scale[r];
    for (int64_t j = 0; j < cols; ++j)
      store(
          dr, j,
          k * (expClamped(load(sr, j) * invT - shiftS) - expClamped(load(tr, j) * invT - shiftT)));
  }
}

void klForward(const KlArgs& args, float* stats, float* kl) {
  if (args.type == Type::F32)
    klForwardRows(static_cast<const float*>(args.t), static_cast<const float*>(args.s), args.rows,
                  args.cols, args.invT, stats, kl);
  else
    klForwardRows(static_cast<const bf16*>(args.t), static_cast<const bf16*>(args.s), args.rows,
                  args.cols, args.invT, stats, kl);
}

void klBackward(const KlArgs& args, const float* stats, const float* scale, void* ds) {
  if (args.type == Type::F32)
    klBackwardRows(static_cast<const float*>(args.t), static_cast<const float*>(args.s), args.rows,
                   args.cols, args.invT, stats, scale, static_cast<float*>(ds));
  else
    klBackwardRows(static_cast<const bf16*>(args.t), static_cast<const bf16*>(args.s), args.rows,
                   args.cols, args.invT, stats, scale, static_cast<bf16*>(ds));
}

template <typename X, typename Y>
void convertLoop(const X* x, Y* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) store(y, i, load(x, i));
}

void convert(Type from, const void* x, Type to, void* y, int64_t n) {
  if (from == to) {
    std::memcpy(y, x, size_t(n) * (from == Type::F32 ? sizeof(float) : sizeof(bf16)));
  } else if (from == Type::BF16) {
    convertLoop(static_cast<const bf16*>(x), static_cast<float*>(y), n);
  } else {
    convertLoop(static_cast<const float*>(x), static_cast<bf16*>(y), n);
  }
}

template <typename T>
void clipGradientLoop(const T* grad, const T* x, float clip, T* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = std::fabs(load(x, i)) > clip ? T(0) : grad[i];
}

void clipGradient(Type type, const void* grad, const void* x, float clip, void* out, int64_t n) {
  if (type == Type::F32)
    clipGradientLoop(static_cast<const float*>(grad), static_cast<const float*>(x), clip,
                     static_cast<float*>(out), n);
  else
    clipGradientLoop(static_cast<const bf16*>(grad), static_cast<const bf16*>(x), clip,
                     static_cast<bf16*>(out), n);
}

#define FUSED_STRING2(x) #x
#define FUSED_STRING(x) FUSED_STRING2(x)
extern const LoopTable kTable;
const LoopTable kTable{FUSED_STRING(FUSED_ISA),
                       rmsNormForward,
                       rmsNormBackward,
                       swigluForward,
                       swigluBackward,
                       ropeForward,
                       ropeBackward,
                       attentionProbs,
                       attentionScoreGrad,
                       klForward,
                       klBackward,
                       convert,
                       clipGradient};
#undef FUSED_STRING
#undef FUSED_STRING2

}  // namespace fp4lab::model::fused::FUSED_ISA
