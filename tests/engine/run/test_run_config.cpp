// RunConfig: YAML and overrides set the right fields, unknown keys and wrong types are refused by
// name, and the resolved YAML reads back to the same configuration.
#include <catch2/catch.hpp>

#include <string>

#include "fp4lab/error.h"
#include "fp4lab/run/run_config.h"

using fp4lab::Error;
using fp4lab::run::RunConfig;

namespace {
std::string messageOf(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    RunConfig::fromYamlText(yaml, overrides, "x.yaml");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("YAML sections and overrides set fields", "[run][config]") {
  RunConfig c = RunConfig::fromYamlText(
      "run:\n  name: demo\n  seed: 7\noptim:\n  lr: 2.0e-5\ntrain:\n  max_steps: 30\n",
      {"optim.lr=1e-4", "data.pack=false", "train.batch_size=3"}, "x.yaml");
  CHECK(c.name == "demo");
  CHECK(c.seed == 7);
  CHECK(c.lr == Approx(1e-4));  // the override wins
  CHECK(c.maxSteps == 30);
  CHECK_FALSE(c.pack);
  CHECK(c.batchSize == 3);
  CHECK(c.beta2 == Approx(0.95));  // untouched default
}

TEST_CASE("Resolved YAML reads back identically", "[run][config]") {
  RunConfig c = RunConfig::fromYamlText(
      "", {"optim.lr=0.000123456789", "run.name=x", "data.validation=v.jsonl"});
  RunConfig back = RunConfig::fromYamlText(c.toYaml());
  CHECK(back.flatten() == c.flatten());
  CHECK(back.lr == c.lr);
}

TEST_CASE("Unknown keys, wrong types and bad values are refused with the key's name",
          "[run][config]") {
  CHECK(messageOf("optim:\n  lrr: 1\n").find("unknown key 'optim.lrr'") != std::string::npos);
  CHECK(messageOf("optim:\n  lrr: 1\n").find("did you mean 'optim.lr'") != std::string::npos);
  CHECK(messageOf("optim:\n  lrr: 1\n").find("x.yaml:2") != std::string::npos);
  CHECK(messageOf("bogus:\n  a: 1\n").find("unknown key 'bogus'") != std::string::npos);
  CHECK(messageOf("train:\n  max_steps: ten\n").find("'train.max_steps' must be a integer") !=
        std::string::npos);
  CHECK(messageOf("train:\n  max_steps: [1, 2]\n").find("not a list") != std::string::npos);
  CHECK(messageOf("", {"optim.lr=-1"}).find("optim.lr") != std::string::npos);
  CHECK(messageOf("", {"nokey"}).find("not key=value") != std::string::npos);
  CHECK(messageOf("", {"train.batchsize=2"}).find("did you mean 'train.batch_size'") !=
        std::string::npos);
  CHECK(messageOf("run: [unclosed\n").find("invalid YAML") != std::string::npos);
  CHECK(messageOf("", {"model.compute_dtype=fp16"}).find("bf16 or fp32") != std::string::npos);
}
