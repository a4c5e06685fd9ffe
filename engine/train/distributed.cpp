// c10d behind a small interface: the only file that includes c10d's headers (and, through
// ProcessGroupGloo.hpp, the Gloo headers in third_party/gloo). The wheel builds c10d with Gloo;
// its headers expose ProcessGroupGloo only under USE_C10D_GLOO, defined here rather than on the
// command line so the engine's precompiled torch header stays valid for this file.
#include "train/distributed.h"

#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

#include "fp4lab/error.h"
#include "train/nccl_backend.h"

namespace fp4lab::train {
namespace {

using Clock = std::chrono::steady_clock;

int envInt(const char* name, int fallback, int min, int max) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v, &end, 10);
  if (errno || *end || x < min || x > max)
    throw Error(std::string(name) + "='" + v + "' is not an integer in [" + std::to_string(min) +
                    ", " + std::to_string(max) + "]",
                "the environment", "the launcher (torchrun, fp4lab train --nproc) sets it");
  return int(x);
}

// c10d's messages carry a C++ backtrace; keep the first line.
std::string shortMessage(const std::exception& e) {
  const auto* c10 = dynamic_cast<const c10::Error*>(&e);
  std::string s = c10 ? c10->what_without_backtrace() : e.what();
  const size_t nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

}  // namespace

DistEnvironment distEnvironment() {
  DistEnvironment env;
  env.world = envInt("WORLD_SIZE", 1, 1, 1 << 20);
  env.rank = envInt("RANK", 0, 0, env.world - 1);
  env.localWorld = envInt("LOCAL_WORLD_SIZE", env.world, 1, env.world);
  if (const char* v = std::getenv("LOCAL_WORLD_SIZE")) env.localWorldGiven = *v != 0;
  env.localRank = envInt("LOCAL_RANK", env.rank % env.localWorld, 0, env.localWorld - 1);
  if (const char* a = std::getenv("MASTER_ADDR"); a && *a) env.masterAddr = a;
  env.masterPort = envInt("MASTER_PORT", 29500, 1, 65535);
  if (env.world > 1 && !std::getenv("RANK"))
    throw Error("WORLD_SIZE is " + std::to_string(env.world) + " but RANK is not set",
                "the environment", "set RANK (and MASTER_ADDR, MASTER_PORT) for every process");
  return env;
}

struct ProcessGroup::Impl {
  DistEnvironment env;
  std::chrono::milliseconds timeout{0};
  torch::Device device = torch::kCPU;
  c10::intrusive_ptr<c10d::TCPStore> store;
  c10::intrusive_ptr<c10d::Backend> backend;

  const char* backendName() const { return device.is_cuda() ? "NCCL" : "Gloo"; }
  // One tensor's collective. NCCL reduces CUDA tensors only: a CPU tensor (the stop flag, the
  // calibrated amaxes) goes through this rank's GPU and back.
  void runOn(torch::Tensor& tensor, const char* what,
             const std::function<c10::intrusive_ptr<c10d::Work>(std::vector<at::Tensor>&)>& start) {
    const bool staged = device.is_cuda() && !tensor.is_cuda();
    std::vector<at::Tensor> one{staged ? tensor.to(device) : tensor};
    run(what, [&] { return start(one); });
    if (staged) tensor.copy_(one[0]);  // waits for the device
  }

  // Runs one collective to completion; a failure (a peer gone, a timeout) becomes an Error.
  void run(const char* what, const std::function<c10::intrusive_ptr<c10d::Work>()>& start) {
    try {
      c10::intrusive_ptr<c10d::Work> work = start();
      work->wait(timeout);
    } catch (const std::exception& e) {
      fail(what, e);
    }
  }
  [[noreturn]] void fail(const char* what, const std::exception& e) const {
    throw Error("rank " + std::to_string(env.rank) + " of " + std::to_string(env.world) + ": " +
                    what + " failed: " + shortMessage(e),
                "the process group (" + std::string(backendName()) + ", " + env.masterAddr + ":" +
                    std::to_string(env.masterPort) + ")",
                "another rank stopped (crashed, was killed, or failed: see its output) or did not "
                "answer within dist.timeout_s; the last complete checkpoint is intact, resume "
                "with --resume-from-checkpoint latest");
  }
};

