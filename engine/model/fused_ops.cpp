#include "model/fused_ops.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <optional>

#include "model/fused_loops.h"
#include "model/layers.h"

namespace fp4lab::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Rows per task, and per partial sum of the weight gradient: fixed, so that the sums do not
// depend on the number of threads.
constexpr int64_t kRowsPerBlock = 64;
// Elements per task of the elementwise SwiGLU loops.
constexpr int64_t kSwigluGrain = 16384;

std::optional<fused::Type> loopType(const torch::Tensor& t) {
  if (!t.device().is_cpu() || t.layout() != torch::kStrided) return std::nullopt;
  if (t.scalar_type() == torch::kFloat) return fused::Type::F32;
  if (t.scalar_type() == torch::kBFloat16) return fused::Type::BF16;
  return std::nullopt;
}

char* bytes(const torch::Tensor& t) {
  return static_cast<char*>(t.data_ptr());
}

class RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, double eps) {
    const torch::Tensor input = x.contiguous();
    const torch::Tensor w = weight.contiguous();
    const fused::RmsNormArgs args = argsFor(input, w, eps);
    const torch::ScalarType outType = outputType(args);
    torch::Tensor y = torch::empty(input.sizes(), input.options().dtype(outType));
    torch::Tensor rstd = torch::empty({args.rows}, input.options().dtype(torch::kFloat));
    const int64_t xRow = args.dim * input.element_size(), yRow = args.dim * y.element_size();
    at::parallel_for(0, args.rows, kRowsPerBlock, [&](int64_t begin, int64_t end) {
      fused::RmsNormArgs part = args;
      part.x = bytes(input) + begin * xRow;
      part.rows = end - begin;
      fused::rmsNormForward(part, bytes(y) + begin * yRow, rstd.data_ptr<float>() + begin);
    });
    ctx->save_for_backward({input, w, rstd});
    ctx->saved_data["eps"] = eps;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &input = saved[0], &w = saved[1], &rstd = saved[2];
    const fused::RmsNormArgs args = argsFor(input, w, ctx->saved_data["eps"].toDouble());
    const torch::ScalarType outType = outputType(args);
    const torch::Tensor dy = grads[0].to(outType).contiguous();
    torch::Tensor dx = torch::empty_like(input);
    const bool weightGrad = ctx->needs_input_grad(1);
    const int64_t blocks = (args.rows + kRowsPerBlock - 1) / kRowsPerBlock;
    torch::Tensor partial;
    if (weightGrad) partial = torch::zeros({blocks, args.dim}, rstd.options());
    const int64_t xRow = args.dim * input.element_size(), yRow = args.dim * dy.element_size();
    at::parallel_for(0, blocks, 1, [&](int64_t blockBegin, int64_t blockEnd) {
      for (int64_t block = blockBegin; block < blockEnd; ++block) {
        const int64_t begin = block * kRowsPerBlock;
        fused::RmsNormArgs part = args;
        part.x = bytes(input) + begin * xRow;
        part.rows = std::min(kRowsPerBlock, args.rows - begin);
        fused::rmsNormBackward(part, rstd.data_ptr<float>() + begin, bytes(dy) + begin * yRow,
                               bytes(dx) + begin * xRow,
                               weightGrad ? partial.data_ptr<float>() + block * args.dim : nullptr);
      }
    });
    torch::Tensor dw;
    if (weightGrad) {
      // The blocks' partial sums added in block order.
      dw = torch::zeros({args.dim}, rstd.options());
      float* total = dw.data_ptr<float>();
      const float* parts = partial.data_ptr<float>();
      for (int64_t block = 0; block < blocks; ++block) {
        for (int64_t j = 0; j < args.dim; ++j) total[j] += parts[block * args.dim + j];
      }
      dw = dw.to(w.scalar_type());
    }
    return {dx, dw, torch::Tensor()};
  }

 private:
  // LibTorch's promotion of weight * normalized: fp32 if either is.
  static torch::ScalarType outputType(const fused::RmsNormArgs& args) {
    const bool wide = args.xType == fused::Type::F32 || args.wType == fused::Type::F32;
    return wide ? torch::kFloat : torch::kBFloat16;
  }

  static fused::RmsNormArgs argsFor(const torch::Tensor& x, const torch::Tensor& w, double eps) {
    fused::RmsNormArgs args{};
    args.xType = *loopType(x);
    args.wType = *loopType(w);
    args.x = x.data_ptr();
    args.w = w.data_ptr();
    args.dim = x.size(-1);
    args.rows = x.numel() / args.dim;
    args.eps = static_cast<float>(eps);
    return args;
  }
};

