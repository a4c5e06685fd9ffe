// One intra-op thread for the model tests: their tensors are tiny, and on a shared 2-core
// machine torch's second OpenMP thread only spins waiting for a core (10x slower under load).
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <torch/torch.h>

#include <catch2/catch.hpp>

namespace {

struct SingleThreadListener : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testRunStarting(const Catch::TestRunInfo&) override { torch::set_num_threads(1); }
};

}  // namespace

CATCH_REGISTER_LISTENER(SingleThreadListener)
