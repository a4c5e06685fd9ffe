// The NCCL backend of a data-parallel run's process group (train/distributed.cpp).
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>

namespace fp4lab::train {

// A ProcessGroupNCCL over `store` for this rank's current CUDA device. Throws fp4lab::Error when
// LibTorch is not a CUDA build (then fp4lab has no NCCL), or c10d's error when NCCL fails.
c10::intrusive_ptr<c10d::Backend> makeNcclBackend(const c10::intrusive_ptr<c10d::Store>& store,
                                                  int rank, int world,
                                                  std::chrono::milliseconds timeout);

}  // namespace fp4lab::train
