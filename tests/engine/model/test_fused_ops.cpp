// The fused RMSNorm and SwiGLU (model/fused_ops.h) against fp64 references computed from the same
// inputs, forward and backward, on fresh random data of many shapes, magnitudes and types; the
// instruction-set variants against each other bit for bit; results independent of the thread
// count; NaN propagation.
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <ATen/autocast_mode.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "model/fused_loops.h"
#include "model/fused_ops.h"

using namespace fp4lab::model;

namespace {

torch::Tensor randn(std::vector<int64_t> shape, double scale, uint64_t seed) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randn(shape, generator, torch::TensorOptions(torch::kDouble)) * scale;
}

// ||a - b|| / ||b|| in fp64.
double relativeError(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor wide = b.to(torch::kDouble);
  const double norm = wide.norm().item<double>();
  const double diff = (a.to(torch::kDouble) - wide).norm().item<double>();
  return norm == 0 ? diff : diff / norm;
}

// Largest elementwise |a - b| / (|b| + floor), in fp64; floor is a number or a tensor (the size of
// the terms a result is computed from, where it cancels to near zero).
template <class Floor>
double maxRelative(const torch::Tensor& a, const torch::Tensor& b, const Floor& floor) {
  const torch::Tensor wide = b.to(torch::kDouble);
  return ((a.to(torch::kDouble) - wide).abs() / (wide.abs() + floor)).max().template item<double>();
}

bool bitEqual(const torch::Tensor& a, const torch::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() &&
         torch::equal(a.view(torch::kByte), b.view(torch::kByte));
}

// Bit for bit except that any NaN matches any NaN (LibTorch's vectorized casts write bf16 NaN as
// 0xFFFF, its scalar ones and fp4lab's as 0x7FC0).
bool bitEqualOrBothNan(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  const torch::Tensor nanA = a.isnan(), nanB = b.isnan();
  return torch::equal(nanA, nanB) &&
         bitEqual(a.masked_fill(nanA, 0).contiguous(), b.masked_fill(nanB, 0).contiguous());
}

// The fused loops' instruction-set variants this CPU runs (the others are reported, not run);
// leaves the automatic choice in force.
std::vector<std::string> runnableVariants() {
  std::vector<std::string> variants;
  for (const char* name : {"generic", "avx2", "avx512"}) {
    try {
      fused::forceIsa(name);
      variants.push_back(name);
    } catch (const std::invalid_argument&) {
      WARN("this CPU cannot run the " << name << " variant; not tested");
    }
  }
  fused::forceIsa(nullptr);
  return variants;
}

struct RmsCase {
  int64_t rows, dim;
  double scale;
};

const std::vector<RmsCase> kRmsCases = {{1, 1, 1.0},     {3, 7, 1.0},     {64, 16, 2.0},
                                        {65, 33, 0.5},   {200, 256, 1.0}, {17, 1000, 30.0},
                                        {130, 64, 1e-3},  // mean square near eps: eps matters
                                        {5, 4096, 1.0},  {129, 48, 1e4}};

std::string describe(const RmsCase& c, torch::ScalarType x, torch::ScalarType w) {
  return std::to_string(c.rows) + "x" + std::to_string(c.dim) + " scale " +
         std::to_string(c.scale) + " x " + std::string(c10::toString(x)) + " w " +
         std::string(c10::toString(w));
}

}  // namespace

