// ProcessGroup's collectives on a real 2-rank Gloo group, the two ranks as two threads of this
// process (each its own TCPStore client, rank 0 serving it): allGather hands every rank every
// rank's bytes in rank order, whatever they hold (empty, NULs, high bytes, a large payload).
// cli_distributed_quant uses it end to end (the task answers of a sharded evaluation).
#include <torch/torch.h>
// After LibTorch, whose logging header defines its own CHECK.
#include <catch2/catch.hpp>

#include <future>
#include <random>
#include <string>
#include <vector>

#include "local_port.h"
#include "train/distributed.h"

using namespace fp4lab;

namespace {

std::string randomBytes(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = char(rng() & 0xFF);
  return s;
}

}  // namespace

TEST_CASE("process group: allGather gives every rank every rank's bytes", "[train][distributed]") {
  const int port = freePort();
  const std::vector<std::vector<std::string>> rounds = {
      {"", std::string("a\0b\xff", 4)},
      {randomBytes(200000, 1), ""},
      {"", ""},
      {"rank zero", randomBytes(1000, 2)},
  };
  auto rank = [&](int r) {
    train::DistEnvironment env;
    env.rank = r, env.world = 2, env.localRank = r, env.localWorld = 2;
    env.masterPort = port;
    std::unique_ptr<train::ProcessGroup> group = train::ProcessGroup::join(env, 30);
    std::vector<std::vector<std::string>> got;
    for (const auto& payloads : rounds) got.push_back(group->allGather(payloads[size_t(r)]));
    return got;
  };
  auto zero = std::async(std::launch::async, rank, 0);
  auto one = std::async(std::launch::async, rank, 1);
  const auto got0 = zero.get(), got1 = one.get();
  for (size_t i = 0; i < rounds.size(); ++i) {
    INFO("round " << i);
    CHECK(got0[i] == rounds[i]);
    CHECK(got1[i] == rounds[i]);
  }
}
