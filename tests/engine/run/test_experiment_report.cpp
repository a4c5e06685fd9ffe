// The experiment's assessment with repeats: each QAT/QAD run's gap recovered is against the PTQ
// run of its own seed, each group is summarised over its seeds (mean, sample standard deviation,
// range), and the goals read the means.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include "fp4lab/data/builtin_tasks.h"
#include "fp4lab/error.h"
#include "fp4lab/run/experiment.h"

using namespace fp4lab;

namespace {

run::ExperimentRun made(const std::string& group, const std::string& recipe, uint64_t seed,
                        double valLoss, double passRate) {
  run::ExperimentRun r;
  r.group = group;
  r.name = seed == 1234 ? group : group + "-seed" + std::to_string(seed);
  r.recipe = recipe;
  r.format = recipe == "sft" ? "bf16" : "nvfp4";
  r.from = recipe == "sft" ? "base" : "sft";
  r.seed = seed;
  r.valLoss = valLoss;
  r.valKl = recipe == "sft" ? NAN : valLoss - 0.05;
  for (const auto& t : data::builtinTaskNames()) r.passRate[t] = passRate;
  return r;
}

// The goal whose text starts with `start`.
const run::ExperimentGoal& goalStarting(const run::ExperimentResult& result,
                                        const std::string& start) {
  auto it = std::find_if(result.goals.begin(), result.goals.end(),
                         [&](const run::ExperimentGoal& g) { return g.goal.rfind(start, 0) == 0; });
  REQUIRE(it != result.goals.end());
  return *it;
}

const run::ExperimentSummary& summary(const run::ExperimentResult& r, const std::string& group) {
  auto it = std::find_if(r.summaries.begin(), r.summaries.end(),
                         [&](const run::ExperimentSummary& s) { return s.mean.name == group; });
  REQUIRE(it != r.summaries.end());
  return *it;
}

}  // namespace

TEST_CASE("Repeated runs: gap against the same seed's PTQ, goals on the means",
          "[run][experiment]") {
  run::ExperimentConfig config;
  config.formats = "nvfp4";
  config.repeats = 2;
  run::ExperimentResult result;
  result.runs = {made("sft", "sft", 1234, 0.05, 0.96), made("ptq-nvfp4", "ptq", 1234, 0.06, 0.90),
                 made("qad-nvfp4", "qad", 1234, 0.055, 0.94),
                 made("ptq-nvfp4", "ptq", 1235, 0.07, 0.88),
                 made("qad-nvfp4", "qad", 1235, 0.054, 0.98)};
  run::assessExperiment(result, config);

  CHECK(result.runs[2].gapRecovered == Approx(0.5));  // (0.06 - 0.055) / (0.06 - 0.05)
  CHECK(result.runs[4].gapRecovered == Approx(0.8));  // (0.07 - 0.054) / (0.07 - 0.05)
  CHECK(result.runs[3].gapRecovered == 0);

  REQUIRE(result.summaries.size() == 3);  // sft, ptq-nvfp4, qad-nvfp4
  const run::ExperimentSummary& qad = summary(result, "qad-nvfp4");
  CHECK(qad.count == 2);
  CHECK(qad.mean.gapRecovered == Approx(0.65));
  CHECK(qad.gapSd == Approx(0.212132).epsilon(1e-4));
  CHECK(qad.gapMin == Approx(0.5));
  CHECK(qad.gapMax == Approx(0.8));
  CHECK(qad.mean.valLoss == Approx(0.0545));
  CHECK(qad.mean.passRate.at("reasoning_language") == Approx(0.96));
  CHECK(qad.passRateSd.at("reasoning_language") == Approx(0.028284).epsilon(1e-4));
  const run::ExperimentSummary& sft = summary(result, "sft");
  CHECK(sft.count == 1);
  CHECK(std::isnan(sft.valLossSd));

  auto goal = [&](const std::string& start) {
    for (const auto& g : result.goals)
      if (g.goal.rfind(start, 0) == 0) return g;
    FAIL("no goal starting with " << start);
    return run::ExperimentGoal{};
  };
  const run::ExperimentGoal gap = goal("QAD nvfp4 recovers");
  CHECK(gap.measured == "65% (mean of 2 seeds)");
  CHECK_FALSE(gap.met);
  // Mean pass rates 96% / 96% for QAD: met, although the first seed alone (94%) was not.
  const run::ExperimentGoal rates = goal("qad-nvfp4 >= 95%");
  CHECK(rates.met);
  // PTQ's mean (89%) is 7 points below SFT's (96%).
  CHECK(goal("PTQ nvfp4 visibly below").met);

  CHECK(result.reportCsv.find("\nqad-nvfp4-seed1235,qad,nvfp4,sft,sft,1235,") != std::string::npos);
}

