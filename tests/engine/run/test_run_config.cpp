// RunConfig: YAML and overrides set the right fields, unknown keys and wrong types are refused by
// name, and the resolved YAML reads back to the same configuration.
#include <catch2/catch.hpp>
#include <cstdio>
#include <random>
#include <cstring>

#include <filesystem>
#include <string>

#include "../temp_dir.h"

#include "fp4lab/error.h"
#include "fp4lab/run/config_keys.h"
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

TEST_CASE("Numbers are written as the shortest text that reads back as the same double",
          "[run][config]") {
  // yaml-cpp alone writes 17 digits (0.050000000000000003); run.yaml, the key table and the
  // window show the shortest round-trip text, in %g's choice of fixed or exponent form.
  const RunConfig defaults = RunConfig::fromYamlText("");
  const std::string yaml = defaults.toYaml();
  for (const char* line : {"validation_fraction: 0.05\n", "beta2: 0.95\n", "lr: 0.001\n",
                           "warmup_ratio: 0.03\n", "eps: 1e-08\n"}) {
    INFO(line << " in\n" << yaml);
    CHECK(yaml.find(line) != std::string::npos);
  }
  // Every double reads back bit for bit: sums that are not their decimal, 17-digit values,
  // subnormals, the extremes of the key's range.
  std::mt19937_64 rng(11);
  std::vector<double> values = {
      0.1 + 0.2, 1.0 / 3.0, 5e-324,        2.2250738585072014e-308, 9.999999999999999e-05,
      1e-4,      0.0,       123456.789e-10};
  for (int i = 0; i < 2000; ++i) {
    double v;
    uint64_t bits = rng() & 0x3FEFFFFFFFFFFFFFull;  // positive, below 1: in [0, 1)
    std::memcpy(&v, &bits, sizeof v);
    values.push_back(v);
  }
  for (double v : values) {
    char text[40];
    std::snprintf(text, sizeof text, "%.17g", v);
    const RunConfig c = RunConfig::fromYamlText("", {std::string("optim.beta1=") + text});
    REQUIRE(c.beta1 == v);
    const RunConfig back = RunConfig::fromYamlText(c.toYaml());
    INFO(text);
    CHECK(std::memcmp(&back.beta1, &v, sizeof v) == 0);
    CHECK(back.flatten() == c.flatten());
  }
}

TEST_CASE("Unknown keys, wrong types and bad values are refused with the key's name",
          "[run][config]") {
  CHECK(messageOf("optim:\n  lrr: 1\n").find("unknown key 'optim.lrr'") != std::string::npos);
  CHECK(messageOf("optim:\n  lrr: 1\n").find("did you mean 'optim.lr'") != std::string::npos);
  CHECK(messageOf("optim:\n  lrr: 1\n").find("x.yaml:2") != std::string::npos);
  CHECK(messageOf("bogus:\n  a: 1\n").find("unknown key 'bogus'") != std::string::npos);
  CHECK(messageOf("train:\n  max_steps: ten\n")
            .find("x.yaml:2: 'train.max_steps' must be an integer, not 'ten'") !=
        std::string::npos);
  CHECK(messageOf("train:\n  max_steps: [1, 2]\n").find("not a list") != std::string::npos);
  CHECK(messageOf("", {"optim.lr=-1"}).find("optim.lr") != std::string::npos);
  CHECK(messageOf("", {"nokey"}).find("not key=value") != std::string::npos);
  CHECK(messageOf("", {"train.batchsize=2"}).find("did you mean 'train.batch_size'") !=
        std::string::npos);
  CHECK(messageOf("run: [unclosed\n").find("invalid YAML") != std::string::npos);
  CHECK(messageOf("", {"model.compute_dtype=fp16"}).find("bf16 or fp32") != std::string::npos);
}

TEST_CASE("Values out of bounds name the key, the file and line, and the bounds", "[run][config]") {
  CHECK(messageOf("train:\n  batch_size: 0\n")
            .find("x.yaml:2: 'train.batch_size' must be in [1, 65536], not 0") !=
        std::string::npos);
  CHECK(messageOf("\n\noptim:\n  lr: 0\n").find("x.yaml:4: 'optim.lr' must be in (0, 10]") !=
        std::string::npos);
  CHECK(messageOf("data:\n  validation_max: -1\n").find("must be in [0, 1000000000], not -1") !=
        std::string::npos);
  CHECK(messageOf("", {"train.max_steps=1e3"}).find("must be an integer, not '1e3'") !=
        std::string::npos);
  CHECK(messageOf("", {"optim.lr=nan"}).find("must be a number") != std::string::npos);
  CHECK(messageOf("", {"run.seed=-1"}).find("'run.seed' must be at least 0") != std::string::npos);
  CHECK(messageOf("", {"data.pack=maybe"}).find("must be true or false") != std::string::npos);
  CHECK(messageOf("train:\n  max_steps:\n").find("must be an integer, not ''") !=
        std::string::npos);
  CHECK(messageOf("train: 3\n").find("x.yaml:1: 'train' is a section") != std::string::npos);
  CHECK(messageOf("? [a]\n: 1\n").find("a key must be a name") != std::string::npos);
  // Cross-key checks say where the key they name was set.
  CHECK(messageOf("recipe:\n  name: qat\n").find("run config (default value): 'quant.format'") !=
        std::string::npos);
  CHECK(messageOf("quant:\n  format: nvfp4\n").find("x.yaml:2: 'quant.format' must be none") !=
        std::string::npos);
}

TEST_CASE("The key table describes every key the parser reads", "[run][config]") {
  const auto& keys = fp4lab::run::runConfigKeys();
  const auto flat = RunConfig().flatten();
  REQUIRE(keys.size() == flat.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    CHECK(keys[i].name == flat[i].first);
    CHECK(keys[i].defaultValue == flat[i].second);
    CHECK_FALSE(keys[i].help.empty());
    // The default passes the key's own check.
    CHECK(keys[i].check(keys[i].defaultValue == "\"\"" ? "" : keys[i].defaultValue) == "");
  }
}

TEST_CASE("differingKeys compares what defines a run", "[run][config]") {
  RunConfig a = RunConfig::fromYamlText("", {"train.max_steps=10"});
  RunConfig b = RunConfig::fromYamlText("", {"train.max_steps=20", "train.threads=3"});
  CHECK(fp4lab::run::differingKeys(a, b) == std::vector<std::string>{"train.max_steps"});
  CHECK(fp4lab::run::differingKeys(a, b, true) ==
        std::vector<std::string>{"train.max_steps", "train.threads"});
  CHECK(fp4lab::run::differingKeys(a, a).empty());
  // A folder spelled two ways is one value; two folders are two.
  fp4lab::testing::TempDir dir;
  std::filesystem::create_directories(dir.path / "m");
  RunConfig p = RunConfig::fromYamlText("", {"model.path=" + (dir.path / "m").string()});
  RunConfig q = RunConfig::fromYamlText("", {"model.path=" + (dir.path / "." / "m/").string()});
  RunConfig r = RunConfig::fromYamlText("", {"model.path=" + (dir.path / "other").string()});
  CHECK(fp4lab::run::differingKeys(p, q).empty());
  CHECK(fp4lab::run::differingKeys(p, r) == std::vector<std::string>{"model.path"});
}
