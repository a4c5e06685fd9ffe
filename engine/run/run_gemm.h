// The GEMM for a run's BF16 linears (model/gemm_choice.h), chosen as every command that computes
// as a run does (train, sensitivity, eval --run) chooses it, so that the same config computes the same bits.
#pragma once

#include "fp4lab/run/run_config.h"
#include "model/causal_lm.h"
#include "model/gemm_choice.h"

namespace fp4lab::train {
class ProcessGroup;
}

namespace fp4lab::run {

// For a run of `config` on the CPU: measured on the model's products at the run's micro-batch
// (forward and backward), or read from gemm-choice.json in cacheRoot(); model::linear uses it from
// now on. With a process group (collective: every rank calls it), the ranks take rank 0's choice.
model::Bf16GemmChoice chooseRunGemm(model::CausalLM& model, const RunConfig& config,
                                    train::ProcessGroup* group);

}  // namespace fp4lab::run
