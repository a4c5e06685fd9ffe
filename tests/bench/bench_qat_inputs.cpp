// What a QAT W4A4 step spends on its linear layers' inputs beyond what an SFT step spends, forward
// and backward, on SmolLM2-135M's 30 layers at batch 8 x 256 (2 048 tokens; NVFP4, calibrated
// amaxes, clipped straight-through gradient). Per layer: the q/k/v input and the gate/up input are
// fp32 (RMSNorm's output with an fp32 weight) and have three and two readers; the o_proj and
// down_proj inputs are BF16 (outputs of BF16 linears) with one reader each. A reader stands for
// the BF16 linear layer: what autocast hands it and the BF16 gradient it sends back.
//   sft:     each reader casts an fp32 input to BF16 (autocast), and the cast's backward widens
//            its gradient; BF16 inputs pass as they are;
//   before:  QAT until the twentieth session: the input fake-quantized to an fp32 tensor, cast
//            to BF16 by each reader;
//   after:   fake-quantized by the kernels straight to BF16 (BF16 inputs widened as they are
//            loaded, fp4_fake_quantize_typed), handed to every reader as it is (each reader's
//            straight-through node widens its gradient).
// The three alternate over the repetitions, so drift in the machine's speed hits them alike; the
// table gives the median of each and the overhead over SFT's. Before and after must produce the
// same BF16 inputs and the same input gradients, bit for bit (checked first). Random inputs of
// the layers' shapes; the amax is calibrated below max |x|, so the clipped gradient masks.
// usage: bench_qat_inputs [--reps R] [--threads N] [--layers L] [--tokens T]
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench_common.h"
#include "quant/fake_quant.h"

using namespace fp4lab;
using bench::median;
using bench::seconds;

namespace {

struct Input {
  torch::Tensor x;               // the layer's input (a leaf here; its gradient is the result)
  int readers = 1;               // q/k/v: 3, gate/up: 2
  std::vector<torch::Tensor> g;  // each reader's BF16 gradient
  std::unique_ptr<quant::FakeQuantizer> quantizer;
};

enum class Path { Sft, Before, After };

// One forward and backward of every input through `path`; returns the input gradients.
std::vector<torch::Tensor> step(std::vector<Input>& inputs, Path path) {
  std::vector<torch::Tensor> outs, grads;
  for (Input& in : inputs) {
    in.x.mutable_grad().reset();
    torch::Tensor shared;
    if (path == Path::Before) shared = in.quantizer->apply(in.x);  // fp32 (autocast off)
    for (int r = 0; r < in.readers; ++r) {
      torch::Tensor read;
      if (path == Path::Sft) {
        read = in.x.to(torch::kBFloat16);
      } else if (path == Path::Before) {
        read = shared.to(torch::kBFloat16);
      } else {
        at::autocast::set_autocast_enabled(at::kCPU, true);
        read = in.quantizer->apply(in.x);  // BF16, one computation for all readers
        at::autocast::set_autocast_enabled(at::kCPU, false);
      }
      outs.push_back(read);
      grads.push_back(in.g[size_t(r)]);
    }
  }
  torch::autograd::backward(outs, grads);
  quant::forgetSharedInput();
  std::vector<torch::Tensor> result;
  for (Input& in : inputs) result.push_back(in.x.grad());
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t reps = 15, threads = 0, layers = 30, tokens = 2048;
  if (!bench::integerFlags(argc, argv,
                           {{"--reps", &reps},
                            {"--threads", &threads},
                            {"--layers", &layers},
                            {"--tokens", &tokens}},
                           "bench_qat_inputs [--reps R] [--threads N] [--layers L] [--tokens T]"))
    return 2;
  if (threads > 0) torch::set_num_threads(int(threads)), fp4_set_num_threads(int(threads));
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  torch::manual_seed(0);
  const fp4_config cfg = fp4_default_config(FP4_FORMAT_NVFP4);
  // SmolLM2-135M: hidden 576, SwiGLU 1536.
  struct Shape {
    int64_t width;
    int readers;
    torch::ScalarType type;
  };
  const std::vector<Shape> shapes = {{576, 3, torch::kFloat},
                                     {576, 1, torch::kBFloat16},
                                     {576, 2, torch::kFloat},
                                     {1536, 1, torch::kBFloat16}};
  std::vector<Input> inputs;
  int64_t elements = 0;
  for (int l = 0; l < layers; ++l)
    for (const Shape& s : shapes) {
      Input in;
      in.x = torch::randn({tokens, s.width}).to(s.type).requires_grad_(true);
      in.readers = s.readers;
      for (int r = 0; r < s.readers; ++r)
        in.g.push_back(torch::randn({tokens, s.width}).to(torch::kBFloat16));
      in.quantizer = std::make_unique<quant::FakeQuantizer>(
          cfg, quant::Backward::ClippedStraightThrough, quant::FakeQuantizer::Role::Input, true);
      in.quantizer->setAmax(in.x.detach().abs().max().item<float>() * 0.95f);
      elements += in.x.numel();
      inputs.push_back(std::move(in));
    }
  // Before and after: the same gradients, bit for bit (and so the same clipping).
  const std::vector<torch::Tensor> reference = step(inputs, Path::Before),
                                   got = step(inputs, Path::After);
  for (size_t i = 0; i < got.size(); ++i)
    if (!torch::equal(got[i], reference[i])) {
      std::fprintf(stderr, "before and after differ in the gradient of input %zu\n", i);
      return 1;
    }
  std::vector<double> tSft, tBefore, tAfter;
  for (int r = 0; r < reps + 1; ++r) {  // the first round warms up
    const double s = seconds([&] { step(inputs, Path::Sft); });
    const double b = seconds([&] { step(inputs, Path::Before); });
    const double a = seconds([&] { step(inputs, Path::After); });
    if (r == 0) continue;
    tSft.push_back(s), tBefore.push_back(b), tAfter.push_back(a);
  }
  const double s = median(tSft) * 1e3, b = median(tBefore) * 1e3, a = median(tAfter) * 1e3;
  std::printf("%lld layers x %lld tokens, %.1f M input elements, %d threads, %lld repetitions\n\n",
              static_cast<long long>(layers), static_cast<long long>(tokens),
              double(elements) / 1e6, torch::get_num_threads(), static_cast<long long>(reps));
  std::printf("| input path per step, forward and backward | median (ms) | over SFT's (ms) |\n");
  std::printf("|---|---|---|\n");
  std::printf("| SFT: autocast's casts | %.1f | |\n", s);
  std::printf("| QAT before: fp32 result, then the casts | %.1f | %.1f |\n", b, b - s);
  std::printf("| QAT after: BF16 result, no casts | %.1f | %.1f |\n", a, a - s);
  return 0;
}
