// PTQ, QAT and QAD through the one training loop: what each writes into the run folder and the
// log, that QAT resumes exactly (the calibrated amaxes travel with the checkpoint), that QAD
// brings the fake-quantized student closer to its teacher than PTQ leaves it, and that the
// recipes reject inconsistent configs by key.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>

#include "../temp_dir.h"
#include "fp4lab/log/run_log.h"
#include "fp4lab/run/runner.h"

namespace fs = std::filesystem;
using namespace fp4lab;

namespace {

struct TempDir : testing::TempDir {
  TempDir() : testing::TempDir("fp4lab-recipes-") {}
};

// scratch:tiny is the built-in architecture with random weights from run.seed: the same model for
// the same seed, so it can be its own teacher and reference.
run::RunConfig config(const std::string& recipe, const std::string& format, int64_t steps,
                      std::vector<std::string> extra = {}) {
  std::vector<std::string> o = {"model.path=scratch:tiny",
                                "data.train=builtin:sft",
                                "data.seq_len=64",
                                "train.batch_size=4",
                                "train.eval_every=5",
                                "train.eval_batches=2",
                                "train.checkpoint_every=5",
                                "optim.lr=1e-3",
                                "train.threads=1",
                                "data.validation_max=16",
                                "quant.calib_batches=2",
                                "recipe.name=" + recipe,
                                "train.max_steps=" + std::to_string(steps)};
  if (!format.empty()) o.push_back("quant.format=" + format);  // (sft refuses one)
  o.insert(o.end(), extra.begin(), extra.end());
  return run::RunConfig::fromYamlText("", o);
}

std::vector<log::EvalRow> evals(const std::string& runDir) {
  log::RunLogReader r(runDir + "/log.h5");
  return r.readEval(0, r.evalRows());
}

}  // namespace

TEST_CASE("PTQ calibrates, evaluates and saves without training", "[recipes][ptq]") {
  TempDir tmp;
  run::RunOptions o;
  o.runDir = (tmp.path / "ptq").string();
  run::RunResult r =
      run::executeRun(config("ptq", "nvfp4", 100,
                             {"eval.reference=scratch:tiny", "eval.tasks=false_refusal",
                              "eval.task_items=2", "eval.max_new_tokens=8"}),
                      o);
  CHECK(r.state == RunState::Finished);
  CHECK(r.steps == 0);
  log::RunLogReader log(o.runDir + "/log.h5");
  CHECK(log.trainRows() == 0);
  REQUIRE(log.evalRows() == 1);
  const log::RunLogSchema schema = log.schema();
  CHECK(schema.evalColumns ==
        std::vector<std::string>{"val_loss", "val_ppl", "val_kl", "pass_rate_false_refusal"});
  const log::EvalRow row = log.readEval(0, 1)[0];
  CHECK(row.step == 0);
  CHECK(row.values[2] > 0);  // the fake-quantized model differs from the BF16 one
  CHECK(std::isfinite(row.values[3]));
  CHECK(fs::exists(o.runDir + "/tasks/step-0.jsonl"));
  CHECK(log.attributes().format.find("NVFP4 W4A4") == 0);
  // 4 blocks x 7 linear layers, lm_head and embeddings excluded.
  REQUIRE(schema.quantLayers.size() == 28);
  for (const auto& name : schema.quantLayers) CHECK(name.rfind("model.layers.", 0) == 0);
  REQUIRE(log.quantRows() == 1);
  for (float v : log.readQuant("sqnr_db", 0, 1)) CHECK((v > 5 && v < 40));
  for (float v : log.readQuant("act_sqnr_db", 0, 1)) CHECK((v > 5 && v < 40));
  std::vector<float> blocks = log.readBlocks(0, 0, 1);
  CHECK(int64_t(blocks.size()) == schema.blocksPerLayer[0]);
  CHECK(std::isfinite(blocks[0]));
  // The block map's rows are the weight's rows: hidden for the projections into the residual
  // stream, intermediate for up/gate (read from the saved config, not from the code under test).
  const auto configValue = [&](const std::string& key) {
    std::ifstream in(o.runDir + "/model/config.json");
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    std::smatch m;
    REQUIRE(std::regex_search(text, m, std::regex("\"" + key + "\"\\s*:\\s*([0-9]+)")));
    return std::stoll(m[1]);
  };
  REQUIRE(schema.blockRowsPerLayer.size() == schema.quantLayers.size());
  for (size_t l = 0; l < schema.quantLayers.size(); ++l) {
    const std::string& name = schema.quantLayers[l];
    INFO(name);
    if (name.find("down_proj") != std::string::npos || name.find("o_proj") != std::string::npos)
      CHECK(schema.blockRowsPerLayer[l] == configValue("hidden_size"));
    if (name.find("up_proj") != std::string::npos || name.find("gate_proj") != std::string::npos)
      CHECK(schema.blockRowsPerLayer[l] == configValue("intermediate_size"));
    CHECK(schema.blocksPerLayer[l] % schema.blockRowsPerLayer[l] == 0);
  }
  CHECK(fs::exists(o.runDir + "/model/quant_state.json"));
  CHECK(fs::exists(o.runDir + "/model/model.safetensors"));
}