TEST_CASE("fused RMSNorm matches the fp64 formula, forward and backward", "[model][fused]") {
  const double eps = 1e-6;
  uint64_t seed = 100;
  for (const RmsCase& c : kRmsCases) {
    for (const torch::ScalarType xType : {torch::kFloat, torch::kBFloat16}) {
      for (const torch::ScalarType wType : {torch::kFloat, torch::kBFloat16}) {
        INFO(describe(c, xType, wType));
        const torch::Tensor x = randn({c.rows, c.dim}, c.scale, ++seed).to(xType);
        const torch::Tensor w = (1 + 0.3 * randn({c.dim}, 1.0, ++seed)).to(wType);
        const torch::Tensor xLeaf = x.clone().requires_grad_(true);
        const torch::Tensor wLeaf = w.clone().requires_grad_(true);
        const torch::Tensor y = rmsNorm(xLeaf, wLeaf, eps);
        const bool wide = xType == torch::kFloat || wType == torch::kFloat;
        CHECK(y.scalar_type() == (wide ? torch::kFloat : torch::kBFloat16));

        // The reference: the same inputs in fp64, with Hugging Face's cast of the normalized
        // value to x's type before the weight (modelled by rounding it there).
        const torch::Tensor x64 = x.to(torch::kDouble).requires_grad_(true);
        const torch::Tensor w64 = w.to(torch::kDouble).requires_grad_(true);
        const torch::Tensor rstd = torch::rsqrt(x64.pow(2).mean(-1, true) + eps);
        torch::Tensor normalized = x64 * rstd;
        if (xType == torch::kBFloat16) {
          // Rounding has no gradient of its own: the straight-through form keeps autograd's
          // derivative of the unrounded product, as LibTorch's ToCopyBackward does.
          normalized = normalized + (normalized.to(xType).to(torch::kDouble) - normalized).detach();
        }
        const torch::Tensor reference = w64 * normalized;
        // fp32 output: a few ulp; bf16 output: one rounding of the bf16 product, so one ulp, plus
        // the rare input whose fp32 normalized value lands across a bf16 rounding boundary.
        CHECK(maxRelative(y, reference.detach(), 1e-30) < (wide ? 3e-6 : 8e-3));
        CHECK(relativeError(y, reference.detach()) < (wide ? 1e-6 : 4e-3));

        const torch::Tensor dy = randn({c.rows, c.dim}, 1.0, ++seed);
        (y.to(torch::kDouble) * dy).sum().backward();
        (reference * dy).sum().backward();
        CHECK(xLeaf.grad().scalar_type() == xType);
        CHECK(wLeaf.grad().scalar_type() == wType);
        // dy is rounded to y's type before the fused backward sees it, and dx = rstd * (g - xhat *
        // mean(g * xhat)) cancels (to zero when dim is 1): measure its error against the size of
        // the terms, rstd * dy * w.
        const double dyRounding = wide ? 1e-6 : 8e-3;
        const double xTolerance = xType == torch::kFloat ? 4e-5 + dyRounding : 1.5e-2;
        const double terms = (rstd * dy * w64).detach().norm().item<double>();
        CHECK((xLeaf.grad().to(torch::kDouble) - x64.grad()).norm().item<double>() / terms <
              xTolerance);
        CHECK(relativeError(wLeaf.grad(), w64.grad()) <
              (wType == torch::kFloat ? 1e-5 + dyRounding : 1e-2));
      }
    }
  }
}

TEST_CASE("fused RMSNorm keeps the shape, and a frozen weight gets no gradient", "[model][fused]") {
  const torch::Tensor x = randn({2, 3, 5, 32}, 1.0, 7).to(torch::kFloat).requires_grad_(true);
  const torch::Tensor w = torch::ones({32});
  const torch::Tensor y = rmsNorm(x, w, 1e-5);
  CHECK(y.sizes() == x.sizes());
  y.sum().backward();
  CHECK(x.grad().sizes() == x.sizes());
  CHECK_FALSE(w.grad().defined());
  // A non-contiguous input gives the values of its contiguous copy.
  const torch::Tensor base = randn({8, 64}, 1.0, 8).to(torch::kFloat);
  CHECK(bitEqual(rmsNorm(base.t(), torch::ones({8}), 1e-5),
                 rmsNorm(base.t().contiguous(), torch::ones({8}), 1e-5)));
}

