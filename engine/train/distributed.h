// Data parallelism over PyTorch's own distributed engine (c10d): a TCPStore rendezvous and a
// ProcessGroupGloo for CPU tensors. The training loop (trainer.cpp) and the runner use it; a run
// of one process never creates one. Every call is a collective: each rank must make the same
// calls in the same order. A peer that dies or stops answering makes the call throw
// fp4lab::Error (at once when its sockets close, else after the timeout), never hang.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

namespace fp4lab::train {

// The standard launcher variables (torchrun's, and `fp4lab train --nproc`'s): RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT. Without WORLD_SIZE (or with 1): one
// process. Malformed values throw fp4lab::Error naming the variable.
struct DistEnvironment {
  int rank = 0, world = 1, localRank = 0, localWorld = 1;
  std::string masterAddr = "127.0.0.1";
  int masterPort = 29500;
};
DistEnvironment distEnvironment();

class ProcessGroup {
 public:
  // Joins the group: a TCPStore (rank 0 serves it at MASTER_ADDR:MASTER_PORT), then every rank
  // announces itself; after `timeoutSeconds` without every rank, throws an Error naming the
  // ranks that never joined. The same timeout bounds every collective afterwards.
  static std::unique_ptr<ProcessGroup> join(const DistEnvironment& env, double timeoutSeconds);
  ~ProcessGroup();

  int rank() const;
  int world() const;

  // Rank 0's values, in place, on every rank.
  void broadcast(std::vector<torch::Tensor>& tensors);
  // In place: the elementwise sum / max over the ranks (CPU tensors).
  void allReduceSum(torch::Tensor& tensor);
  void allReduceMax(torch::Tensor& tensor);
  // Averages the gradients of `parameters` over the ranks: flattened into buckets of at most
  // kBucketBytes, all-reduced concurrently, written back divided by the world size (an absent
  // gradient counts as zeros). Returns the seconds spent from the first launch to the last wait.
  static constexpr int64_t kBucketBytes = 8 << 20;
  double averageGradients(const std::vector<torch::Tensor>& parameters);

 private:
  struct Impl;
  explicit ProcessGroup(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m;
};

// FNV-1a over the bytes of every tensor, in order: identical on two ranks iff their values are
// bit for bit the same (for the tests' weight checks).
std::string tensorDigest(const std::vector<torch::Tensor>& tensors);

}  // namespace fp4lab::train
