#include "run/run_gemm.h"

#include <cstdlib>
#include <iomanip>
#include <sstream>

#include "fp4lab/run/model.h"
#include "train/distributed.h"

namespace fp4lab::run {

model::Bf16GemmChoice chooseRunGemm(model::CausalLM& m, const RunConfig& config,
                                    train::ProcessGroup* group) {
  model::GemmChoiceOptions options;
  options.cacheFile = cacheRoot() + "/gemm-choice.json";
  const int world = group ? group->world() : 1;
  const std::vector<model::GemmShape> shapes =
      m->gemmShapes(int64_t(config.batchSize / world) * config.seqLen);
  model::Bf16GemmChoice choice;
  if (!group || group->rank() == 0) choice = model::chooseBf16Gemm(shapes, options);
  if (!group) return choice;
  std::ostringstream out;
  out << std::setprecision(17) << int(choice.gemm) << ' ' << choice.libTorchSeconds << ' '
      << choice.fp32Seconds << ' ' << choice.threads << ' ' << choice.source;
  std::istringstream in(group->allGather(group->rank() == 0 ? out.str() : std::string())[0]);
  // (strtod, not >>: a forced choice's timings are NaN.)
  std::string gemm, bf16Seconds, fp32Seconds;
  in >> gemm >> bf16Seconds >> fp32Seconds >> choice.threads >> std::ws;
  std::getline(in, choice.source);
  choice.gemm = gemm == "1" ? model::Bf16Gemm::Fp32 : model::Bf16Gemm::LibTorch;
  choice.libTorchSeconds = std::strtod(bf16Seconds.c_str(), nullptr);
  choice.fp32Seconds = std::strtod(fp32Seconds.c_str(), nullptr);
  if (group->rank() != 0) choice.source += " on rank 0";
  model::setBf16Gemm(choice.gemm);
  return choice;
}

}  // namespace fp4lab::run