TEST_CASE("fused SwiGLU matches silu(g) * u in fp64, forward and backward", "[model][fused]") {
  uint64_t seed = 500;
  for (const int64_t n : {1, 15, 16, 17, 1000, 65537}) {
    for (const double scale : {0.01, 1.0, 8.0, 30.0}) {
      for (const torch::ScalarType type : {torch::kFloat, torch::kBFloat16}) {
        INFO(n << " elements, scale " << scale << ", " << c10::toString(type));
        const torch::Tensor g = randn({n}, scale, ++seed).clamp(-80, 80).to(type);
        const torch::Tensor u = randn({n}, 1.0, ++seed).to(type);
        const torch::Tensor gLeaf = g.clone().requires_grad_(true);
        const torch::Tensor uLeaf = u.clone().requires_grad_(true);
        const torch::Tensor h = swiglu(gLeaf, uLeaf);
        CHECK(h.scalar_type() == type);
        const torch::Tensor g64 = g.to(torch::kDouble).requires_grad_(true);
        const torch::Tensor u64 = u.to(torch::kDouble).requires_grad_(true);
        const torch::Tensor reference = g64 * torch::sigmoid(g64) * u64;
        // fp32: computed in fp32 with a 2-ulp exp; bf16: rounded once, so within one ulp.
        const double tolerance = type == torch::kFloat ? 2e-6 : 7.9e-3;
        CHECK(maxRelative(h, reference.detach(), 1e-37) < tolerance);

        const torch::Tensor dh = randn({n}, 1.0, ++seed).to(type);
        h.backward(dh);
        reference.backward(dh.to(torch::kDouble));
        CHECK(gLeaf.grad().scalar_type() == type);
        // dg = dh * u * s * (1 + g * (1 - s)) cancels to zero near g = -1.28: measure it against
        // the size of dh * u.
        const torch::Tensor terms = (dh * u).to(torch::kDouble).abs() + 1e-37;
        CHECK(maxRelative(gLeaf.grad(), g64.grad(), terms) < (type == torch::kFloat ? 5e-6 : 8e-3));
        CHECK(maxRelative(uLeaf.grad(), u64.grad(), 1e-37) < tolerance);
      }
    }
  }
}

TEST_CASE("fused SwiGLU and RMSNorm propagate NaN", "[model][fused]") {
  for (const torch::ScalarType type : {torch::kFloat, torch::kBFloat16}) {
    const torch::Tensor g = torch::tensor({1.0f, NAN, -2.0f, 0.0f}).to(type);
    const torch::Tensor u = torch::tensor({1.0f, 1.0f, NAN, 3.0f}).to(type);
    const torch::Tensor h = swiglu(g, u).to(torch::kFloat);
    CHECK_FALSE(std::isnan(h[0].item<float>()));
    CHECK(std::isnan(h[1].item<float>()));
    CHECK(std::isnan(h[2].item<float>()));
    CHECK(h[3].item<float>() == 0.0f);

    torch::Tensor x = torch::ones({3, 20}).to(type);
    x[1][4] = NAN;
    const torch::Tensor y = rmsNorm(x, torch::ones({20}), 1e-6);
    CHECK(y[0].isnan().sum().item<int64_t>() == 0);
    CHECK(y[1].isnan().all().item<bool>());  // the row's norm is NaN
    CHECK(y[2].isnan().sum().item<int64_t>() == 0);
  }
}

TEST_CASE("fused loops: every instruction-set variant gives the same bits", "[model][fused]") {
  const char* automatic = fused::isaName();
  const std::vector<std::string> variants = runnableVariants();
  CHECK(std::string(fused::isaName()) == automatic);
  CHECK_THROWS_AS(fused::forceIsa("sse9"), std::invalid_argument);
  REQUIRE(variants.size() >= 1);

  // Everything the variants compute, on shapes with ragged 16-lane tails.
  auto run = [](uint64_t seed) {
    std::vector<torch::Tensor> out;
    for (const torch::ScalarType type : {torch::kFloat, torch::kBFloat16}) {
      const torch::Tensor x = randn({37, 203}, 2.0, seed).to(type).requires_grad_(true);
      const torch::Tensor w =
          (1 + randn({203}, 0.3, seed + 1)).to(torch::kFloat).requires_grad_(true);
      const torch::Tensor g = randn({37, 203}, 4.0, seed + 2).to(type).requires_grad_(true);
      const torch::Tensor u = randn({37, 203}, 1.0, seed + 3).to(type).requires_grad_(true);
      const torch::Tensor y = rmsNorm(x, w, 1e-6);
      const torch::Tensor h = swiglu(g, u);
      (y * randn({37, 203}, 1.0, seed + 4).to(y.scalar_type())).sum().backward();
      (h.to(torch::kFloat) * randn({37, 203}, 1.0, seed + 5).to(torch::kFloat)).sum().backward();
      const torch::Tensor q = randn({3, 37, 2, 34}, 2.0, seed + 6).to(type).requires_grad_(true);
      const torch::Tensor angles = randn({37, 34}, 2.0, seed + 7);
      const torch::Tensor r = rotary(q, angles.cos().to(torch::kFloat),
                                     angles.sin().to(torch::kFloat), torch::kBFloat16);
      r.backward(randn({3, 37, 2, 34}, 1.0, seed + 8).to(torch::kBFloat16));
      out.insert(out.end(), {y.detach(), h.detach(), x.grad(), w.grad(), g.grad(), u.grad(),
                             r.detach(), q.grad()});
    }
    return out;
  };
  fused::forceIsa("generic");
  const std::vector<torch::Tensor> expected = run(900);
  for (const std::string& name : variants) {
    INFO("variant " << name);
    fused::forceIsa(name.c_str());
    const std::vector<torch::Tensor> got = run(900);
    for (size_t i = 0; i < got.size(); ++i) CHECK(bitEqual(got[i], expected[i]));
  }
  fused::forceIsa(nullptr);
}