TEST_CASE("A pass rate exactly at a goal meets it, as logged (float32) and as a mean",
          "[run][experiment]") {
  auto rate = [](int passed) { return double(float(passed / 300.0)); };  // as the log stores it
  auto goalMet = [](const run::ExperimentResult& result, const std::string& start) {
    return goalStarting(result, start).met;
  };
  run::ExperimentConfig config;
  config.formats = "nvfp4";
  {
    // One seed: SFT 285 of 300 (95%), PTQ 270 of 300 (exactly 5 points lower).
    run::ExperimentResult result;
    result.runs = {made("sft", "sft", 1234, 0.05, rate(285)),
                   made("ptq-nvfp4", "ptq", 1234, 0.06, rate(270)),
                   made("qat-nvfp4", "qat", 1234, 0.055, rate(284))};
    run::assessExperiment(result, config);
    CHECK(goalMet(result, "SFT >= 95%"));
    CHECK(goalMet(result, "PTQ nvfp4 visibly below"));
    CHECK_FALSE(goalMet(result, "qat-nvfp4 >= 95%"));  // 284 of 300 is below
  }
  {
    // Three seeds at 283, 287 and 285 of 300: the mean is 285 of 300.
    config.repeats = 3;
    run::ExperimentResult result;
    result.runs = {made("sft", "sft", 1234, 0.05, rate(290))};
    const int passed[] = {283, 287, 285};
    for (int i = 0; i < 3; ++i) {
      result.runs.push_back(made("ptq-nvfp4", "ptq", 1234 + i, 0.06, rate(270)));
      result.runs.push_back(made("qat-nvfp4", "qat", 1234 + i, 0.055, rate(passed[i])));
    }
    run::assessExperiment(result, config);
    CHECK(goalMet(result, "qat-nvfp4 >= 95%"));
  }
}

TEST_CASE("The markdown report says what was quantized and which runs were reused",
          "[run][experiment]") {
  run::ExperimentConfig config;
  config.formats = "nvfp4";
  run::ExperimentResult result;
  result.runs = {made("sft", "sft", 1234, 0.05, 0.96), made("ptq-nvfp4", "ptq", 1234, 0.06, 0.90)};
  result.runs[0].seconds = 100;
  result.runs[1].seconds = 20;
  result.seconds = 30;
  run::assessExperiment(result, config, "fp4lab experiment");
  CHECK(result.reportMarkdown.find("Command: `fp4lab experiment`") != std::string::npos);
  CHECK(result.reportMarkdown.find("total time 30 s. Quantization: W4A4 (weights and input "
                                   "activations of every linear layer") != std::string::npos);

  config.activations = false;
  result.runs[0].reused = true;
  run::assessExperiment(result, config);
  CHECK(result.reportMarkdown.find("W4A16 (weights only of every linear layer") !=
        std::string::npos);
  CHECK(result.reportMarkdown.find("input activations") == std::string::npos);
  CHECK(result.reportMarkdown.find("total time 30 s (1 of 2 runs reused from an earlier "
                                   "invocation; the runs' own times add up to 120 s)") !=
        std::string::npos);
}

TEST_CASE("A goal's pass rates show a decimal, so 284 of 300 does not read as 95%",
          "[run][experiment]") {
  run::ExperimentConfig config;
  config.formats = "nvfp4";
  run::ExperimentResult result;
  result.runs = {made("sft", "sft", 1234, 0.05, double(float(284 / 300.0)))};
  run::assessExperiment(result, config);
  const run::ExperimentGoal& sft = goalStarting(result, "SFT >= 95% on both tasks");
  CHECK(sft.measured == "94.7% / 94.7%");
  CHECK_FALSE(sft.met);
}

TEST_CASE("The base goal uses the published base rates; a rate not measured meets nothing",
          "[run][experiment]") {
  run::ExperimentConfig config;
  config.formats = "nvfp4";
  auto baseGoal = [&](double reasoning, double refusal) {
    run::ExperimentResult result;
    run::ExperimentRun base = made("base", "sft", 1234, 0.3, 0);
    base.passRate["reasoning_language"] = reasoning;
    base.passRate["false_refusal"] = refusal;
    result.runs = {made("sft", "sft", 1234, 0.05, 0.96), base};
    run::assessExperiment(result, config);
    return goalStarting(result, "base pass rates at or below the published");
  };
  CHECK(baseGoal(0.0, 0.0).met);
  CHECK(baseGoal(0.16, 0.30).met);        // at the published 16% and 30%
  CHECK_FALSE(baseGoal(0.17, 0.0).met);   // above 16% on reasoning
  CHECK_FALSE(baseGoal(0.10, 0.35).met);  // above 30% on false refusals
  CHECK_FALSE(baseGoal(NAN, 0.0).met);    // not measured
  CHECK(baseGoal(NAN, 0.0).measured.find("n/a") != std::string::npos);
}

