// train.device: choosing and describing the device a run trains on. The only file of the engine
// that includes c10's CUDA headers, and only in a CUDA build of LibTorch (FP4LAB_TORCH_CUDA).
#include "train/device.h"

#ifdef FP4LAB_TORCH_CUDA
// LibTorch's CUDA API only: no call into the CUDA runtime from here, so the executable does not
// need libcudart itself (LibTorch loads its own; the .deb would otherwise find two).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

#include "fp4lab/error.h"

namespace fp4lab::train {

void requireCudaKernels(const torch::Device& device, const std::string& what,
                        const std::string& where) {
#ifndef FP4LAB_HAVE_CUDA_KERNELS
  if (device.is_cuda())
    throw Error(what +
                    " on a GPU needs fp4lab's CUDA kernels, and this fp4lab was built without "
                    "them",
                where, "build with the cuda preset (-DFP4LAB_CUDA=ON), or train on the CPU");
#else
  (void)device, (void)what, (void)where;
#endif
}

torch::Device resolveDevice(const run::RunConfig& config, int localRank, int localWorld) {
  const std::optional<run::DeviceSpec> spec = run::parseDevice(config.device);
  const std::string where = config.originOf("train.device");
  if (!spec)
    throw Error("'train.device' must be cpu, cuda or cuda:N, not '" + config.device + "'", where,
                "e.g. train.device=cuda:0");
  if (!spec->cuda) return torch::kCPU;
  // Before looking for GPUs, so that the mistake is named on any machine: NCCL refuses two ranks
  // on one GPU, with a message that names neither the key nor the fix.
  if (spec->index >= 0 && localWorld > 1)
    throw Error("train.device is " + config.device + ", one GPU for all " +
                    std::to_string(localWorld) + " processes on this machine",
                where,
                "use train.device=cuda, which gives each process its own GPU (GPU LOCAL_RANK)");
  if (!torch::cuda::is_available())
    throw Error("train.device is " + config.device + ", but LibTorch sees no CUDA device", where,
                "check nvidia-smi and CUDA_VISIBLE_DEVICES (and that fp4lab's LibTorch is a CUDA "
                "build), or train on the CPU: train.device=cpu");
  const int count = int(torch::cuda::device_count());
  const int index = spec->index >= 0 ? spec->index : localRank;
  if (index >= count)
    throw Error("train.device is " + config.device + " (GPU " + std::to_string(index) +
                    "), but this machine has " + std::to_string(count) + " GPU" +
                    (count == 1 ? "" : "s"),
                where,
                spec->index >= 0
                    ? "use cuda:0 to cuda:" + std::to_string(count - 1)
                    : "start at most one process per GPU (--nproc, torchrun), each seeing every "
                      "GPU of the machine (CUDA_VISIBLE_DEVICES the same for all): process "
                      "LOCAL_RANK takes GPU LOCAL_RANK");
  const torch::Device device(torch::kCUDA, c10::DeviceIndex(index));
  if (config.quantFormat != "none")
    requireCudaKernels(device, "quant.format=" + config.quantFormat, where);
#ifdef FP4LAB_TORCH_CUDA
  c10::cuda::set_device(c10::DeviceIndex(index));
  // The peak the run reports is its own (`fp4lab experiment` runs many in one process).
  c10::cuda::CUDACachingAllocator::resetPeakStats(c10::DeviceIndex(index));
#endif
  return device;
}

int64_t peakDeviceMemory(const torch::Device& device) {
#ifdef FP4LAB_TORCH_CUDA
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    return stats.allocated_bytes[size_t(c10::CachingAllocator::StatType::AGGREGATE)].peak;
  }
#endif
  (void)device;
  return -1;
}

std::string describeDevice(const torch::Device& device) {
  std::string text = device.str();
#ifdef FP4LAB_TORCH_CUDA
  if (device.is_cuda())
    text += std::string(" (") + at::cuda::getDeviceProperties(device.index())->name + ")";
#endif
  return text;
}

}  // namespace fp4lab::train
