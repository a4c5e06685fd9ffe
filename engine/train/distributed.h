// Data parallelism over PyTorch's own distributed engine (c10d): a TCPStore rendezvous, and a
// ProcessGroupGloo for runs on the CPU or a ProcessGroupNCCL for runs on CUDA GPUs. The training
// loop (trainer.cpp) and the runner use it; a run of one process never creates one. Every call is a
// collective: each rank must make the same calls in the same order. A peer that dies or stops
// answering makes the call throw fp4lab::Error (at once when its sockets close, else after the
// timeout), never hang.
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
  bool localWorldGiven =
      false;  // LOCAL_WORLD_SIZE was set (else localWorld is a guess: WORLD_SIZE)
  std::string masterAddr = "127.0.0.1";
  int masterPort = 29500;
};
DistEnvironment distEnvironment();

class ProcessGroup {
 public:
  // Joins the group: a TCPStore (rank 0 serves it at MASTER_ADDR:MASTER_PORT), then every rank
  // announces itself; after `timeoutSeconds` without every rank, throws an Error naming the
  // ranks that never joined. The same timeout bounds every collective afterwards.
  // `device` picks the backend: Gloo for the CPU, NCCL for a CUDA device (this rank's GPU, made
  // current by resolveDevice); NCCL needs a CUDA build of LibTorch.
  static std::unique_ptr<ProcessGroup> join(const DistEnvironment& env, double timeoutSeconds,
                                            torch::Device device = torch::kCPU);
  ~ProcessGroup();

  int rank() const;
  int world() const;

  // Rank 0's values, in place, on every rank.
  void broadcast(std::vector<torch::Tensor>& tensors);
  // In place: the elementwise sum / max over the ranks (under NCCL, a CPU tensor goes through
  // the GPU and back).
  void allReduceSum(torch::Tensor& tensor);
  void allReduceMax(torch::Tensor& tensor);
  // Every rank's `bytes`, in rank order, on every rank: small payloads (the graded task answers of
  // a sharded evaluation). Two all-reduces: the lengths, then the bytes, each from its one rank.
  std::vector<std::string> allGather(const std::string& bytes);
  static constexpr int64_t kBucketBytes = 8 << 20;

 private:
  friend class GradientAverager;
  struct Impl;
  explicit ProcessGroup(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m;
};

// Averages the gradients of `parameters` over the ranks, overlapped with the backward pass as
// DDP does: the parameters are split into buckets of at most ProcessGroup::kBucketBytes (in
// reverse order, the order the backward produces their gradients), and a hook on each parameter
// copies its finished gradient (plus what earlier micro-batches accumulated) into its bucket's
// flat buffer; a bucket whose gradients are all in is all-reduced at once, asynchronously, while
// the backward goes on. Buckets start in index order on every rank, so the collectives match.
// A parameter the backward does not reach holds back its bucket, and so every later one, until
// finish() (as in DDP without find_unused_parameters; fp4lab's models use every trainable
// parameter). Usage per optimizer step: arm() just before the step's last backward(), then
// finish(). With
// nothing armed (or a last micro-batch without loss tokens, which runs no backward), finish()
// launches every bucket itself: the same averages, not overlapped.
class GradientAverager {
 public:
  GradientAverager(ProcessGroup& group, std::vector<torch::Tensor> parameters);
  ~GradientAverager();  // removes the hooks
  GradientAverager(const GradientAverager&) = delete;
  GradientAverager& operator=(const GradientAverager&) = delete;

  void arm();
  // Launches the buckets the backward did not complete, waits for every all-reduce and writes
  // the averages into the gradients (an absent gradient counts as zeros). Returns the seconds it
  // took: the all-reduce time the backward did not hide. Throws fp4lab::Error if a peer failed.
  double finish();
  // Buckets the last finish() found already launched by the backward (for the tests/benchmark).
  int overlappedBuckets() const;
  int buckets() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> m;
};

// FNV-1a over the bytes of every tensor, in order: identical on two ranks iff their values are
// bit for bit the same (for the tests' weight checks).
std::string tensorDigest(const std::vector<torch::Tensor>& tensors);

}  // namespace fp4lab::train