TEST_CASE("The KL goal's step label reads the runs' own step counts", "[run][experiment]") {
  run::ExperimentConfig config;  // qat_steps == qad_steps in the experiment's own keys
  config.formats = "nvfp4";
  auto label = [&](int64_t qatSteps, int64_t qadSteps) {
    run::ExperimentResult result;
    result.runs = {made("sft", "sft", 1234, 0.05, 0.96), made("ptq-nvfp4", "ptq", 1234, 0.06, 0.9),
                   made("qat-nvfp4", "qat", 1234, 0.055, 0.95),
                   made("qad-nvfp4", "qad", 1234, 0.052, 0.95)};
    result.runs[2].maxSteps = qatSteps;
    result.runs[3].maxSteps = qadSteps;
    run::assessExperiment(result, config);
    return goalStarting(result, "QAT nvfp4 KL to SFT").goal;
  };
  CHECK(label(200, 200).find("(equal steps)") != std::string::npos);
  CHECK(label(400, 200).find("(UNEQUAL steps)") != std::string::npos);
}

TEST_CASE("The experiment's tasks key: checked, and the report grades those tasks only",
          "[run][experiment]") {
  run::ExperimentConfig config = run::ExperimentConfig::quick();
  CHECK(config.tasks == "reasoning_language,false_refusal");
  config.applyOverride("tasks=math_in_language,nope");
  try {
    config.validate();
    FAIL("an unknown task was accepted");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("'tasks' names an unknown task 'nope'") != std::string::npos);
  }
  config.applyOverride("tasks=math_in_language,json_answer");
  CHECK_NOTHROW(config.validate());
  CHECK(config.toYaml().find("tasks: math_in_language,json_answer") != std::string::npos);

  // Runs graded on the real-model tasks: the report's columns are those, not the tiny model's.
  run::ExperimentResult result;
  for (auto r : {made("base", "sft", 1234, 2.2, 0.0), made("sft", "sft", 1234, 0.5, 0.9)}) {
    r.name = r.group = r.recipe == "sft" && r.valLoss > 1 ? "base" : "sft";
    r.passRate = {{"math_in_language", r.valLoss > 1 ? 0.0 : 0.4},
                  {"json_answer", r.valLoss > 1 ? 0.0 : 0.63}};
    result.runs.push_back(r);
  }
  run::assessExperiment(result, config);
  CHECK(result.reportCsv.find("math_in_language") != std::string::npos);
  CHECK(result.reportCsv.find("reasoning_language") == std::string::npos);
  CHECK(result.reportMarkdown.find("63.0%") != std::string::npos);
}

TEST_CASE("Presets: named starting points that keys override; unknown names refused",
          "[run][experiment]") {
  CHECK(run::ExperimentConfig::preset("tiny").toYaml() == run::ExperimentConfig().toYaml());
  CHECK(run::ExperimentConfig::preset("tiny-quick").toYaml() ==
        run::ExperimentConfig::quick().toYaml());
  for (const char* name : {"smollm2", "smollm2-quick"}) {
    INFO(name);
    run::ExperimentConfig c = run::ExperimentConfig::preset(name);
    CHECK(c.baseModel == "builtin:smollm2-135m");
    CHECK(c.trainData == "builtin:sft-math-json");
    CHECK(c.tasks == "math_in_language,json_answer");
    CHECK(c.offdomainData == "builtin:pretrain");
    CHECK(c.randomTokens);
    CHECK_NOTHROW(c.validate());
    c.applyOverride("sft_steps=7");
    CHECK(c.sftSteps == 7);
    CHECK(c.baseModel == "builtin:smollm2-135m");  // the rest of the preset stays
  }
  // The quick variant is smaller in every size that costs time.
  const auto full = run::ExperimentConfig::preset("smollm2"),
             quick = run::ExperimentConfig::preset("smollm2-quick");
  CHECK(quick.sftSteps < full.sftSteps);
  CHECK(quick.batchSize * quick.seqLen < full.batchSize * full.seqLen);
  CHECK(quick.taskItems < full.taskItems);
  CHECK_THROWS_WITH(
      run::ExperimentConfig::preset("smollm"),
      Catch::Contains("unknown experiment preset 'smollm'") && Catch::Contains("smollm2-quick"));
}

