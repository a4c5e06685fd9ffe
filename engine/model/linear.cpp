// The engine's linear product under BF16 (see linear() in fused_ops.h).
//
// On some CPUs LibTorch's BF16 matrix products (oneDNN, and MKL's bf16 x bf16 -> fp32 GEMM) run at
// about half the speed of its fp32 GEMM: measured on a 2-core Xeon with AVX-512 BF16 and no AMX,
// 150-165 GFLOPS against 305 (tests/bench/bench_fused_ops, "linear"); on others (AMX, or an AMD
// Zen 4 with AVX-512 BF16) they are the faster ones. The product of two BF16 values is exact in
// fp32, so an fp32 GEMM of the BF16-rounded operands computes what the BF16 GEMM computes (fp32
// accumulation of the same exact products), in another summation order; the result is rounded to
// BF16 as autocast's would be. Which of the two runs is measured per machine (gemm_choice.h).
#include <ATen/autocast_mode.h>

#include "model/fused_ops.h"
#include "model/gemm_choice.h"

#include <optional>

namespace fp4lab::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

torch::Tensor roundedToBf16(const torch::Tensor& t) {
  return t.scalar_type() == torch::kBFloat16 ? t.to(torch::kFloat)
                                             : t.to(torch::kBFloat16).to(torch::kFloat);
}

// y = bf16(x) bf16(w)^T (+ bf16(b)), computed in fp32, stored in BF16. Gradients as autocast's
// BF16 linear gives them: BF16-rounded, then in the inputs' own types.
torch::Tensor forwardProduct(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w,
                             const torch::Tensor* b) {
  const torch::Tensor x16 = x.to(torch::kBFloat16);
  const auto shape = x.sizes().vec();
  const torch::Tensor x2 = x16.to(torch::kFloat).reshape({-1, shape.back()});
  const torch::Tensor wt = roundedToBf16(w).t();
  const torch::Tensor y = b ? torch::addmm(roundedToBf16(*b), x2, wt) : torch::mm(x2, wt);
  ctx->save_for_backward({x16, w});
  ctx->saved_data["x_type"] = static_cast<int64_t>(x.scalar_type());
  auto outShape = shape;
  outShape.back() = w.size(0);
  return y.to(torch::kBFloat16).view(outShape);
}

// dx, dw and (with a bias of type `biasType`) db.
variable_list backwardProduct(AutogradContext* ctx, const torch::Tensor& grad,
                              std::optional<torch::ScalarType> biasType) {
  const variable_list saved = ctx->get_saved_variables();
  const torch::Tensor& x16 = saved[0];
  const torch::Tensor& w = saved[1];
  const auto xType = static_cast<torch::ScalarType>(ctx->saved_data["x_type"].toInt());
  const int64_t in = x16.size(-1), out = w.size(0);
  const torch::Tensor g = grad.reshape({-1, out}).to(torch::kBFloat16).to(torch::kFloat);
  const torch::Tensor x2 = x16.reshape({-1, in}).to(torch::kFloat);
  variable_list grads = {
      torch::mm(g, roundedToBf16(w)).to(torch::kBFloat16).to(xType).view(x16.sizes()),
      torch::mm(g.t(), x2).to(torch::kBFloat16).to(w.scalar_type())};
  if (biasType) grads.push_back(g.sum(0).to(torch::kBFloat16).to(*biasType));
  return grads;
}

class Bf16LinearFunction : public torch::autograd::Function<Bf16LinearFunction> {
 public:
  // (Autocast is excluded around apply(): these products are fp32 on purpose.)
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& w) {
    return forwardProduct(ctx, x, w, nullptr);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return backwardProduct(ctx, grads[0], std::nullopt);
  }
};

class Bf16LinearBiasFunction : public torch::autograd::Function<Bf16LinearBiasFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w,
                               const torch::Tensor& b) {
    ctx->saved_data["b_type"] = static_cast<int64_t>(b.scalar_type());
    return forwardProduct(ctx, x, w, &b);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return backwardProduct(ctx, grads[0],
                           static_cast<torch::ScalarType>(ctx->saved_data["b_type"].toInt()));
  }
};

}  // namespace

torch::Tensor bf16LinearViaFp32(const torch::Tensor& x, const torch::Tensor& w,
                                const torch::Tensor& b) {
  c10::impl::ExcludeDispatchKeyGuard noAutocast(c10::DispatchKey::AutocastCPU);
  return b.defined() ? Bf16LinearBiasFunction::apply(x, w, b) : Bf16LinearFunction::apply(x, w);
}

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  const bool cpu = x.device().is_cpu() && w.device().is_cpu() && x.layout() == torch::kStrided &&
                   w.layout() == torch::kStrided && w.dim() == 2 && x.dim() >= 1 &&
                   x.size(-1) == w.size(1) && x.numel() > 0;
  const auto floating = [](const torch::Tensor& t) {
    return t.scalar_type() == torch::kFloat || t.scalar_type() == torch::kBFloat16;
  };
  // BF16 numerics: autocast to BF16 on, or both operands BF16 (a frozen BF16 teacher).
  const bool autocastBf16 = at::autocast::is_autocast_enabled(c10::DeviceType::CPU) &&
                            at::autocast::get_autocast_dtype(c10::DeviceType::CPU) == at::kBFloat16;
  const bool bf16 =
      autocastBf16 || (x.scalar_type() == torch::kBFloat16 && w.scalar_type() == torch::kBFloat16);
  if (!cpu || !bf16 || !floating(x) || !floating(w) || (b.defined() && !floating(b)) ||
      currentBf16Gemm() != Bf16Gemm::Fp32)
    return torch::linear(x, w, b);
  return bf16LinearViaFp32(x, w, b);
}

}  // namespace fp4lab::model
