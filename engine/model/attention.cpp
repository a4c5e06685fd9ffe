// Causal self-attention with fp4lab's own backward on CPU (see attention() in fused_ops.h).
//
// LibTorch's CPU flash-attention backward runs its matrix products at a fraction of what the CPU's
// BF16 units do: on the built-in model's shapes (T = 256, head dim 64) it took about six times its
// own forward, a fifth of the whole training step. This backward recomputes the probabilities
// from the forward's log-sum-exp, as flash attention does, but with whole query blocks per matrix
// product, through MKL's bf16 x bf16 -> fp32 GEMM (which the torch wheel carries and exports),
// and the elementwise parts in the fused loops.
#include <ATen/Parallel.h>
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "fp4lab/io/dtype.h"
#include "model/fused_loops.h"
#include "model/fused_ops.h"

namespace fp4lab::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Query rows per block of the backward: a block's matrix products cover only the keys its rows
// can see (0 .. last row), which skips most of the masked half of each head's score matrix.
constexpr int64_t kQueryBlock = 64;

// MKL's cblas_gemm_bf16bf16f32 (LP64: 32-bit integers), row-major:
// C = alpha * op(A) * op(B) + beta * C, A and B bf16 (as their 16 bits), C fp32.
using GemmBf16 = void (*)(int layout, int transA, int transB, int m, int n, int k, float alpha,
                          const uint16_t* a, int lda, const uint16_t* b, int ldb, float beta,
                          float* c, int ldc);
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;

// Looked up in LibTorch's own CPU library (already loaded; RTLD_NOLOAD finds it by its soname),
// so that no other BLAS that happens to be loaded, with other integer sizes, can answer.
GemmBf16 findGemmBf16() {
  void* torchCpu = dlopen("libtorch_cpu.so", RTLD_LAZY | RTLD_NOLOAD);
  if (torchCpu == nullptr) return nullptr;
  auto* gemm = reinterpret_cast<GemmBf16>(dlsym(torchCpu, "cblas_gemm_bf16bf16f32"));
  dlclose(torchCpu);  // drops only the reference dlopen added
  return gemm;
}

GemmBf16 gemmBf16() {
  static const GemmBf16 gemm = findGemmBf16();
  return gemm;
}

// One head's [T, D] matrix inside a [B, heads, T, D] tensor whose last dimension is contiguous.
struct HeadView {
  const uint16_t* data;
  int64_t rowStride;
};

HeadView head(const torch::Tensor& t, int64_t b, int64_t h) {
  const auto* base = static_cast<const uint16_t*>(t.data_ptr());
  return {base + b * t.stride(0) + h * t.stride(1), t.stride(2)};
}

uint16_t* mutableRow(const torch::Tensor& t, int64_t b, int64_t h, int64_t row) {
  return static_cast<uint16_t*>(t.data_ptr()) + b * t.stride(0) + h * t.stride(1) +
         row * t.stride(2);
}

// The tensor itself when its last dimension is contiguous (the model's transposed [B, T, H, D]
// views are), else a contiguous copy.
torch::Tensor rowsContiguous(const torch::Tensor& t) {
  return t.stride(3) == 1 ? t : t.contiguous();
}