class SwigluFunction : public torch::autograd::Function<SwigluFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& gate,
                               const torch::Tensor& up) {
    const torch::Tensor g = gate.contiguous(), u = up.contiguous();
    torch::Tensor h = torch::empty_like(g);
    const fused::Type type = *loopType(g);
    const int64_t size = g.element_size();
    at::parallel_for(0, g.numel(), kSwigluGrain, [&](int64_t begin, int64_t end) {
      fused::swigluForward(type, bytes(g) + begin * size, bytes(u) + begin * size,
                           bytes(h) + begin * size, end - begin);
    });
    ctx->save_for_backward({g, u});
    return h;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &g = saved[0], &u = saved[1];
    const torch::Tensor dh = grads[0].to(g.scalar_type()).contiguous();
    torch::Tensor dg = torch::empty_like(g), du = torch::empty_like(u);
    const fused::Type type = *loopType(g);
    const int64_t size = g.element_size();
    at::parallel_for(0, g.numel(), kSwigluGrain, [&](int64_t begin, int64_t end) {
      const int64_t offset = begin * size;
      fused::swigluBackward(type, bytes(dh) + offset, bytes(g) + offset, bytes(u) + offset,
                            bytes(dg) + offset, bytes(du) + offset, end - begin);
    });
    return {dg, du};
  }
};

class RotaryFunction : public torch::autograd::Function<RotaryFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& cos, const torch::Tensor& sin,
                               torch::ScalarType outType) {
    const torch::Tensor input = x.contiguous();
    const torch::Tensor c = cos.contiguous(), s = sin.contiguous();
    torch::Tensor y = torch::empty(input.sizes(), input.options().dtype(outType));
    const fused::RopeArgs args = argsFor(input, c, s, outType);
    forRowChunks(args, input, y, fused::ropeForward);
    ctx->save_for_backward({c, s});
    ctx->saved_data["x_type"] = static_cast<int64_t>(input.scalar_type());
    ctx->saved_data["x_sizes"] = input.sizes().vec();
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const auto xType = static_cast<torch::ScalarType>(ctx->saved_data["x_type"].toInt());
    const std::vector<int64_t> sizes = ctx->saved_data["x_sizes"].toIntVector();
    const torch::Tensor dy = grads[0].contiguous();
    torch::Tensor dx = torch::empty(sizes, dy.options().dtype(xType));
    const fused::RopeArgs args = argsFor(dx, saved[0], saved[1], dy.scalar_type());
    forRowChunks(args, dy, dx, fused::ropeBackward);
    return {dx, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }

 private:
  // Runs `loop` (ropeForward or ropeBackward) from `src` to `dst`, both [rows, heads, dim] of
  // their own types, over chunks of rows on LibTorch's threads.
  template <class Loop>
  static void forRowChunks(const fused::RopeArgs& args, const torch::Tensor& src,
                           const torch::Tensor& dst, Loop loop) {
    const int64_t srcRow = args.heads * args.dim * src.element_size();
    const int64_t dstRow = args.heads * args.dim * dst.element_size();
    at::parallel_for(0, args.rows, kRowsPerBlock, [&](int64_t begin, int64_t end) {
      fused::RopeArgs part = args;
      part.firstRow = begin;
      part.rows = end - begin;
      loop(part, bytes(src) + begin * srcRow, bytes(dst) + begin * dstRow);
    });
  }

  static fused::RopeArgs argsFor(const torch::Tensor& x, const torch::Tensor& cos,
                                 const torch::Tensor& sin, torch::ScalarType yType) {
    fused::RopeArgs args{};
    args.xType = *loopType(x);
    args.yType = yType == torch::kFloat ? fused::Type::F32 : fused::Type::BF16;
    args.cos = cos.data_ptr<float>();
    args.sin = sin.data_ptr<float>();
    args.seqLen = x.size(1);
    args.rows = x.size(0) * x.size(1);
    args.heads = x.size(2);
    args.dim = x.size(3);
    return args;
  }
};

