// attention() (model/fused_ops.h): its own causal backward on CPU in bf16 against an fp64
// reference computed from the same inputs, on fresh random data of many shapes, group sizes,
// magnitudes and layouts, held to the accuracy of LibTorch's own bf16 backward; the forward
// against scaled_dot_product_attention bit for bit; the gradients independent of the thread count
// and of the instruction-set variant of the fused loops.
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "model/fused_loops.h"
#include "model/fused_ops.h"

using namespace fp4lab::model;

namespace {

struct Case {
  int64_t batch, heads, kvHeads, length, dim;
  double scale;     // of q and k: larger makes the softmax peakier
  bool transposed;  // [B, T, H, D] memory viewed as [B, H, T, D], as the model's projections are
};

const std::vector<Case> kCases = {
    {1, 1, 1, 1, 8, 1.0, false},   {2, 4, 2, 5, 16, 1.0, true},   {1, 2, 2, 63, 32, 1.0, false},
    {3, 4, 1, 64, 64, 1.0, true},  {2, 4, 2, 65, 64, 2.0, true},  {1, 8, 2, 130, 48, 1.0, false},
    {2, 4, 2, 256, 64, 1.0, true}, {1, 3, 3, 200, 80, 0.5, true}, {2, 6, 3, 129, 64, 3.0, false},
    {1, 4, 4, 257, 32, 1.0, true},
};

std::string describe(const Case& c) {
  return "B" + std::to_string(c.batch) + " H" + std::to_string(c.heads) + " KV" +
         std::to_string(c.kvHeads) + " T" + std::to_string(c.length) + " D" +
         std::to_string(c.dim) + " scale " + std::to_string(c.scale) +
         (c.transposed ? " transposed" : " contiguous");
}

torch::Tensor randn(std::vector<int64_t> shape, double scale, uint64_t seed) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randn(shape, generator, torch::TensorOptions(torch::kDouble)) * scale;
}

// A bf16 leaf [B, heads, T, D], laid out as the case says.
torch::Tensor input(const Case& c, int64_t heads, double scale, uint64_t seed) {
  torch::Tensor t =
      c.transposed ? randn({c.batch, c.length, heads, c.dim}, scale, seed)
                         .to(torch::kBFloat16)
                         .transpose(1, 2)
                   : randn({c.batch, heads, c.length, c.dim}, scale, seed).to(torch::kBFloat16);
  return t.detach().requires_grad_(true);
}

struct Grads {
  torch::Tensor out, dq, dk, dv;
};

template <class Attend>
Grads run(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
          const torch::Tensor& dOut, Attend attend) {
  const torch::Tensor qi = q.detach().requires_grad_(true), ki = k.detach().requires_grad_(true),
                      vi = v.detach().requires_grad_(true);
  const torch::Tensor out = attend(qi, ki, vi);
  out.backward(dOut.to(out.scalar_type()));
  return {out.detach(), qi.grad(), ki.grad(), vi.grad()};
}

// Causal grouped-query attention written out in fp64.
torch::Tensor reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  const int64_t group = q.size(1) / k.size(1), length = q.size(2);
  const torch::Tensor keys = k.repeat_interleave(group, 1), values = v.repeat_interleave(group, 1);
  const torch::Tensor scores = torch::matmul(q, keys.transpose(-1, -2)) / std::sqrt(q.size(3));
  const torch::Tensor future =
      torch::ones({length, length}, torch::TensorOptions(torch::kBool)).triu(1);
  return torch::matmul(torch::softmax(scores.masked_fill(future, -INFINITY), -1), values);
}

torch::Tensor sdpa(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  return torch::scaled_dot_product_attention(q, k, v, {}, 0.0, true, std::nullopt,
                                             q.size(1) != k.size(1));
}

torch::Tensor ours(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  return attention(q, k, v, std::nullopt, true);
}

// ||a - b|| / ||b|| in fp64 (||a - b|| where b is zero: a one-token softmax has no gradient).
double relativeError(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor wide = b.to(torch::kDouble);
  const double norm = wide.norm().item<double>();
  const double diff = (a.to(torch::kDouble) - wide).norm().item<double>();
  return norm == 0 ? diff : diff / norm;
}

bool bitEqual(const torch::Tensor& a, const torch::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() &&
         torch::equal(a.contiguous().view(torch::kShort), b.contiguous().view(torch::kShort));
}

}  // namespace

TEST_CASE("attention's own backward is available with the x86-64 torch wheel",
          "[model][attention]") {
#if defined(__x86_64__)
  // Without it every other test here would only compare LibTorch with itself.
  CHECK(ownAttentionBackward());
#endif
}