class CausalAttentionFunction : public torch::autograd::Function<CausalAttentionFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v) {
    // The same kernel scaled_dot_product_attention runs for these inputs, and its log-sum-exp.
    auto [out, lse] = at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, true);
    ctx->save_for_backward({q, k, v, out, lse});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor q = rowsContiguous(saved[0]), k = rowsContiguous(saved[1]),
                        v = rowsContiguous(saved[2]), out = rowsContiguous(saved[3]);
    const torch::Tensor lse = saved[4].contiguous();
    const torch::Tensor dOut = rowsContiguous(grads[0].to(torch::kBFloat16));
    const int64_t batch = q.size(0), heads = q.size(1), length = q.size(2), dim = q.size(3);
    const int64_t kvHeads = k.size(1), group = heads / kvHeads;
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim)));
    // Gradients in the inputs' layouts, so that the views around attention stay free.
    torch::Tensor dq = torch::empty_like(q), dk = torch::empty_like(k), dv = torch::empty_like(v);
    const GemmBf16 gemm = gemmBf16();
    const auto n32 = [](int64_t value) { return static_cast<int>(value); };

    // One task per (batch, key-value head): it owns dk and dv of that head, summed over the query
    // heads of its group, so tasks never write the same memory and the sums do not depend on the
    // thread count.
    at::parallel_for(0, batch * kvHeads, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> probs(length * length), dProbs(length * length);
      std::vector<uint16_t> probs16(length * length), dScores16(length * length);
      std::vector<float> dqBlock(kQueryBlock * dim), dkSum(length * dim), dvSum(length * dim);
      std::vector<float> delta(length);
      for (int64_t task = begin; task < end; ++task) {
        const int64_t b = task / kvHeads, j = task % kvHeads;
        const HeadView kj = head(k, b, j), vj = head(v, b, j);
        std::fill(dkSum.begin(), dkSum.end(), 0.0f);
        std::fill(dvSum.begin(), dvSum.end(), 0.0f);
        for (int64_t h = j * group; h < (j + 1) * group; ++h) {
          const HeadView qh = head(q, b, h), oh = head(out, b, h), doh = head(dOut, b, h);
          const float* lseRow = lse.data_ptr<float>() + (b * heads + h) * length;
          for (int64_t i = 0; i < length; ++i) {
            float sum = 0.0f;
            for (int64_t d = 0; d < dim; ++d) {
              sum += io::bf16ToFloat(doh.data[i * doh.rowStride + d]) *
                     io::bf16ToFloat(oh.data[i * oh.rowStride + d]);
            }
            delta[i] = sum;
          }
          for (int64_t r0 = 0; r0 < length; r0 += kQueryBlock) {
            // Query rows [r0, r1) see keys [0, r1): an m x n block, row stride n.
            const int64_t r1 = std::min(length, r0 + kQueryBlock), m = r1 - r0, n = r1;
            const uint16_t* qRows = qh.data + r0 * qh.rowStride;
            const uint16_t* doRows = doh.data + r0 * doh.rowStride;
            // S = Q K^T, then P = exp(S * scale - lse) (P overwrites S).
            gemm(kRowMajor, kNoTrans, kTrans, n32(m), n32(n), n32(dim), 1.0f, qRows,
                 n32(qh.rowStride), kj.data, n32(kj.rowStride), 0.0f, probs.data(), n32(n));
            fused::attentionProbs(probs.data(), lseRow + r0, scale, r0, m, n, probs.data(),
                                  probs16.data());
            // dV += P^T dO;  dP = dO V^T;  dS = P * (dP - delta).
            gemm(kRowMajor, kTrans, kNoTrans, n32(n), n32(dim), n32(m), 1.0f, probs16.data(),
                 n32(n), doRows, n32(doh.rowStride), 1.0f, dvSum.data(), n32(dim));
            gemm(kRowMajor, kNoTrans, kTrans, n32(m), n32(n), n32(dim), 1.0f, doRows,
                 n32(doh.rowStride), vj.data, n32(vj.rowStride), 0.0f, dProbs.data(), n32(n));
            fused::attentionScoreGrad(probs.data(), dProbs.data(), delta.data() + r0, r0, m, n,
                                      dScores16.data());
            // dQ = scale * dS K (complete for these rows);  dK += scale * dS^T Q.
            gemm(kRowMajor, kNoTrans, kNoTrans, n32(m), n32(dim), n32(n), scale, dScores16.data(),
                 n32(n), kj.data, n32(kj.rowStride), 0.0f, dqBlock.data(), n32(dim));
            gemm(kRowMajor, kTrans, kNoTrans, n32(n), n32(dim), n32(m), scale, dScores16.data(),
                 n32(n), qRows, n32(qh.rowStride), 1.0f, dkSum.data(), n32(dim));
            for (int64_t i = 0; i < m; ++i) {
              uint16_t* row = mutableRow(dq, b, h, r0 + i);
              for (int64_t d = 0; d < dim; ++d) row[d] = io::floatToBf16(dqBlock[i * dim + d]);
            }
          }
        }
        for (int64_t i = 0; i < length; ++i) {
          uint16_t* dkRow = mutableRow(dk, b, j, i);
          uint16_t* dvRow = mutableRow(dv, b, j, i);
          for (int64_t d = 0; d < dim; ++d) {
            dkRow[d] = io::floatToBf16(dkSum[i * dim + d]);
            dvRow[d] = io::floatToBf16(dvSum[i * dim + d]);
          }
        }
      }
    });
    return {dq, dk, dv};
  }
};

bool ownBackwardApplies(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const std::optional<torch::Tensor>& mask, bool causal) {
  const auto cpuBf16 = [](const torch::Tensor& t) {
    return t.device().is_cpu() && t.layout() == torch::kStrided &&
           t.scalar_type() == torch::kBFloat16 && t.dim() == 4 && t.numel() > 0;
  };
  if (!causal || (mask && mask->defined()) || !ownAttentionBackward()) return false;
  if (!cpuBf16(q) || !cpuBf16(k) || !cpuBf16(v)) return false;
  if (!torch::GradMode::is_enabled() ||
      !(q.requires_grad() || k.requires_grad() || v.requires_grad())) {
    return false;  // nothing to differentiate: LibTorch's forward alone
  }
  const int64_t batch = q.size(0), heads = q.size(1), length = q.size(2), dim = q.size(3);
  const auto kvShape = [&](const torch::Tensor& t) {
    return t.size(0) == batch && t.size(2) == length && t.size(3) == dim && t.size(1) > 0 &&
           heads % t.size(1) == 0;
  };
  return kvShape(k) && kvShape(v) && k.size(1) == v.size(1);
}

}  // namespace

bool ownAttentionBackward() {
  return gemmBf16() != nullptr;
}

torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const std::optional<torch::Tensor>& mask, bool causal) {
  if (ownBackwardApplies(q, k, v, mask, causal)) return CausalAttentionFunction::apply(q, k, v);
  return torch::scaled_dot_product_attention(q, k, v, mask, /*dropout_p=*/0.0, causal,
                                             /*scale=*/std::nullopt,
                                             /*enable_gqa=*/q.size(1) != k.size(1));
}

}  // namespace fp4lab::model