TEST_CASE("A frozen reference computes as the student: the unquantized model's KL to it is 0",
          "[recipes][reference]") {
  TempDir tmp;
  // A saved model (BF16 safetensors) as its own reference, in BF16 autocast and in fp32: the
  // reference runs the same arithmetic as the student, so the KL is exactly zero, not the few
  // thousandths a BF16 residual stream adds.
  run::RunOptions save;
  save.runDir = (tmp.path / "saved").string();
  REQUIRE(run::executeRun(config("sft", "", 2), save).state == RunState::Finished);
  const std::string model = save.runDir + "/model";
  for (const char* dtype : {"bf16", "fp32"}) {
    INFO(dtype);
    run::RunOptions o;
    o.runDir = (tmp.path / (std::string("kl-") + dtype)).string();
    REQUIRE(run::executeRun(config("sft", "", 0,
                                   {"model.path=" + model, "eval.reference=" + model,
                                    std::string("model.compute_dtype=") + dtype}),
                            o)
                .state == RunState::Finished);
    const auto rows = evals(o.runDir);
    REQUIRE(rows.size() == 1);
    CHECK(rows[0].values[2] == 0.0);
  }
  // The same reference against PTQ: what remains is quantization alone.
  run::RunOptions ptq;
  ptq.runDir = (tmp.path / "ptq").string();
  REQUIRE(run::executeRun(
              config("ptq", "nvfp4", 0, {"model.path=" + model, "eval.reference=" + model}), ptq)
              .state == RunState::Finished);
  CHECK(evals(ptq.runDir)[0].values[2] > 0);
}

TEST_CASE("QAT resumed from a checkpoint reproduces the uninterrupted run", "[recipes][qat]") {
  TempDir tmp;
  const run::RunConfig c = config("qat", "mxfp4", 10);
  run::RunOptions straight;
  straight.runDir = (tmp.path / "straight").string();
  run::executeRun(c, straight);

  run::RunOptions first;
  first.runDir = (tmp.path / "resumed").string();
  std::atomic<bool> stop{false};
  first.stopRequested = &stop;
  first.onEvent = [&](const run::RunEvent& e) {
    if (e.kind == EventKind::Step && e.step == 5) stop = true;
  };
  CHECK(run::executeRun(c, first).state == RunState::Cancelled);
  run::RunOptions second;
  second.runDir = first.runDir;
  second.resumeFrom = "latest";
  CHECK(run::executeRun(c, second).state == RunState::Finished);

  log::RunLogReader a(straight.runDir + "/log.h5"), b(first.runDir + "/log.h5");
  auto la = a.readTrain(0, a.trainRows()), lb = b.readTrain(0, b.trainRows());
  REQUIRE(la.size() == 10);
  REQUIRE(lb.size() == 10);
  for (size_t i = 0; i < 10; ++i) CHECK(la[i].loss == lb[i].loss);
  CHECK(a.quantRows() == b.quantRows());
}