TEST_CASE("attention: LibTorch's forward, and a backward as accurate as LibTorch's",
          "[model][attention]") {
  uint64_t seed = 7000;
  for (const Case& c : kCases) {
    INFO(describe(c));
    const torch::Tensor q = input(c, c.heads, c.scale, ++seed);
    const torch::Tensor k = input(c, c.kvHeads, c.scale, ++seed);
    const torch::Tensor v = input(c, c.kvHeads, 1.0, ++seed);
    const torch::Tensor dOut = randn({c.batch, c.heads, c.length, c.dim}, 1.0, ++seed);

    const Grads mine = run(q, k, v, dOut, ours);
    const Grads libtorch = run(q, k, v, dOut, sdpa);
    const Grads exact =
        run(q.to(torch::kDouble), k.to(torch::kDouble), v.to(torch::kDouble), dOut, reference);
    CHECK(bitEqual(mine.out, libtorch.out));
    const std::vector<std::pair<const char*, std::pair<torch::Tensor, torch::Tensor>>> grads = {
        {"dq", {mine.dq, libtorch.dq}},
        {"dk", {mine.dk, libtorch.dk}},
        {"dv", {mine.dv, libtorch.dv}}};
    const torch::Tensor exactGrads[] = {exact.dq, exact.dk, exact.dv};
    for (size_t i = 0; i < grads.size(); ++i) {
      INFO(grads[i].first);
      const torch::Tensor& got = grads[i].second.first;
      REQUIRE(got.scalar_type() == torch::kBFloat16);
      REQUIRE(got.sizes() == exactGrads[i].sizes());
      const double error = relativeError(got, exactGrads[i]);
      const double libtorchError = relativeError(grads[i].second.second, exactGrads[i]);
      INFO("relative error " << error << ", LibTorch's " << libtorchError);
      // bf16 operands and results: a few parts in a thousand, like LibTorch's own backward.
      CHECK(error < 1e-2);
      CHECK(error < 1.5 * libtorchError + 1e-3);
    }
  }
}

TEST_CASE("attention's backward gives the same bits at any thread count and instruction set",
          "[model][attention]") {
  const Case c{3, 4, 2, 150, 64, 1.5, true};
  const torch::Tensor q = input(c, c.heads, c.scale, 1), k = input(c, c.kvHeads, c.scale, 2),
                      v = input(c, c.kvHeads, 1.0, 3);
  const torch::Tensor dOut = randn({c.batch, c.heads, c.length, c.dim}, 1.0, 4);
  const int previous = torch::get_num_threads();
  torch::set_num_threads(1);
  const Grads one = run(q, k, v, dOut, ours);
  for (const int threads : {2, 3}) {
    INFO(threads << " threads");
    torch::set_num_threads(threads);
    const Grads many = run(q, k, v, dOut, ours);
    CHECK(bitEqual(many.dq, one.dq));
    CHECK(bitEqual(many.dk, one.dk));
    CHECK(bitEqual(many.dv, one.dv));
  }
  torch::set_num_threads(previous);
  for (const char* isa : {"generic", "avx2", "avx512"}) {
    INFO(isa);
    try {
      fused::forceIsa(isa);
    } catch (const std::invalid_argument&) {
      continue;  // this CPU cannot run it
    }
    const Grads variant = run(q, k, v, dOut, ours);
    CHECK(bitEqual(variant.dq, one.dq));
    CHECK(bitEqual(variant.dk, one.dk));
    CHECK(bitEqual(variant.dv, one.dv));
  }
  fused::forceIsa(nullptr);
}

TEST_CASE("attention without gradients, with a mask, or in fp32 is LibTorch's",
          "[model][attention]") {
  const Case c{2, 4, 2, 33, 16, 1.0, true};
  const torch::Tensor q = input(c, c.heads, 1.0, 11), k = input(c, c.kvHeads, 1.0, 12),
                      v = input(c, c.kvHeads, 1.0, 13);
  {
    torch::NoGradGuard noGrad;
    CHECK(bitEqual(ours(q, k, v), sdpa(q, k, v)));
  }
  const torch::Tensor allowed =
      torch::ones({c.length, c.length}, torch::TensorOptions(torch::kBool)).tril();
  const torch::Tensor masked = attention(q, k, v, allowed, false);
  CHECK(bitEqual(masked, torch::scaled_dot_product_attention(q, k, v, allowed, 0.0, false,
                                                             std::nullopt, true)));
  const torch::Tensor dOut = randn({c.batch, c.heads, c.length, c.dim}, 1.0, 14);
  const auto wide = [](const torch::Tensor& t) { return t.to(torch::kFloat); };
  const Grads mine = run(wide(q), wide(k), wide(v), dOut, ours);
  const Grads libtorch = run(wide(q), wide(k), wide(v), dOut, sdpa);
  CHECK(torch::equal(mine.dq, libtorch.dq));
  CHECK(torch::equal(mine.dk, libtorch.dk));
  CHECK(torch::equal(mine.dv, libtorch.dv));
}