TEST_CASE("fused convert and clipGradient: LibTorch's casts and masked_fill, in every variant",
          "[model][fused]") {
  const std::vector<std::string> variants = runnableVariants();
  REQUIRE(!variants.empty());
  const float special[] = {0.0f,
                           -0.0f,
                           INFINITY,
                           -INFINITY,
                           NAN,
                           -NAN,
                           1e-40f,
                           -3e-39f,
                           3.3895e38f,
                           1.0f + 0x1p-8f,
                           1.0f + 0x1p-7f + 0x1p-8f,
                           0.75f,
                           -0.75f};
  for (const std::string& name : variants) {
    fused::forceIsa(name.c_str());
    for (const int64_t n : {0, 1, 15, 16, 17, 1000, 4099}) {
      for (const double scale : {1e-3, 1.0, 1e30}) {
        INFO("variant " << name << ", " << n << " elements, scale " << scale);
        torch::Tensor x = randn({n}, scale, uint64_t(n) * 7 + 1).to(torch::kFloat);
        for (int64_t i = 0; i < n && i < int64_t(std::size(special)); ++i)
          x[i * 3 % n] = special[i];
        // fp32 -> bf16 (nearest even, NaN kept) and back.
        torch::Tensor narrow = torch::empty({n}, torch::kBFloat16);
        fused::convert(fused::Type::F32, x.data_ptr(), fused::Type::BF16, narrow.data_ptr(), n);
        CHECK(bitEqualOrBothNan(narrow, x.to(torch::kBFloat16)));
        torch::Tensor wide = torch::empty({n}, torch::kFloat);
        fused::convert(fused::Type::BF16, narrow.data_ptr(), fused::Type::F32, wide.data_ptr(), n);
        CHECK(bitEqualOrBothNan(wide, narrow.to(torch::kFloat)));
        // The clipped gradient at a clip inside the data's range, in both types.
        const torch::Tensor grad = randn({n}, 1.0, uint64_t(n) * 7 + 2).to(torch::kFloat);
        const float clip = float(scale * 0.8);
        for (const torch::ScalarType type : {torch::kFloat, torch::kBFloat16}) {
          const torch::Tensor g = grad.to(type), v = x.to(type);
          torch::Tensor out = torch::empty({n}, type);
          fused::clipGradient(type == torch::kFloat ? fused::Type::F32 : fused::Type::BF16,
                              g.data_ptr(), v.data_ptr(), clip, out.data_ptr(), n);
          // |x| compared in fp32 (LibTorch would round the clip to bf16 for a bf16 tensor).
          CHECK(bitEqual(out, g.masked_fill(v.to(torch::kFloat).abs() > clip, 0)));
        }
      }
    }
  }
  fused::forceIsa(nullptr);
}

TEST_CASE("fused RMSNorm and SwiGLU give the same bits at any thread count", "[model][fused]") {
  auto run = [](int threads) {
    torch::set_num_threads(threads);
    const torch::Tensor x = randn({16, 256, 256}, 1.0, 1).to(torch::kFloat).requires_grad_(true);
    const torch::Tensor w = (1 + randn({256}, 0.3, 2)).to(torch::kFloat).requires_grad_(true);
    const torch::Tensor g = randn({16, 256, 704}, 2.0, 3).to(torch::kBFloat16).requires_grad_(true);
    const torch::Tensor u = randn({16, 256, 704}, 1.0, 4).to(torch::kBFloat16).requires_grad_(true);
    const torch::Tensor y = rmsNorm(x, w, 1e-6);
    const torch::Tensor h = swiglu(g, u);
    (y * randn({16, 256, 256}, 1.0, 5).to(torch::kFloat)).sum().backward();
    h.backward(randn({16, 256, 704}, 1.0, 6).to(torch::kBFloat16));
    torch::set_num_threads(1);
    return std::vector<torch::Tensor>{y.detach(), h.detach(), x.grad(),
                                      w.grad(),   g.grad(),   u.grad()};
  };
  const std::vector<torch::Tensor> one = run(1);
  for (const int threads : {2, 3}) {
    INFO(threads << " threads");
    const std::vector<torch::Tensor> many = run(threads);
    for (size_t i = 0; i < one.size(); ++i) CHECK(bitEqual(many[i], one[i]));
  }
}

