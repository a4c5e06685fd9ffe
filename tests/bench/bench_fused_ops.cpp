// The fused RMSNorm, SwiGLU and rotary embedding (model/fused_ops.h) against the LibTorch
// compositions they replace (the same formulas, as Hugging Face writes them), and attention with
// fp4lab's backward against scaled_dot_product_attention, forward + backward, on a training step's
// shapes, interleaved so that drift in the machine's speed hits both alike.
//
// usage: bench_fused_ops [--model tiny|100m] [--batch B] [--seq T] [--threads N] [--reps R]
// prints a markdown table: median milliseconds per forward + backward, and the ratio.
#include <malloc.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench_common.h"
#include "model/fused_loops.h"
#include "model/fused_ops.h"

using fp4lab::bench::median;
using fp4lab::bench::seconds;

int main(int argc, char** argv) {
  std::string modelName = "tiny";
  int64_t batch = 16, seq = 256;
  int threads = 0, reps = 30;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--model")
      modelName = argv[i + 1];
    else if (flag == "--batch")
      batch = std::atoll(argv[i + 1]);
    else if (flag == "--seq")
      seq = std::atoll(argv[i + 1]);
    else if (flag == "--threads")
      threads = std::atoi(argv[i + 1]);
    else if (flag == "--reps")
      reps = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  if (threads > 0) torch::set_num_threads(threads);
  // Keep freed buffers in the heap, as the Trainer does (train/trainer.cpp), so that both sides
  // reuse memory instead of paying page faults for fresh mappings every call.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  const auto config = fp4lab::bench::benchModelConfig(modelName);
  torch::manual_seed(0);
  const int64_t d = config.hiddenSize, inter = config.intermediateSize;

  // The residual stream is fp32 (master weights under BF16 autocast); the MLP's gate and up
  // projections come out of BF16 matrix products.
  const torch::Tensor x = torch::randn({batch, seq, d}).requires_grad_(true);
  const torch::Tensor w = (1 + 0.1 * torch::randn({d})).requires_grad_(true);
  const torch::Tensor dy = torch::randn({batch, seq, d});
  const torch::Tensor g =
      torch::randn({batch, seq, inter}).to(torch::kBFloat16).requires_grad_(true);
  const torch::Tensor u =
      torch::randn({batch, seq, inter}).to(torch::kBFloat16).requires_grad_(true);
  const torch::Tensor dh = torch::randn({batch, seq, inter}).to(torch::kBFloat16);
  // Queries as q_proj makes them under autocast, [batch, seq, heads, head_dim] in BF16, with the
  // model's fp32 cos/sin; the result goes to attention in BF16 (which the composition reaches by
  // the cast attention's autocast would make).
  const int64_t heads = config.numAttentionHeads, headDim = config.headDim;
  const torch::Tensor q =
      torch::randn({batch, seq, heads, headDim}).to(torch::kBFloat16).requires_grad_(true);
  const torch::Tensor angles = torch::randn({seq, headDim});
  const torch::Tensor cos = angles.cos(), sin = angles.sin();
  const torch::Tensor dq = torch::randn({batch, seq, heads, headDim}).to(torch::kBFloat16);
  // Causal grouped-query attention on the projections' transposed [batch, heads, seq, head_dim]
  // views, in BF16 as under autocast; "LibTorch ops" is scaled_dot_product_attention.
  const int64_t kvHeads = config.numKeyValueHeads;
  const auto projection = [&](int64_t n) {
    return torch::randn({batch, seq, n, headDim})
        .to(torch::kBFloat16)
        .transpose(1, 2)
        .detach()
        .requires_grad_(true);
  };
  const torch::Tensor aq = projection(heads), ak = projection(kvHeads), av = projection(kvHeads);
  const torch::Tensor dAttended = torch::randn({batch, heads, seq, headDim}).to(torch::kBFloat16);

  struct Case {
    const char* op;
    const char* impl;
    std::function<void()> run;
    std::vector<double> times;
  };
  using fp4lab::model::rmsNorm;
  using fp4lab::model::rmsNormComposed;
  using fp4lab::model::rotary;
  using fp4lab::model::rotaryComposed;
  using fp4lab::model::swiglu;
  using fp4lab::model::swigluComposed;
  std::vector<Case> cases = {
      {"RMSNorm fp32", "fused", [&] { rmsNorm(x, w, 1e-5).backward(dy); }, {}},
      {"RMSNorm fp32", "LibTorch ops", [&] { rmsNormComposed(x, w, 1e-5).backward(dy); }, {}},
      {"SwiGLU bf16", "fused", [&] { swiglu(g, u).backward(dh); }, {}},
      {"SwiGLU bf16", "LibTorch ops", [&] { swigluComposed(g, u).backward(dh); }, {}},
      {"RoPE bf16", "fused", [&] { rotary(q, cos, sin, torch::kBFloat16).backward(dq); }, {}},
      {"RoPE bf16",
       "LibTorch ops",
       [&] { rotaryComposed(q, cos, sin, torch::kBFloat16).backward(dq); },
       {}},
      {"causal attention bf16",
       "fp4lab backward",
       [&] { fp4lab::model::attention(aq, ak, av, std::nullopt, true).backward(dAttended); },
       {}},
      {"causal attention bf16",
       "LibTorch SDPA",
       [&] {
         torch::scaled_dot_product_attention(aq, ak, av, {}, 0.0, true, std::nullopt,
                                             heads != kvHeads)
             .backward(dAttended);
       },
       {}},
  };
  for (int rep = 0; rep < reps + 3; ++rep) {
    for (Case& c : cases) {
      x.mutable_grad() = torch::Tensor();
      w.mutable_grad() = torch::Tensor();
      g.mutable_grad() = torch::Tensor();
      u.mutable_grad() = torch::Tensor();
      q.mutable_grad() = torch::Tensor();
      for (const torch::Tensor& t : {aq, ak, av}) t.mutable_grad() = torch::Tensor();
      const double s = seconds(c.run);
      if (rep >= 3) c.times.push_back(s);  // 3 warm-up rounds
    }
  }
  std::printf("%s shapes, batch %lld x seq %lld, %d threads, fused loops: %s, median of %d\n\n",
              modelName.c_str(), static_cast<long long>(batch), static_cast<long long>(seq),
              torch::get_num_threads(), fp4lab::model::fused::isaName(), reps);
  std::printf("| op (forward + backward) | fp4lab (ms) | LibTorch (ms) | speedup |\n");
  std::printf("|---|---|---|---|\n");
  for (size_t i = 0; i + 1 < cases.size(); i += 2) {
    const double fused = median(cases[i].times) * 1e3, composed = median(cases[i + 1].times) * 1e3;
    std::printf("| %s | %.2f | %.2f | %.2fx |\n", cases[i].op, fused, composed, composed / fused);
  }
  return 0;
}
