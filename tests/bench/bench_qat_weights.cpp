// What a QAT step spends on its weights beyond what an SFT step spends: on SmolLM2-135M's 30
// layers of linear weights (fp32 masters, NVFP4, q/k/v and gate/up sharing one tensor scale each),
//   cast:    the fp32 -> BF16 cast autocast makes of every weight (what SFT pays too);
//   before:  QAT's weight path until the nineteenth session: the shared amax as tensor ops (abs,
//            isfinite, where, max), the kernels' fake quantization to an fp32 tensor, then
//            autocast's cast of it to BF16;
//   amax:    before, with the kernels' one-pass amax instead of the tensor ops (the first half of
//            the change);
//   after:   the kernels' one-pass amax, then fake quantization in cache-sized pieces narrowed to
//            BF16 as they go (quant::fakeQuantize with a BF16 result).
// The three alternate over the repetitions, so drift in the machine's speed hits them alike; the
// table gives the median of each and the overhead over the cast. Random weights of the layers'
// shapes (the cost does not depend on the values).
// usage: bench_qat_weights [--reps R] [--threads N] [--layers L]
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "bench_common.h"
#include "quant/fake_quant.h"

using namespace fp4lab;
using bench::median;
using bench::seconds;

namespace {

float amaxAsTensorOps(const torch::Tensor& w) {
  torch::NoGradGuard noGrad;
  torch::Tensor abs = w.detach().abs().to(torch::kFloat);
  abs = torch::where(torch::isfinite(abs), abs, torch::zeros_like(abs));
  return abs.max().item<float>();
}

}  // namespace

int main(int argc, char** argv) {
  int64_t reps = 15, threads = 0, layers = 30;
  if (!bench::integerFlags(argc, argv,
                           {{"--reps", &reps}, {"--threads", &threads}, {"--layers", &layers}},
                           "bench_qat_weights [--reps R] [--threads N] [--layers L]"))
    return 2;
  if (threads > 0) torch::set_num_threads(int(threads)), fp4_set_num_threads(int(threads));
  torch::manual_seed(0);
  // SmolLM2-135M: hidden 576, 9 heads / 3 KV heads of 64, SwiGLU 1536. Groups share a scale.
  const std::vector<std::vector<std::vector<int64_t>>> groups = {
      {{576, 576}, {192, 576}, {192, 576}},
      {{576, 576}},
      {{1536, 576}, {1536, 576}},
      {{576, 1536}}};
  std::vector<std::vector<torch::Tensor>> weights;
  int64_t elements = 0;
  for (int l = 0; l < layers; ++l)
    for (const auto& g : groups) {
      std::vector<torch::Tensor> members;
      for (const auto& shape : g) {
        members.push_back(torch::randn(shape) * 0.02);
        elements += members.back().numel();
      }
      weights.push_back(std::move(members));
    }
  const fp4_config cfg = fp4_default_config(FP4_FORMAT_NVFP4);
  std::vector<torch::Tensor> sink;  // keeps results alive like a forward does, until the end
  auto cast = [&] {
    for (const auto& g : weights)
      for (const torch::Tensor& w : g) sink.push_back(w.to(torch::kBFloat16));
  };
  // One QAT weight path: the shared amax by the kernels' pass or as tensor ops, the BF16 result
  // narrowed in the pieces or cast afterwards.
  auto qatPath = [&](bool kernelAmax, bool bf16Pieces) {
    return [&, kernelAmax, bf16Pieces] {
      for (const auto& g : weights) {
        float amax = -1.0f;  // a lone weight: measured by the kernels
        if (g.size() > 1) {
          amax = 0;
          for (const torch::Tensor& w : g)
            amax = std::max(amax, kernelAmax ? fp4_tensor_amax(w.data_ptr<float>(), w.numel())
                                             : amaxAsTensorOps(w));
        }
        for (const torch::Tensor& w : g)
          sink.push_back(bf16Pieces ? quant::fakeQuantize(w, cfg, amax, nullptr, nullptr, nullptr,
                                                          torch::kBFloat16)
                                    : quant::fakeQuantize(w, cfg, amax).to(torch::kBFloat16));
      }
    };
  };
  const auto before = qatPath(false, false), amaxOnly = qatPath(true, false),
             after = qatPath(true, true);
  // The two QAT paths give the same BF16 weights.
  sink.clear();
  before();
  const std::vector<torch::Tensor> reference = sink;
  sink.clear();
  after();
  for (size_t i = 0; i < sink.size(); ++i)
    if (!torch::equal(sink[i], reference[i])) {
      std::fprintf(stderr, "before and after differ at weight %zu\n", i);
      return 1;
    }
  std::vector<double> tCast, tBefore, tAmax, tAfter;
  for (int r = 0; r < reps + 1; ++r) {  // the first round warms up
    const double c = seconds(cast);
    sink.clear();
    const double b = seconds(before);
    sink.clear();
    const double m = seconds(amaxOnly);
    sink.clear();
    const double a = seconds(after);
    sink.clear();
    if (r == 0) continue;
    tCast.push_back(c), tBefore.push_back(b), tAmax.push_back(m), tAfter.push_back(a);
  }
  const double c = median(tCast) * 1e3, b = median(tBefore) * 1e3, m = median(tAmax) * 1e3,
               a = median(tAfter) * 1e3;
  std::printf("%lld layers, %.1f M weight elements, %d threads, %lld repetitions\n\n",
              static_cast<long long>(layers), double(elements) / 1e6, torch::get_num_threads(),
              static_cast<long long>(reps));
  std::printf("| weight path per step | median (ms) | over the cast (ms) |\n|---|---|---|\n");
  std::printf("| cast to BF16 (SFT) | %.1f | |\n", c);
  std::printf("| QAT before | %.1f | %.1f |\n", b, b - c);
  std::printf("| QAT, one-pass amax only | %.1f | %.1f |\n", m, m - c);
  std::printf("| QAT after | %.1f | %.1f |\n", a, a - c);
  return 0;
}
