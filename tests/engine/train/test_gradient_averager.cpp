// The data-parallel gradient averager (train/distributed.h) on a real Gloo group of one rank:
// the average over one rank is the rank's own gradient, so whatever the hooks, buckets and
// launch order do, every gradient must come out equal to what autograd computes without them.
// Parameters of 6 MiB each make several buckets (8 MiB cap), so an armed backward launches them
// while it runs; unarmed steps (a last micro-batch without loss tokens runs no backward) must
// work any number of times in a row; gradient accumulation and an unused parameter are covered.
// The 2-rank behaviour (matching collectives, equal weights) is cli_distributed_*'s.
#include <torch/torch.h>
// After LibTorch, whose logging header defines its own CHECK.
#include <catch2/catch.hpp>

#include <vector>

#include "local_port.h"
#include "train/distributed.h"

using namespace fp4lab;

namespace {

// A loss with distinct gradients per parameter; without `all`, parameter 4 is unused.
torch::Tensor loss(const std::vector<torch::Tensor>& p, const torch::Tensor& x, bool all = true) {
  torch::Tensor h = (p[0] * x).sin().sum() + (p[1] * p[1]).sum() * 0.5 + (p[2].cos() * x).sum();
  h = h + p[3].sum() * 2.0 + (p[5] * p[5]).sum();
  return all ? h + (p[4] * x).exp().sum() : h;
}

std::vector<torch::Tensor> params(int64_t n, bool grad) {
  torch::manual_seed(3);
  std::vector<torch::Tensor> p;
  for (int i = 0; i < 5; ++i) p.push_back(torch::randn({n}).set_requires_grad(grad));
  p.push_back(torch::randn({7}).set_requires_grad(grad));  // a small one, in the same bucket
  return p;
}

}  // namespace

TEST_CASE("gradient averager: one rank's average is its gradient, overlapped or not",
          "[train][distributed]") {
  train::DistEnvironment env;
  env.masterPort = freePort();
  std::unique_ptr<train::ProcessGroup> group = train::ProcessGroup::join(env, 30);
  const int64_t n = int64_t(6) << 18;  // 6 MiB of fp32 each
  std::vector<torch::Tensor> p = params(n, true), ref = params(n, true);
  train::GradientAverager averager(*group, p);
  CHECK(averager.buckets() >= 3);

  std::vector<torch::Tensor> xs;
  for (int i = 0; i < 3; ++i) xs.push_back(torch::randn({n}));
  const auto expected = [&](std::vector<int> micro, bool all = true) {
    for (auto& r : ref) r.mutable_grad() = torch::Tensor();
    for (int m : micro) loss(ref, xs[size_t(m)], all).backward();
  };
  const auto same = [&](const char* what) {
    INFO(what);
    for (size_t i = 0; i < p.size(); ++i) {
      INFO("parameter " << i);
      REQUIRE(p[i].grad().defined());
      if (ref[i].grad().defined())
        CHECK(torch::equal(p[i].grad(), ref[i].grad()));
      else
        CHECK(p[i].grad().abs().max().item<float>() == 0);
    }
  };
  const auto zero = [&] {
    for (auto& t : p) t.mutable_grad() = torch::Tensor();
  };

  // Armed: the buckets start during the backward.
  zero();
  averager.arm();
  loss(p, xs[0]).backward();
  averager.finish();
  expected({0});
  same("armed, one micro-batch");
  CHECK(averager.overlappedBuckets() == averager.buckets());

  // Two unarmed steps in a row (the gradients come from a backward the averager did not see).
  for (int step = 0; step < 2; ++step) {
    zero();
    loss(p, xs[1]).backward();
    averager.finish();
    CHECK(averager.overlappedBuckets() == 0);
    expected({1});
    same("unarmed");
  }
  // No backward at all: every gradient absent, averaged as zeros.
  zero();
  averager.finish();
  for (const auto& t : p) CHECK(t.grad().abs().max().item<float>() == 0);

  // Accumulation: the first micro-batch's gradient is in .grad when the armed backward runs.
  zero();
  loss(p, xs[0]).backward();
  averager.arm();
  loss(p, xs[2]).backward();
  averager.finish();
  expected({0, 2});
  same("accumulated over two micro-batches");
  CHECK(averager.overlappedBuckets() == averager.buckets());

  // An unused parameter: its bucket (and, as buckets start in order, every later one) waits
  // for finish(), which averages it as zeros.
  zero();
  averager.arm();
  loss(p, xs[2], false).backward();
  averager.finish();
  expected({2}, false);
  same("an unused parameter");
  CHECK(averager.overlappedBuckets() < averager.buckets());

  // And armed again after all that.
  zero();
  averager.arm();
  loss(p, xs[2]).backward();
  averager.finish();
  expected({2});
  same("armed again");
  CHECK(averager.overlappedBuckets() == averager.buckets());
}