// Distillation's KL over the rows `rowIndex` lists (int64) of t and s [N, V], one type, in fp32:
// the fused loops, one row per call, rows split over threads.
// For each listed row (in parallel): `visit(i, args)` with args.t and args.s at row rows[i] of t
// and s ([N, V], one type); `offset` is that row's element offset.
template <class Visit>
void forEachKlRow(const torch::Tensor& t, const torch::Tensor& s, const torch::Tensor& rowIndex,
                  double invT, const Visit& visit) {
  const int64_t cols = s.size(1), n = rowIndex.numel();
  const int64_t* rows = rowIndex.data_ptr<int64_t>();
  const fused::KlArgs args{*loopType(s), nullptr, nullptr, 1, cols, static_cast<float>(invT)};
  at::parallel_for(0, n, 8, [&](int64_t begin, int64_t end) {
    fused::KlArgs a = args;
    for (int64_t i = begin; i < end; ++i) {
      const int64_t offset = rows[i] * cols * static_cast<int64_t>(s.element_size());
      a.t = bytes(t) + offset;
      a.s = bytes(s) + offset;
      visit(i, a, offset);
    }
  });
}

class DistillationKlFunction : public torch::autograd::Function<DistillationKlFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& t, const torch::Tensor& s,
                               const torch::Tensor& rowIndex, double invT) {
    const int64_t n = rowIndex.numel();
    torch::Tensor stats = torch::empty({n, 4}, torch::kFloat),
                  kl = torch::empty({n}, torch::kFloat);
    forEachKlRow(t, s, rowIndex, invT, [&](int64_t i, const fused::KlArgs& a, int64_t) {
      fused::klForward(a, stats.data_ptr<float>() + 4 * i, kl.data_ptr<float>() + i);
    });
    ctx->save_for_backward({t, s, rowIndex, stats});
    ctx->saved_data["inv_t"] = invT;
    // The mean in fp64, then fp32, so the order of the rows' sum does not depend on threads.
    return kl.to(torch::kDouble).mean().to(torch::kFloat);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &t = saved[0], &s = saved[1], &rowIndex = saved[2], &stats = saved[3];
    const double invT = ctx->saved_data["inv_t"].toDouble();
    torch::Tensor ds = torch::zeros_like(s);
    const float k =
        static_cast<float>(grads[0].item<double>() * invT / static_cast<double>(rowIndex.numel()));
    forEachKlRow(t, s, rowIndex, invT, [&](int64_t i, const fused::KlArgs& a, int64_t offset) {
      fused::klBackward(a, stats.data_ptr<float>() + 4 * i, &k, bytes(ds) + offset);
    });
    return {torch::Tensor(), ds, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

int parallelForThreads() {
  std::atomic<uint32_t> seen{0};
  at::parallel_for(
      0, 2, 1, [&](int64_t, int64_t) { seen.fetch_or(1u << std::min(at::get_thread_num(), 31)); });
  return __builtin_popcount(seen.load());
}

torch::Tensor rmsNormComposed(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  const torch::Tensor wide = x.to(accumulationType(x.scalar_type()));
  const torch::Tensor variance = wide.pow(2).mean(-1, /*keepdim=*/true);
  return weight * (wide * torch::rsqrt(variance + eps)).to(x.scalar_type());
}

torch::Tensor swigluComposed(const torch::Tensor& gate, const torch::Tensor& up) {
  return torch::silu(gate) * up;
}

torch::Tensor rotaryComposed(const torch::Tensor& x, const torch::Tensor& cos,
                             const torch::Tensor& sin, torch::ScalarType outType) {
  const int64_t half = x.size(-1) / 2;
  const torch::Tensor rotated = torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  // cos and sin [seq, dim] broadcast over [batch, seq, heads, dim].
  return (x * cos.unsqueeze(1) + rotated * sin.unsqueeze(1)).to(outType);
}

torch::Tensor rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                     torch::ScalarType outType) {
  const auto isFloat = [&](const torch::Tensor& t) {
    return t.device() == x.device() && t.scalar_type() == torch::kFloat && t.dim() == 2 &&
           t.size(0) == x.size(1) && t.size(1) == x.size(3);
  };
  const bool fusable = loopType(x) && x.dim() == 4 && x.size(3) % 2 == 0 && x.numel() > 0 &&
                       isFloat(cos) && isFloat(sin) &&
                       (outType == torch::kFloat || outType == torch::kBFloat16);
  return fusable ? RotaryFunction::apply(x, cos, sin, outType)
                 : rotaryComposed(x, cos, sin, outType);
}

torch::Tensor distillationKlComposed(const torch::Tensor& teacherLogits,
                                     const torch::Tensor& studentLogits,
                                     const torch::Tensor& targets, double temperature) {
  const int64_t vocab = studentLogits.size(-1);
  torch::Tensor mask = targets.reshape({-1}) != -100;
  torch::Tensor t = teacherLogits.reshape({-1, vocab}).index({mask}).to(torch::kFloat);
  torch::Tensor s = studentLogits.reshape({-1, vocab}).index({mask}).to(torch::kFloat);
  if (t.size(0) == 0) return studentLogits.sum().to(torch::kFloat) * 0.0;
  torch::Tensor logT = torch::log_softmax(t / temperature, -1);
  torch::Tensor logS = torch::log_softmax(s / temperature, -1);
  return (logT.exp() * (logT - logS)).sum(-1).mean();
}

torch::Tensor distillationKl(const torch::Tensor& teacherLogits, const torch::Tensor& studentLogits,
                             const torch::Tensor& targets, double temperature) {
  const int64_t vocab = studentLogits.size(-1);
  const bool fusable = loopType(studentLogits) && loopType(teacherLogits) &&
                       teacherLogits.scalar_type() == studentLogits.scalar_type() &&
                       teacherLogits.sizes() == studentLogits.sizes() && vocab > 0 &&
                       targets.device().is_cpu() && temperature > 0;
  if (!fusable) return distillationKlComposed(teacherLogits, studentLogits, targets, temperature);
  const torch::Tensor rows =
      torch::nonzero(targets.reshape({-1}) != -100).reshape({-1}).contiguous();
  if (rows.numel() == 0) return studentLogits.sum().to(torch::kFloat) * 0.0;
  return DistillationKlFunction::apply(teacherLogits.detach().reshape({-1, vocab}).contiguous(),
                                       studentLogits.reshape({-1, vocab}).contiguous(), rows,
                                       1.0 / temperature);
}

torch::Tensor rmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  const bool fusable = loopType(x) && loopType(weight) && x.dim() >= 1 && x.numel() > 0 &&
                       weight.dim() == 1 && weight.size(0) == x.size(-1);
  return fusable ? RmsNormFunction::apply(x, weight, eps) : rmsNormComposed(x, weight, eps);
}

torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up) {
  const bool fusable = loopType(gate) && gate.scalar_type() == up.scalar_type() &&
                       up.device() == gate.device() && gate.sizes() == up.sizes();
  return fusable ? SwigluFunction::apply(gate, up) : swigluComposed(gate, up);
}

}  // namespace fp4lab::model
