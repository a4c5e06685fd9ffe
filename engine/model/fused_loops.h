// Fused elementwise loops of the decoder's training step: RMSNorm and SwiGLU, forward and
// backward, each one pass over memory where LibTorch's composition takes five to ten. Plain C++
// over raw rows (no LibTorch, so the file compiles fast and once per instruction set);
// model/fused_ops.cpp wraps them as autograd functions and splits the rows over threads.
//
// Arithmetic: fp32 throughout, 16-bit values widened exactly and rounded once, to nearest even,
// when stored (NaN stays NaN). Every instruction-set variant runs the same operations in the same
// order (sums over a row use 16 fixed lanes, no FMA contraction), so the results are identical
// bit for bit whichever one the CPU picks, and independent of the thread count.
#pragma once

#include <cstdint>

namespace fp4lab::model::fused {

// The element types of the loops: IEEE fp32 and bfloat16 (its upper 16 bits).
enum class Type { F32, BF16 };

// Rows of RMSNorm: for each row r of `dim` values,
//   rstd[r] = 1 / sqrt(sum(x^2) / dim + eps)
//   y = w * round_x(x * rstd[r])        (round_x: to x's type, as Hugging Face casts back)
// y's type is fp32 if x or w is fp32, else bf16 (LibTorch's promotion of the product).
struct RmsNormArgs {
  Type xType, wType;
  const void* x;  // [rows, dim]
  const void* w;  // [dim]
  int64_t rows, dim;
  float eps;
};
void rmsNormForward(const RmsNormArgs& args, void* y, float* rstd);

// Gradients of the rows above given dy (y's type): dx (x's type) and, when dwSum is not null,
// dwSum[j] += dy[r][j] * round_x(x[r][j] * rstd[r]) summed over the rows in order (fp32).
void rmsNormBackward(const RmsNormArgs& args, const float* rstd, const void* dy, void* dx,
                     float* dwSum);

// SwiGLU over n elements of one type: h = silu(g) * u, silu(g) = g / (1 + exp(-g)).
void swigluForward(Type type, const void* g, const void* u, void* h, int64_t n);
// dg = dh * u * s * (1 + g * (1 - s)) with s = sigmoid(g), du = dh * silu(g).
void swigluBackward(Type type, const void* dh, const void* g, const void* u, void* dg, void* du,
                    int64_t n);

// Rotary position embedding in Hugging Face's rotate_half form, over `rows` = batch * seqLen rows
// of `heads` heads of `dim` values (x is [batch, seqLen, heads, dim], contiguous), with cos and
// sin [seqLen, dim] in fp32. For j < dim / 2, x1 = x[j], x2 = x[j + dim / 2]:
//   y[j] = x1 * cos[j] - x2 * sin[j],   y[j + dim/2] = x2 * cos[j + dim/2] + x1 * sin[j + dim/2]
// each product and the sum rounded to fp32 as LibTorch's x * cos + rotate_half(x) * sin does, then
// stored in y's type. `firstRow` is the index of rows[0] (its position is firstRow % seqLen).
struct RopeArgs {
  Type xType, yType;
  const float* cos;
  const float* sin;
  int64_t firstRow, rows, seqLen, heads, dim;
};
void ropeForward(const RopeArgs& args, const void* x, void* y);
// dx (x's type) from dy (y's type): the transposed rotation, products and sum in fp32.
void ropeBackward(const RopeArgs& args, const void* dy, void* dx);

// Causal attention's backward, on one head's T x T score matrices (row-major, `cols` = T values a
// row, rows [firstRow, firstRow + rows) of it): query row i attends to keys 0..i.
//   p[i][c] = exp(s[i][c] * scale - lse[i]) for c <= i, 0 beyond; written in fp32 to p (which
//             may be s itself) and rounded to bf16 to pb.
// `lse` is the forward's log-sum-exp of each row of scaled scores; s, p, pb and lse start at row
// firstRow.
void attentionProbs(const float* s, const float* lse, float scale, int64_t firstRow, int64_t rows,
                    int64_t cols, float* p, uint16_t* pb);
//   ds[i][c] = p[i][c] * (dp[i][c] - delta[i]) for c <= i, 0 beyond, rounded to bf16.
// (delta[i] = sum_d dO[i][d] * O[i][d], the softmax backward's row term.)
void attentionScoreGrad(const float* p, const float* dp, const float* delta, int64_t firstRow,
                        int64_t rows, int64_t cols, uint16_t* ds);

// Distillation's KL(p || q) per row, of teacher logits t and student logits s ([rows, cols], one
// type), at inverse temperature invT: with a = t invT - max(t invT), b = s invT - max(s invT),
// Zt = sum exp(a), Zs = sum exp(b),
//   kl[r] = sum(exp(a) (a - b)) / Zt - log Zt + log Zs        (= sum p (log p - log q))
// and stats[4 r ..] = {max(t invT), log Zt, max(s invT), log Zs} for the backward. Two passes over
// each row; sums over 16 fixed lanes.
struct KlArgs {
  Type type;
  const void* t;
  const void* s;
  int64_t rows, cols;
  float invT;
};
void klForward(const KlArgs& args, float* stats, float* kl);
// ds[r][c] = scale[r] * (q - p) with q = exp(s invT - stats[2] - stats[3]) and
// p = exp(t invT - stats[0] - stats[1]); ds in args.type.
void klBackward(const KlArgs& args, const float* stats, const float* scale, void* ds);

// y = x in y's type, n elements: bf16 widened exactly, fp32 rounded to bf16 (nearest even, NaN
// stays NaN), the same type copied.
void convert(Type from, const void* x, Type to, void* y, int64_t n);
// The clipped straight-through gradient, n elements of one type: out = grad where |x| <= clip,
// 0 where |x| > clip (a NaN in x passes grad on).
void clipGradient(Type type, const void* grad, const void* x, float clip, void* out, int64_t n);
// Which variant runs ("avx512", "avx2" or "generic"), and a switch for tests that compare them
// (nullptr restores the automatic choice). Not thread-safe: set it before running anything.
const char* isaName();
void forceIsa(const char* name);

}  // namespace fp4lab::model::fused