TEST_CASE("fused RMSNorm rounds to bf16 as LibTorch does, ties to even", "[model][fused]") {
  // With bf16 x and w, y = round(w * round(x * rstd)). Weight 1 gives the inner bf16 value itself;
  // weight 1.5 then makes products with one bit more than bf16 holds, half of them exact ties,
  // which LibTorch's bf16 multiply rounds to even.
  const torch::Tensor x = randn({64, 96}, 1.0, 4242).to(torch::kBFloat16);
  const torch::Tensor normalized = rmsNorm(x, torch::ones({96}, torch::kBFloat16), 1e-6);
  const torch::Tensor w = torch::full({96}, 1.5, torch::kBFloat16);
  const torch::Tensor expected = normalized * w;
  CHECK(bitEqual(rmsNorm(x, w, 1e-6), expected));
  // The test exercises ties: some products are exactly halfway between two bf16 values.
  const torch::Tensor exact = normalized.to(torch::kFloat) * 1.5;
  const torch::Tensor lowBits = exact.view(torch::kInt) & 0xFFFF;
  CHECK((lowBits == 0x8000).sum().item<int64_t>() > 100);
}

TEST_CASE("fused rotary embedding: LibTorch's forward bit for bit, backward to fp64",
          "[model][fused]") {
  uint64_t seed = 3000;
  struct Shape {
    int64_t batch, seq, heads, dim;
  };
  for (const Shape s :
       {Shape{1, 1, 1, 2}, Shape{2, 7, 3, 16}, Shape{3, 65, 2, 64}, Shape{1, 130, 4, 34}}) {
    for (const torch::ScalarType xType : {torch::kFloat, torch::kBFloat16}) {
      for (const torch::ScalarType outType : {torch::kFloat, torch::kBFloat16}) {
        INFO(s.batch << "x" << s.seq << "x" << s.heads << "x" << s.dim << " x "
                     << c10::toString(xType) << " out " << c10::toString(outType));
        const torch::Tensor x = randn({s.batch, s.seq, s.heads, s.dim}, 3.0, ++seed).to(xType);
        const torch::Tensor angles = randn({s.seq, s.dim}, 2.0, ++seed);
        const torch::Tensor cos = angles.cos().to(torch::kFloat);
        const torch::Tensor sin = angles.sin().to(torch::kFloat);
        const torch::Tensor leaf = x.clone().requires_grad_(true);
        const torch::Tensor y = rotary(leaf, cos, sin, outType);
        CHECK(y.scalar_type() == outType);
        CHECK(bitEqual(y.detach(), rotaryComposed(x, cos, sin, outType)));

        const torch::Tensor dy = randn({s.batch, s.seq, s.heads, s.dim}, 1.0, ++seed).to(outType);
        y.backward(dy);
        const torch::Tensor x64 = x.to(torch::kDouble).requires_grad_(true);
        rotaryComposed(x64, cos.to(torch::kDouble), sin.to(torch::kDouble), torch::kDouble)
            .backward(dy.to(torch::kDouble));
        CHECK(leaf.grad().scalar_type() == xType);
        // dx = dy * cos +- dy' * sin: one rounding of an fp32 sum of two products.
        const torch::Tensor terms =
            (dy.to(torch::kDouble).abs() * (cos.abs() + sin.abs()).unsqueeze(1)).detach() + 1e-30;
        CHECK(maxRelative(leaf.grad(), x64.grad(), terms) < (xType == torch::kFloat ? 3e-7 : 4e-3));
      }
    }
  }
  // The variants agree bit for bit, and positions follow the row index across thread chunks.
  const torch::Tensor x = randn({4, 200, 2, 64}, 1.0, 77).to(torch::kBFloat16);
  const torch::Tensor angles = randn({200, 64}, 2.0, 78);
  const torch::Tensor cos = angles.cos().to(torch::kFloat), sin = angles.sin().to(torch::kFloat);
  torch::set_num_threads(3);
  const torch::Tensor threaded = rotary(x, cos, sin, torch::kBFloat16);
  torch::set_num_threads(1);
  CHECK(bitEqual(threaded, rotaryComposed(x, cos, sin, torch::kBFloat16)));
}

