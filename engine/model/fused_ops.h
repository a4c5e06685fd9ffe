// RMSNorm and SwiGLU as single autograd operations: on CPU, fp32 and bf16 tensors go through the
// fused loops of fused_loops.h (one pass forward, one backward, bit-identical at any thread
// count); other devices and types compute the same formulas as a composition of LibTorch ops.
#pragma once

#include <torch/torch.h>

namespace fp4lab::model {

// Hugging Face's LlamaRMSNorm: weight * (x * rsqrt(mean(x^2) + eps)).to(x.dtype), the
// normalization computed in fp32 for 16-bit x, over the last dimension.
torch::Tensor rmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

// The SwiGLU product silu(gate) * up, of two tensors of one shape and type.
torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up);

// Hugging Face's rotary embedding, x * cos + rotate_half(x) * sin, of x [batch, seq, heads, dim]
// with cos and sin [seq, dim], returned as [batch, seq, heads, dim] in `outType`. The products and
// the sum are computed in promote(x, cos) as LibTorch would, then stored in outType: attention
// passes its autocast type, which is what scaled_dot_product_attention would cast the result to.
torch::Tensor rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                     torch::ScalarType outType);

// Scaled dot-product attention of q [B, H, T, D] over k, v [B, KV, S, D] (grouped-query when KV
// divides H), as torch::scaled_dot_product_attention(q, k, v, mask, 0, causal, default scale,
// enable_gqa = KV < H). The forward is always LibTorch's. Causal self-attention on CPU in bf16
// (no mask, T == S), with gradients wanted, gets fp4lab's own backward (model/attention.cpp):
// the flash-attention formulas from the forward's log-sum-exp, products in fp32 from bf16
// operands, gradients rounded to bf16 once; independent of the thread count. Anything else uses
// LibTorch's.
torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const std::optional<torch::Tensor>& mask, bool causal);
// Whether that backward is available: it needs MKL's bf16 x bf16 -> fp32 GEMM, which the x86-64
// torch wheels export; without it attention() always uses LibTorch's backward.
bool ownAttentionBackward();

// The engine's linear layer, x w^T + b, as torch::linear computes it, except with BF16 numerics on
// a CPU (autocast to BF16 on, or x and w both BF16) where the fp32 GEMM was measured faster than
// LibTorch's BF16 GEMM (model/gemm_choice.h): there the BF16-rounded operands are multiplied by the
// fp32 GEMM (their products are exact in fp32, accumulated in fp32 as the BF16 GEMM does, in
// another order) and the result is rounded to BF16; the gradients are BF16-rounded as autocast's,
// then in the inputs' types. model/linear.cpp.
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b);
// That path itself, on any machine (CPU tensors, floating point; tested against torch::linear
// under BF16 autocast).
torch::Tensor bf16LinearViaFp32(const torch::Tensor& x, const torch::Tensor& w,
                                const torch::Tensor& b);

// Distillation's loss: mean over the rows whose target is not -100 of KL(softmax(t / T) ||
// softmax(s / T)), computed in fp32 (a scalar), with the gradient to the student's logits only.
// On CPU for fp32 or bf16 logits of one type, the fused loops: two passes over each row forward
// and one back, where the composition copies the rows out, takes two log-softmaxes, an exp and a
// product over [rows, vocabulary] in fp32.
torch::Tensor distillationKl(const torch::Tensor& teacherLogits, const torch::Tensor& studentLogits,
                             const torch::Tensor& targets, double temperature);
torch::Tensor distillationKlComposed(const torch::Tensor& teacherLogits,
                                     const torch::Tensor& studentLogits,
                                     const torch::Tensor& targets, double temperature);

// How many threads at::parallel_for runs a two-task loop on in the engine's own code, at LibTorch's
// current thread count: 1 when the engine was built without OpenMP (the pragma inside
// at::parallel_for is then ignored and every fused loop runs serially). A test guards the build.
int parallelForThreads();

// The compositions of LibTorch ops that rmsNorm and swiglu fall back to (and are tested against).
torch::Tensor rmsNormComposed(const torch::Tensor& x, const torch::Tensor& weight, double eps);
torch::Tensor swigluComposed(const torch::Tensor& gate, const torch::Tensor& up);
torch::Tensor rotaryComposed(const torch::Tensor& x, const torch::Tensor& cos,
                             const torch::Tensor& sin, torch::ScalarType outType);

}  // namespace fp4lab::model