TEST_CASE("QAD pulls the quantized student towards its teacher", "[recipes][qad]") {
  TempDir tmp;
  // The shipped base model as the BF16 teacher: trained, so quantization visibly changes it.
  const std::string teacher = "builtin:tiny";

  run::RunOptions ptq;
  ptq.runDir = (tmp.path / "ptq").string();
  run::executeRun(config("ptq", "nvfp4", 0,
                         {"model.path=" + teacher, "eval.reference=" + teacher,
                          "data.validation=builtin:tasks-val"}),
                  ptq);
  const double ptqKl = evals(ptq.runDir).back().values[2];

  for (const char* data : {"builtin:sft", "random:tokens"}) {
    INFO("data " << data);
    run::RunOptions qad;
    qad.runDir = (tmp.path / (std::string("qad-") + (data[0] == 'b' ? "sft" : "random"))).string();
    // 80 steps at 3e-5. At 20 steps and 1e-4 the gain over PTQ was within what last-bit changes
    // to the forward move it by (the fused RMSNorm took it from 13% below PTQ's KL to 23% above);
    // at 40 steps it was 17% below with LibTorch's BF16 GEMMs and 7% below with fp32 GEMMs of the
    // same BF16 operands (model/linear.cpp), whose sums differ only in order. Here QAD ends 24%
    // and 20% below PTQ with the two (1e-4 overshoots: 10-25% above).
    run::executeRun(
        config("qad", "nvfp4", 80,
               {"model.path=" + teacher, "recipe.teacher=" + teacher, "optim.lr=3e-5",
                "train.eval_every=10", "train.batch_size=8", "data.seq_len=128",
                std::string("data.train=") + data, "data.validation=builtin:tasks-val"}),
        qad);
    const auto rows = evals(qad.runDir);
    REQUIRE(rows.size() == 9);  // steps 0, 10, ..., 80
    CHECK(rows.front().step == 0);
    log::RunLogReader log(qad.runDir + "/log.h5");
    REQUIRE(log.schema().evalColumns[2] == "val_kl");  // the teacher is the default reference
    const double qadKl = rows.back().values[2];
    // Real data pulls the student towards the teacher; random tokens must at least not collapse
    // it (the QAD report: random tokens end near PTQ).
    if (data[0] == 'b') {
      CHECK(qadKl < 0.9 * ptqKl);
      CHECK(qadKl < 0.9 * rows.front().values[2]);  // and below where it started
    } else {
      CHECK(qadKl < 1.5 * ptqKl);
    }
  }
}

TEST_CASE("Recipe configs are checked by key", "[recipes][config]") {
  CHECK_THROWS_WITH(config("qat", "none", 5), Catch::Contains("quant.format"));
  CHECK_THROWS_WITH(config("sft", "nvfp4", 5), Catch::Contains("recipe.name=qat"));
  CHECK_THROWS_WITH(config("qat", "fp8", 5), Catch::Contains("mxfp4 or nvfp4"));
  CHECK_THROWS_WITH(config("qad", "nvfp4", 5, {"recipe.temperature=0"}),
                    Catch::Contains("recipe.temperature"));
  CHECK_THROWS_WITH(config("qat", "nvfp4", 5, {"quant.backward=clipped"}),
                    Catch::Contains("quant.backward"));
  TempDir tmp;
  run::RunOptions o;
  o.runDir = (tmp.path / "x").string();
  CHECK_THROWS_WITH(run::executeRun(config("qat", "nvfp4", 5, {"eval.tasks=poetry"}), o),
                    Catch::Contains("unknown task 'poetry'"));
  CHECK_THROWS_WITH(run::executeRun(config("qat", "nvfp4", 5, {"quant.include=lm_head"}), o),
                    Catch::Contains("no linear layer matches"));
  CHECK_FALSE(fs::exists(o.runDir));  // nothing written for bad input
}