ProcessGroup::ProcessGroup(std::unique_ptr<Impl> impl) : m(std::move(impl)) {}
ProcessGroup::~ProcessGroup() {
  if (!m || !m->backend || !m->device.is_cuda()) return;  // Gloo needs nothing at the end
  // NCCL: abort the communicators, which never waits for a peer. A graceful shutdown() waits for
  // every rank to shut down too, and hangs when one failed after the last collective (rank 0's
  // disk full while saving model/, say); at this point every collective has completed or failed.
  try {
    m->backend->abort();
  } catch (const std::exception&) {
    // The process is ending; c10d has logged what went wrong.
  }
}
int ProcessGroup::rank() const {
  return m->env.rank;
}
int ProcessGroup::world() const {
  return m->env.world;
}

std::unique_ptr<ProcessGroup> ProcessGroup::join(const DistEnvironment& env, double timeoutSeconds,
                                                 torch::Device device) {
  auto impl = std::make_unique<Impl>();
  impl->env = env;
  impl->device = device;
  impl->timeout = std::chrono::milliseconds(int64_t(timeoutSeconds * 1000));
  const std::string where =
      "the rendezvous (TCPStore at " + env.masterAddr + ":" + std::to_string(env.masterPort) + ")";
  const std::string world = std::to_string(env.world);
  c10d::TCPStoreOptions options;
  options.port = uint16_t(env.masterPort);
  options.isServer = env.rank == 0;
  options.waitWorkers = false;  // the joined/<rank> keys below say who is missing
  options.timeout = impl->timeout;
  try {
    impl->store = c10::make_intrusive<c10d::TCPStore>(env.masterAddr, options);
  } catch (const std::exception& e) {
    if (env.rank == 0)
      throw Error("rank 0 cannot serve the rendezvous: " + shortMessage(e), where,
                  "choose a free MASTER_PORT");
    throw Error("rank 0 never showed up: rank " + std::to_string(env.rank) + " of " + world +
                    " could not reach its TCPStore within " +
                    std::to_string(int64_t(timeoutSeconds)) + " s (" + shortMessage(e) + ")",
                where,
                "start rank 0 with the same MASTER_ADDR and MASTER_PORT, or raise dist.timeout_s");
  }
  // Every rank announces itself, then waits for all the others (polling, so that a timeout can
  // say which ones never came).
  auto key = [](int r) { return "fp4lab/joined/" + std::to_string(r); };
  std::vector<int> missing;
  try {
    impl->store->set(key(env.rank), std::vector<uint8_t>{'1'});
    const auto deadline = Clock::now() + impl->timeout;
    for (;;) {
      missing.clear();
      for (int r = 0; r < env.world; ++r)
        if (!impl->store->check({key(r)})) missing.push_back(r);
      if (missing.empty() || Clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  } catch (const std::exception& e) {
    throw Error("rank " + std::to_string(env.rank) +
                    " lost the rendezvous server (rank 0): " + shortMessage(e),
                where, "see rank 0's output");
  }
  if (!missing.empty()) {
    std::ostringstream names;
    for (size_t i = 0; i < missing.size(); ++i) names << (i ? ", " : "") << missing[i];
    throw Error("the rendezvous timed out after " + std::to_string(int64_t(timeoutSeconds)) +
                    " s: rank" + (missing.size() > 1 ? "s " : " ") + names.str() + " of " + world +
                    " never joined",
                where,
                "start every rank with WORLD_SIZE=" + world +
                    " and the same MASTER_ADDR/MASTER_PORT, or raise dist.timeout_s");
  }
  if (device.is_cuda()) {
    try {
      impl->backend = makeNcclBackend(impl->store, env.rank, env.world, impl->timeout);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      impl->fail("connecting the NCCL process group", e);
    }
    return std::unique_ptr<ProcessGroup>(new ProcessGroup(std::move(impl)));
  }
  try {
    auto gloo = c10d::ProcessGroupGloo::Options::create(impl->timeout);
    const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
    const bool loopback = env.masterAddr == "localhost" || env.masterAddr.rfind("127.", 0) == 0;
    gloo->devices.push_back(
        ifname && *ifname ? c10d::ProcessGroupGloo::createDeviceForInterface(ifname)
        : loopback        ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                          : c10d::ProcessGroupGloo::createDefaultDevice());
    gloo->threads = 2;
    impl->backend =
        c10::make_intrusive<c10d::ProcessGroupGloo>(impl->store, env.rank, env.world, gloo);
  } catch (const std::exception& e) {
    impl->fail("connecting the Gloo process group", e);
  }
  return std::unique_ptr<ProcessGroup>(new ProcessGroup(std::move(impl)));
}

void ProcessGroup::broadcast(std::vector<torch::Tensor>& tensors) {
  for (auto& t : tensors)
    m->runOn(t, "broadcasting rank 0's weights",
             [&](std::vector<at::Tensor>& one) { return m->backend->broadcast(one); });
}

void ProcessGroup::allReduceSum(torch::Tensor& tensor) {
  m->runOn(tensor, "an all-reduce",
           [&](std::vector<at::Tensor>& one) { return m->backend->allreduce(one); });
}

void ProcessGroup::allReduceMax(torch::Tensor& tensor) {
  c10d::AllreduceOptions o;
  o.reduceOp = c10d::ReduceOp::MAX;
  m->runOn(tensor, "an all-reduce (max)",
           [&](std::vector<at::Tensor>& one) { return m->backend->allreduce(one, o); });
}

std::vector<std::string> ProcessGroup::allGather(const std::string& bytes) {
  const int world = m->env.world;
  torch::Tensor lengths = torch::zeros({world}, torch::kLong);
  lengths.data_ptr<int64_t>()[m->env.rank] = int64_t(bytes.size());
  allReduceSum(lengths);
  std::vector<int64_t> offsets(size_t(world) + 1, 0);
  for (int r = 0; r < world; ++r)
    offsets[size_t(r) + 1] = offsets[size_t(r)] + lengths[r].item<int64_t>();
  torch::Tensor all = torch::zeros({std::max<int64_t>(1, offsets.back())}, torch::kByte);
  if (!bytes.empty())
    std::memcpy(all.data_ptr<uint8_t>() + offsets[size_t(m->env.rank)], bytes.data(), bytes.size());
  allReduceSum(all);  // every byte is one rank's; the others add zeros
  const auto* p = reinterpret_cast<const char*>(all.data_ptr<uint8_t>());
  std::vector<std::string> out;
  for (int r = 0; r < world; ++r)
    out.emplace_back(p + offsets[size_t(r)], p + offsets[size_t(r) + 1]);
  return out;
}

struct GradientAverager::Impl {
  ProcessGroup::Impl* group = nullptr;
  std::vector<torch::Tensor> parameters;
  struct Bucket {
    std::vector<size_t> members;   // parameter indices
    std::vector<int64_t> offsets;  // of each member in `flat`
    torch::Tensor flat;
    size_t ready = 0;
    c10::intrusive_ptr<c10d::Work> work;
  };
  std::vector<Bucket> buckets;
  std::vector<size_t> bucketOf, slotOf;  // per parameter: its bucket and its place in it
  std::vector<char> done;                // per parameter: its gradient is in its bucket
  std::vector<unsigned> hooks;
  size_t nextLaunch = 0;
  bool armed = false;
  int overlapped = 0;

  void launch(Bucket& b) {
    std::vector<at::Tensor> one{b.flat};
    try {
      b.work = group->backend->allreduce(one);
    } catch (const std::exception& e) {
      group->fail("the gradient all-reduce", e);
    }
  }
  // Starts the buckets whose gradients are all in, in index order.
  void launchReady() {
    while (nextLaunch < buckets.size() &&
           buckets[nextLaunch].ready == buckets[nextLaunch].members.size())
      launch(buckets[nextLaunch++]);
  }
  torch::Tensor slice(size_t i) {
    const Bucket& b = buckets[bucketOf[i]];
    const int64_t offset = b.offsets[slotOf[i]];
    return b.flat.slice(0, offset, offset + parameters[i].numel());
  }
  void onGradient(size_t i, const torch::Tensor& grad) {
    if (!armed) return;
    if (done[i])
      throw Error(
          "the gradient of parameter " + std::to_string(i) + " arrived twice in one backward pass",
          "the data-parallel gradient average", "this is a bug in fp4lab: report it");
    torch::NoGradGuard noGrad;
    const torch::Tensor& p = parameters[i];
    torch::Tensor g = p.grad().defined() ? p.grad() + grad : grad;
    slice(i).copy_(g.reshape({-1}));
    done[i] = 1;
    ++buckets[bucketOf[i]].ready;
    launchReady();
  }
};

GradientAverager::GradientAverager(ProcessGroup& group, std::vector<torch::Tensor> parameters)
    : m(std::make_unique<Impl>()) {
  m->group = group.m.get();
  m->parameters = std::move(parameters);
  const size_t n = m->parameters.size();
  m->bucketOf.assign(n, 0);
  m->slotOf.assign(n, 0);
  m->done.assign(n, 0);
  // Buckets of consecutive parameters of one dtype, from the last parameter back.
  int64_t bytes = 0;
  for (size_t k = n; k-- > 0;) {
    const auto& p = m->parameters[k];
    const int64_t b = p.numel() * int64_t(p.element_size());
    if (m->buckets.empty() || bytes + b > ProcessGroup::kBucketBytes ||
        m->parameters[m->buckets.back().members.front()].scalar_type() != p.scalar_type()) {
      m->buckets.emplace_back();
      bytes = 0;
    }
    auto& bucket = m->buckets.back();
    m->bucketOf[k] = m->buckets.size() - 1;
    m->slotOf[k] = bucket.members.size();
    bucket.offsets.push_back(bucket.members.empty()
                                 ? 0
                                 : bucket.offsets.back() +
                                       m->parameters[bucket.members.back()].numel());
    bucket.members.push_back(k);
    bytes += b;
  }
  for (auto& bucket : m->buckets) {
    const auto& last = m->parameters[bucket.members.back()];
    bucket.flat = torch::empty({bucket.offsets.back() + last.numel()},
                               torch::TensorOptions(last.scalar_type()).device(last.device()));
  }
  Impl* impl = m.get();
  for (size_t i = 0; i < n; ++i)
    m->hooks.push_back(m->parameters[i].register_hook(
        [impl, i](const torch::Tensor& grad) { impl->onGradient(i, grad); }));
}

GradientAverager::~GradientAverager() {
  for (size_t i = 0; i < m->hooks.size(); ++i) m->parameters[i].remove_hook(m->hooks[i]);
}

void GradientAverager::arm() {
  m->armed = true;
}

double GradientAverager::finish() {
  torch::NoGradGuard noGrad;
  m->armed = false;
  const auto started = Clock::now();
  m->overlapped = int(m->nextLaunch);
  for (size_t k = m->nextLaunch; k < m->buckets.size(); ++k) {
    auto& b = m->buckets[k];
    for (size_t i : b.members)
      if (!m->done[i]) {
        const auto& p = m->parameters[i];
        if (p.grad().defined())
          m->slice(i).copy_(p.grad().reshape({-1}));
        else
          m->slice(i).zero_();
      }
    m->launch(b);
  }
  const double scale = 1.0 / double(m->group->env.world);
  // One deadline for all the buckets: the step's gradients are late by at most the timeout.
  const auto deadline = Clock::now() + m->group->timeout;
  try {
    for (auto& b : m->buckets) {
      b.work->wait(
          std::max(std::chrono::milliseconds(1),
                   std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now())));
      b.work.reset();
      b.flat.mul_(scale);
      for (size_t slot = 0; slot < b.members.size(); ++slot) {
        auto p = m->parameters[b.members[slot]];
        const int64_t offset = b.offsets[slot];
        torch::Tensor avg = b.flat.slice(0, offset, offset + p.numel()).view(p.sizes());
        if (p.grad().defined())
          p.mutable_grad().copy_(avg);
        else
          p.mutable_grad() = avg.clone();
      }
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    m->group->fail("the gradient all-reduce", e);
  }
  // Ready for the next step, armed or not (a step whose last micro-batch has no loss tokens runs
  // no backward and is never armed).
  std::fill(m->done.begin(), m->done.end(), 0);
  for (auto& b : m->buckets) b.ready = 0;
  m->nextLaunch = 0;
  return std::chrono::duration<double>(Clock::now() - started).count();
}

int GradientAverager::overlappedBuckets() const {
  return m->overlapped;
}

int GradientAverager::buckets() const {
  return int(m->buckets.size());
}

std::string tensorDigest(const std::vector<torch::Tensor>& tensors) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const auto& t : tensors) {
    torch::Tensor c = t.detach().to(torch::kCPU).contiguous();
    const auto* p = static_cast<const unsigned char*>(c.data_ptr());
    const size_t n = size_t(c.numel()) * c.element_size();
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace fp4lab::train
