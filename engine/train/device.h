// train.device on this machine: CPU, or a CUDA GPU when LibTorch is a CUDA build and sees one.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "fp4lab/run/run_config.h"

namespace fp4lab::train {

// The device a run (this rank of it) trains on: train.device=cuda is GPU LOCAL_RANK (0 for one
// process), cuda:N is GPU N (for one process per machine only: `localWorld` ranks, as the launcher
// said through LOCAL_WORLD_SIZE, cannot share it). Makes it the
// process's current CUDA device (NCCL and LibTorch's allocations follow it) and starts its peak
// memory afresh. Throws fp4lab::Error, naming the key, when this machine or this build cannot use
// it: no CUDA build of LibTorch, no GPU, an index past the last GPU, cuda:N with several local
// ranks, or a quantizing recipe without fp4lab's CUDA kernels.
torch::Device resolveDevice(const run::RunConfig& config, int localRank, int localWorld);

// Throws fp4lab::Error (`what` needs the kernels, at `where`) when `device` is a GPU and this
// fp4lab was built without its CUDA kernels: fake quantization there has nothing to run on.
void requireCudaKernels(const torch::Device& device, const std::string& what,
                        const std::string& where);

// The most memory LibTorch's caching allocator held allocated on `device` at once since
// resolveDevice chose it, in bytes; -1 for the CPU (see peakResidentBytes in common/system.h).
int64_t peakDeviceMemory(const torch::Device& device);

// "cuda:0 (NVIDIA H200)", or "cpu".
std::string describeDevice(const torch::Device& device);

}  // namespace fp4lab::train