TEST_CASE("Off-domain and random-token runs: planned from the SFT model, scored on its rows",
          "[run][experiment]") {
  run::ExperimentConfig config = run::ExperimentConfig::quick();
  run::ExperimentOptions options;
  options.dir = "/nonexistent/fp4lab-experiment-plan";
  auto names = [&] {
    std::vector<std::string> out;
    for (const auto& p : run::planExperiment(config, options)) out.push_back(p.name);
    return out;
  };
  const std::vector<std::string> without = names();
  CHECK(std::none_of(without.begin(), without.end(), [](const std::string& n) {
    return n.find("offdomain") != std::string::npos || n.find("random") != std::string::npos;
  }));
  config.applyOverride("offdomain_data=builtin:pretrain");
  config.applyOverride("random_tokens=true");
  const std::vector<std::string> with = names();
  CHECK(with.size() == without.size() + 3);
  for (const char* n : {"qat-nvfp4-offdomain", "qad-nvfp4-offdomain", "qad-nvfp4-random"})
    CHECK(std::find(with.begin(), with.end(), n) != with.end());
  config.applyOverride("offdomain_format=mxfp4");
  const std::vector<std::string> mx = names();
  CHECK(std::find(mx.begin(), mx.end(), "qad-mxfp4-random") != mx.end());

  // What is refused, by key.
  for (const char* bad : {"offdomain_data=random:tokens", "offdomain_data=builtin:sft"}) {
    run::ExperimentConfig c = run::ExperimentConfig::quick();
    c.applyOverride(bad);
    CHECK_THROWS_WITH(c.validate(), Catch::Contains("'offdomain_data'"));
  }
  run::ExperimentConfig c = run::ExperimentConfig::quick();
  c.applyOverride("train_data=random:tokens");
  CHECK_THROWS_WITH(c.validate(), Catch::Contains("'train_data' cannot be random tokens"));
}

TEST_CASE("Off-domain goals: QAT's KL at least 10x QAD's; QAD on random tokens recovers the gap",
          "[run][experiment]") {
  run::ExperimentConfig config = run::ExperimentConfig::preset("smollm2-quick");
  config.formats = "nvfp4";
  config.tasks = "math_in_language,json_answer";
  auto assess = [&](double qatKl, double qadKl, double randomLoss) {
    run::ExperimentResult result;
    result.runs = {made("sft", "sft", 1234, 1.0, 0.9), made("ptq-nvfp4", "ptq", 1234, 1.2, 0.8)};
    run::ExperimentRun qat = made("qat-nvfp4-offdomain", "qat", 1234, 1.3, 0.5);
    qat.data = "offdomain", qat.valKl = qatKl;
    run::ExperimentRun qad = made("qad-nvfp4-offdomain", "qad", 1234, 1.05, 0.9);
    qad.data = "offdomain", qad.valKl = qadKl;
    run::ExperimentRun random = made("qad-nvfp4-random", "qad", 1234, randomLoss, 0.85);
    random.data = "random";
    result.runs.insert(result.runs.end(), {qat, qad, random});
    run::assessExperiment(result, config);
    return result;
  };
  const run::ExperimentResult met = assess(0.10, 0.01, 1.09);
  CHECK(goalStarting(met, "off-domain data (builtin:pretrain): QAT nvfp4 KL to SFT >= 10x").met);
  CHECK(goalStarting(met, "QAD nvfp4 on random tokens recovers most").met);  // 55%
  CHECK(goalStarting(met, "QAD nvfp4 on random tokens").measured == "55%");
  // Each run's gap is against the PTQ run (both scored on the SFT data's rows).
  CHECK(met.runs[3].gapRecovered == Approx(0.75));
  const run::ExperimentResult missed = assess(0.099, 0.01, 1.11);
  CHECK_FALSE(goalStarting(missed, "off-domain data").met);
  CHECK_FALSE(goalStarting(missed, "QAD nvfp4 on random tokens").met);  // 45%
  // The report names each run's data; the CSV has it in its own column.
  CHECK(met.reportMarkdown.find("| qat-nvfp4-offdomain | qat | nvfp4 | sft | builtin:pretrain |") !=
        std::string::npos);
  CHECK(met.reportMarkdown.find("| qad-nvfp4-random | qad | nvfp4 | sft | random tokens |") !=
        std::string::npos);
  CHECK(met.reportCsv.find("qad-nvfp4-random,qad,nvfp4,sft,random,1234,") != std::string::npos);
}

TEST_CASE("QAT and QAD within 2 points of SFT on each task", "[run][experiment]") {
  run::ExperimentConfig config;
  config.formats = "nvfp4";
  auto within = [&](double qatRate) {
    run::ExperimentResult result;
    result.runs = {made("sft", "sft", 1234, 1.0, 0.90), made("ptq-nvfp4", "ptq", 1234, 1.2, 0.8),
                   made("qat-nvfp4", "qat", 1234, 1.1, qatRate)};
    run::assessExperiment(result, config);
    return goalStarting(result, "qat-nvfp4 within 2 points of SFT").met;
  };
  CHECK(within(0.90));
  CHECK(within(0.88));  // exactly 2 points
  CHECK_FALSE(within(0.87));
}
