// c10d's ProcessGroupNCCL. Its header compiles only under USE_C10D_NCCL, with NCCL's and CUDA's
// headers: defined here (not on the command line, so the engine's precompiled torch header stays
// valid), and only in a CUDA build of LibTorch (FP4LAB_TORCH_CUDA, engine/CMakeLists.txt).
#include "train/nccl_backend.h"

#ifdef FP4LAB_TORCH_CUDA
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL 1
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "fp4lab/error.h"

namespace fp4lab::train {

c10::intrusive_ptr<c10d::Backend> makeNcclBackend(const c10::intrusive_ptr<c10d::Store>& store,
                                                  int rank, int world,
                                                  std::chrono::milliseconds timeout) {
#ifdef FP4LAB_TORCH_CUDA
  auto options = c10d::ProcessGroupNCCL::Options::create();
  // NCCL's watchdog aborts the whole process when a collective outlives this, counted from its
  // start; fp4lab's own wait must fail first, so that this rank reports the error and the run is
  // marked failed. A gradient bucket starts during the backward and is waited for `timeout` from
  // the backward's end: twice the timeout and a minute covers any backward up to the timeout.
  options->timeout = 2 * timeout + std::chrono::seconds(60);
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world, options);
#else
  (void)store, (void)rank, (void)world, (void)timeout;
  throw Error(
      "data-parallel training on GPUs needs NCCL, and this fp4lab's LibTorch is not a "
      "CUDA build",
      "train.device", "install the CUDA build of the torch wheel, or train on the CPU");
#endif
}

}  // namespace fp4lab::train