TEST_CASE("the engine's at::parallel_for runs on more than one thread", "[model][fused][threads]") {
  // Without -fopenmp on the engine, at::parallel_for compiles to a serial loop and every fused op
  // (and fake-quant piece) runs on one core.
  torch::set_num_threads(2);
  const int threads = parallelForThreads();
  torch::set_num_threads(1);
  CHECK(threads == 2);
  CHECK(parallelForThreads() == 1);
}

// linear()'s BF16 path without AMX (fp32 GEMMs of the BF16-rounded operands) against LibTorch's
// own BF16 linear under autocast: the same exact products accumulated in fp32 in another order, so
// the outputs agree to the last BF16 bit except where the two sums straddle a rounding boundary,
// and the gradients likewise; and both against the fp64 product of the rounded operands.
TEST_CASE("linear: BF16 through fp32 GEMMs equals autocast's BF16 linear", "[fused][linear]") {
  struct Case {
    std::vector<int64_t> x;
    int64_t out;
    bool bias;
    torch::ScalarType xType;
  };
  const std::vector<Case> cases = {{{1, 1}, 1, false, torch::kFloat},
                                   {{3, 5, 32}, 17, true, torch::kFloat},
                                   {{2, 64, 576}, 192, false, torch::kBFloat16},
                                   {{129, 96}, 257, true, torch::kBFloat16},
                                   {{4, 33, 1536}, 64, true, torch::kFloat},
                                   {{7, 640}, 1000, false, torch::kFloat}};
  uint64_t seed = 100;
  for (const Case& c : cases) {
    INFO("x " << c.x << " out " << c.out << " bias " << c.bias << " " << c10::toString(c.xType));
    const int64_t in = c.x.back();
    const torch::Tensor x0 = randn(c.x, 1.0, ++seed).to(c.xType);
    const torch::Tensor w0 =
        randn({c.out, in}, 1.0 / std::sqrt(double(in)), ++seed).to(torch::kFloat);
    const torch::Tensor b0 =
        c.bias ? randn({c.out}, 0.5, ++seed).to(torch::kFloat) : torch::Tensor();
    std::vector<int64_t> yShape = c.x;
    yShape.back() = c.out;
    const torch::Tensor dy = randn(yShape, 1.0, ++seed).to(torch::kBFloat16);
    auto run = [&](bool ours) {
      torch::Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
      torch::Tensor b = c.bias ? b0.clone().requires_grad_(true) : torch::Tensor();
      torch::Tensor y;
      {
        at::autocast::set_autocast_enabled(c10::DeviceType::CPU, true);
        at::autocast::set_autocast_dtype(c10::DeviceType::CPU, at::kBFloat16);
        at::autocast::increment_nesting();
        y = ours ? bf16LinearViaFp32(x, w, b) : torch::linear(x, w, b);
        at::autocast::decrement_nesting();
        at::autocast::clear_cache();
        at::autocast::set_autocast_enabled(c10::DeviceType::CPU, false);
      }
      y.backward(dy);
      return std::vector<torch::Tensor>{y, x.grad(), w.grad(), c.bias ? b.grad() : torch::Tensor()};
    };
    const auto ours = run(true), torchs = run(false);
    for (size_t i = 0; i < 4; ++i) {
      if (!torchs[i].defined()) continue;
      INFO("output " << i);
      REQUIRE(ours[i].scalar_type() == torchs[i].scalar_type());
      REQUIRE(ours[i].sizes() == torchs[i].sizes());
      // At most one BF16 rounding step apart (where a sum cancels to near zero, the fp32
      // accumulation order counts against the terms' size, not the result's), mostly identical.
      const torch::Tensor a = ours[i].to(torch::kDouble), t = torchs[i].to(torch::kDouble);
      const double floor = 1e-5 * t.abs().max().item<double>();
      const torch::Tensor ulp = t.abs() * std::ldexp(1.0, -7);
      CHECK(((a - t).abs() <= ulp * 1.01 + floor).all().item<bool>());
      const double same = (a == t).to(torch::kDouble).mean().item<double>();
      CHECK(same > 0.9);
    }
    // The output is the BF16 rounding of the exact product of the BF16-rounded operands, up to
    // fp32 accumulation.
    const torch::Tensor exact =
        torch::matmul(x0.to(torch::kBFloat16).to(torch::kDouble),
                      w0.to(torch::kBFloat16).to(torch::kDouble).t()) +
        (c.bias ? b0.to(torch::kBFloat16).to(torch::kDouble) : torch::zeros({1}, torch::kDouble));
    CHECK(relativeError(ours[0], exact) < 8e-3);
  }
}

// distillationKl's fused loops against the composition evaluated in fp64 from the same logits,
// forward and the student's gradient, over vocabularies, temperatures, masks and types; the
// instruction-set variants give the same bits.
TEST_CASE("distillationKl: the fused KL equals the fp64 composition", "[fused][kl]") {
  struct Case {
    int64_t batch, length, vocab;
    double temperature, scale;
    torch::ScalarType type;
  };
  const std::vector<Case> cases = {{1, 1, 1, 1.0, 1.0, torch::kFloat},
                                   {2, 5, 17, 1.0, 3.0, torch::kFloat},
                                   {3, 7, 1000, 2.0, 5.0, torch::kBFloat16},
                                   {2, 9, 49152, 1.0, 4.0, torch::kBFloat16},
                                   {4, 3, 333, 0.5, 10.0, torch::kFloat}};
  uint64_t seed = 500;
  for (const Case& c : cases) {
    INFO(c.batch << "x" << c.length << " vocab " << c.vocab << " T " << c.temperature << " "
                 << c10::toString(c.type));
    const torch::Tensor t = randn({c.batch, c.length, c.vocab}, c.scale, ++seed).to(c.type);
    const torch::Tensor s0 = randn({c.batch, c.length, c.vocab}, c.scale, ++seed).to(c.type);
    torch::Tensor targets = torch::zeros({c.batch, c.length}, torch::kLong);
    targets.index_put_({torch::indexing::Slice(), 0}, -100);  // the first position never scores
    if (c.length == 1) targets.fill_(0);
    torch::Tensor s = s0.clone().requires_grad_(true);
    const torch::Tensor fused = distillationKl(t, s, targets, c.temperature);
    fused.backward();
    torch::Tensor s64 = s0.to(torch::kDouble).requires_grad_(true);
    const torch::Tensor reference =
        distillationKlComposed(t.to(torch::kDouble), s64, targets, c.temperature);
    reference.backward();
    CHECK(fused.scalar_type() == torch::kFloat);
    CHECK(std::abs(fused.item<double>() - reference.item<double>()) <=
          1e-5 * std::abs(reference.item<double>()) + 1e-6);
    REQUIRE(s.grad().scalar_type() == c.type);
    // The gradient is rounded once to the logits' type.
    const double tolerance = c.type == torch::kBFloat16 ? 8e-3 : 1e-5;
    CHECK(relativeError(s.grad(), s64.grad()) < tolerance);
    // Masked rows get no gradient.
    CHECK(s.grad().index({torch::indexing::Slice(), 0}).abs().max().item<double>() ==
          (c.length == 1 ? s.grad().abs().max().item<double>() : 0.0));
  }
  // Every instruction-set variant, the same bits.
  const torch::Tensor t = randn({2, 6, 3001}, 4.0, 900).to(torch::kBFloat16);
  const torch::Tensor s0 = randn({2, 6, 3001}, 4.0, 901).to(torch::kBFloat16);
  const torch::Tensor targets = torch::zeros({2, 6}, torch::kLong);
  std::vector<torch::Tensor> results;
  for (const char* isa : {"generic", "avx2", "avx512"}) {
    try {
      fused::forceIsa(isa);
    } catch (const std::invalid_argument&) {
      WARN("this CPU cannot run the " << isa << " variant; not compared");
      continue;
    }
    torch::Tensor s = s0.clone().requires_grad_(true);
    const torch::Tensor kl = distillationKl(t, s, targets, 1.5);
    kl.backward();
    results.push_back(torch::cat({kl.reshape({1}), s.grad().to(torch::kFloat).reshape({-1})}));
  }
  fused::forceIsa(nullptr);
  for (size_t i = 1; i < results.size(); ++i) CHECK(bitEqual(results[0], results[i]));
}
