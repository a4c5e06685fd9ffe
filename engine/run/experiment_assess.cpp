// The experiment's assessment: gap recovered per run, means and spreads over seeds, the published
// findings as goals, and report.csv; report.md is drawn by experiment_report.cpp.
#include <algorithm>
#include <map>
#include <cmath>
#include <sstream>
#include <tuple>

#include "fp4lab/data/builtin_tasks.h"
#include "fp4lab/run/experiment.h"
#include "run/experiment_internal.h"

namespace fp4lab::run {
namespace {

using namespace experiment_detail;

// Mean and sample standard deviation of the finite values (NaN when there are none / one).
std::pair<double, double> meanSd(const std::vector<double>& values) {
  double sum = 0;
  int n = 0;
  for (double v : values)
    if (std::isfinite(v)) sum += v, ++n;
  if (n == 0) return {NAN, NAN};
  const double mean = sum / n;
  double ss = 0;
  for (double v : values)
    if (std::isfinite(v)) ss += (v - mean) * (v - mean);
  return {mean, n > 1 ? std::sqrt(ss / (n - 1)) : NAN};
}

std::vector<ExperimentSummary> summarize(const std::vector<ExperimentRun>& runs) {
  std::vector<ExperimentSummary> out;
  for (const auto& r : runs) {
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const ExperimentSummary& s) { return s.mean.name == r.group; });
    if (it != out.end()) continue;
    std::vector<const ExperimentRun*> members;
    for (const auto& m : runs)
      if (m.group == r.group) members.push_back(&m);
    ExperimentSummary s;
    s.count = int(members.size());
    s.mean = r;
    s.mean.name = r.group;
    s.mean.runDir.clear();
    auto collect = [&](auto get) {
      std::vector<double> v;
      for (const ExperimentRun* m : members) v.push_back(get(*m));
      return v;
    };
    for (const auto& entry : r.passRate) {
      const std::string& task = entry.first;  // (a structured binding cannot be captured in C++17)
      std::tie(s.mean.passRate[task], s.passRateSd[task]) =
          meanSd(collect([&](const ExperimentRun& m) {
            return m.passRate.count(task) ? m.passRate.at(task) : NAN;
          }));
    }
    std::tie(s.mean.valLoss, s.valLossSd) = meanSd(collect([](auto& m) { return m.valLoss; }));
    std::tie(s.mean.valKl, s.valKlSd) = meanSd(collect([](auto& m) { return m.valKl; }));
    const std::vector<double> gaps = collect([](auto& m) { return m.gapRecovered; });
    std::tie(s.mean.gapRecovered, s.gapSd) = meanSd(gaps);
    for (double g : gaps)
      if (std::isfinite(g)) {
        s.gapMin = std::isfinite(s.gapMin) ? std::min(s.gapMin, g) : g;
        s.gapMax = std::isfinite(s.gapMax) ? std::max(s.gapMax, g) : g;
      }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

void assessExperiment(ExperimentResult& result, const ExperimentConfig& config,
                      const std::string& commandLine) {
  for (auto& r : result.runs)
    if (r.group.empty()) r.group = r.name;
  // Gap recovered against the PTQ run of the same format and seed.
  const ExperimentRun* sftRun = nullptr;
  for (const auto& r : result.runs)
    if (r.group == "sft") sftRun = &r;
  const double bf16Loss = sftRun ? sftRun->valLoss : NAN;
  for (auto& r : result.runs) {
    r.gapRecovered = NAN;
    if (r.recipe == "ptq") r.gapRecovered = 0;
    if (r.from != "sft" || (r.recipe != "qat" && r.recipe != "qad")) continue;
    for (const auto& p : result.runs)
      if (p.group == "ptq-" + r.format && p.seed == r.seed)
        r.gapRecovered = (p.valLoss - r.valLoss) / (p.valLoss - bf16Loss);
  }
  // The goals read each group's means over its seeds.
  result.summaries = summarize(result.runs);
  auto summary = [&](const std::string& name) -> const ExperimentSummary* {
    for (const auto& s : result.summaries)
      if (s.mean.name == name) return &s;
    return nullptr;
  };
  auto find = [&](const std::string& name) -> const ExperimentRun* {
    const ExperimentSummary* s = summary(name);
    return s ? &s->mean : nullptr;
  };
  auto seeds = [&](const std::string& name) {
    const ExperimentSummary* s = summary(name);
    return s && s->count > 1 ? " (mean of " + std::to_string(s->count) + " seeds)" : std::string();
  };
  const std::vector<std::string> tasks = splitList(config.tasks);
  auto minRate = [&](const ExperimentRun& r) {
    double m = INFINITY;
    for (const auto& t : tasks) m = std::min(m, r.passRate.count(t) ? r.passRate.at(t) : NAN);
    return m;
  };
  auto meanRate = [&](const ExperimentRun& r) {
    double s = 0;
    for (const auto& t : tasks) s += r.passRate.count(t) ? r.passRate.at(t) : NAN;
    return s / double(tasks.size());
  };
  // With a decimal, so that 284 of 300 (94.7%) does not read as a missed 95%.
  auto rates = [&](const ExperimentRun& r) {
    std::string s;
    for (const auto& t : tasks) s += (s.empty() ? "" : " / ") + percent(r.passRate.at(t), 1);
    return s;
  };
  // Pass rates are counts over a few hundred items, logged as float32 and averaged over seeds: a
  // rate exactly at a goal (285 of 300 = 95%) reads 0.94999999 and must count as met.
  const double tolerance = 1e-6;
  auto atLeast95 = [&](const ExperimentRun& r) { return minRate(r) >= 0.95 - tolerance; };
  result.goals.clear();
  auto goal = [&](std::string g, std::string measured, bool met) {
    result.goals.push_back({std::move(g), std::move(measured), met});
  };
  const ExperimentRun* sft = find("sft");
  // The published base model's rates (gpt-oss-20b before fine-tuning, recipes.md): the base is
  // "low" when it does no better on either task. A rate that was not measured meets nothing.
  // The real model's tasks stand for them (user guide, "Tasks for a real model").
  const std::map<std::string, double> publishedBase = {{"reasoning_language", 0.16},
                                                       {"false_refusal", 0.30},
                                                       {"math_in_language", 0.16},
                                                       {"json_answer", 0.30}};
  if (const ExperimentRun* base = find("base")) {
    bool low = true;
    for (const auto& t : tasks) {
      const double rate = base->passRate.count(t) ? base->passRate.at(t) : NAN;
      const auto published = publishedBase.find(t);
      low = low && std::isfinite(rate) && published != publishedBase.end() &&
            rate <= published->second + tolerance;
    }
    goal("base pass rates at or below the published base model's (16% and 30%)", rates(*base), low);
  }
  if (sft) goal("SFT >= 95% on both tasks", rates(*sft), atLeast95(*sft));
  for (const auto& f : splitList(config.formats)) {
    const ExperimentRun *ptq = find("ptq-" + f), *qat = find("qat-" + f), *qad = find("qad-" + f);
    if (ptq && sft)
      goal("PTQ " + f + " visibly below SFT (mean pass rate at least 5 points lower)",
           rates(*ptq) + " vs " + rates(*sft) + seeds(ptq->name),
           meanRate(*ptq) <= meanRate(*sft) - 0.05 + tolerance);
    for (const ExperimentRun* r : {qat, qad}) {
      if (r) goal(r->name + " >= 95% on both tasks", rates(*r) + seeds(r->name), atLeast95(*r));
      if (r && sft) {
        bool close = true;
        for (const auto& t : tasks)
          close = close && r->passRate.count(t) && sft->passRate.count(t) &&
                  r->passRate.at(t) >= sft->passRate.at(t) - 0.02 - tolerance;
        goal(r->name + " within 2 points of SFT on each task",
             rates(*r) + " vs " + rates(*sft) + seeds(r->name), close);
      }
    }
    if (qad) {
      const double need = f == "nvfp4" ? 0.9 : 0.8;
      goal("QAD " + f + " recovers >= " + percent(need) + " of the PTQ validation-loss gap",
           percent(qad->gapRecovered) + seeds(qad->name), qad->gapRecovered >= need);
    }
    if (qat && qad)
      goal("QAT " + f + " KL to SFT >= 10x QAD's" +
               (qat->maxSteps == qad->maxSteps ? " (equal steps)" : " (UNEQUAL steps)"),
           fixed(qat->valKl, 5) + " vs " + fixed(qad->valKl, 5) + " (" +
               fixed(qat->valKl / qad->valKl, 1) + "x)" + seeds(qad->name),
           qat->valKl >= 10 * qad->valKl);
  }
  for (const char* recipe : {"qat", "qad"}) {
    const ExperimentRun *mx = find(std::string(recipe) + "-mxfp4"),
                        *nv = find(std::string(recipe) + "-nvfp4");
    if (mx && nv)
      goal(std::string("NVFP4 below MXFP4 in final validation loss after ") + recipe,
           fixed(nv->valLoss, 4) + " vs " + fixed(mx->valLoss, 4) + seeds(nv->name),
           nv->valLoss < mx->valLoss);
  }
  // The QAD report's robustness setting: on other data QAT learns that data and drifts from the
  // SFT model, QAD keeps matching it.
  const std::string of = config.offdomainFormat;
  const ExperimentRun *qatOff = find("qat-" + of + "-offdomain"),
                      *qadOff = find("qad-" + of + "-offdomain");
  if (qatOff && qadOff)
    goal("off-domain data (" + config.offdomainData + "): QAT " + of + " KL to SFT >= 10x QAD's",
         fixed(qatOff->valKl, 5) + " vs " + fixed(qadOff->valKl, 5) + " (" +
             fixed(qatOff->valKl / qadOff->valKl, 1) + "x)",
         qatOff->valKl >= 10 * qadOff->valKl);
  if (const ExperimentRun* random = find("qad-" + of + "-random"))
    goal("QAD " + of + " on random tokens recovers most (>= 50%) of the PTQ validation-loss gap",
         percent(random->gapRecovered), random->gapRecovered >= 0.5);
  const ExperimentRun* fromBase = find("qat-from-base-" + config.baseQatFormat);
  const ExperimentRun* sftQat = find("qat-" + config.baseQatFormat);
  if (fromBase && sftQat)
    goal("SFT-then-QAT above QAT-from-base (" + config.baseQatFormat + ", mean pass rate)",
         rates(*sftQat) + " vs " + rates(*fromBase) + seeds(sftQat->name),
         meanRate(*sftQat) > meanRate(*fromBase) ||
             (meanRate(*sftQat) == meanRate(*fromBase) && sftQat->valLoss < fromBase->valLoss));

  // The report.
  std::ostringstream csv;
  csv << "run,recipe,format,from,data,seed";
  for (const auto& t : tasks) csv << ",pass_rate_" << t;
  csv << ",val_loss,val_kl_to_sft,gap_recovered,steps,tokens,seconds,run_dir\n";
  for (const auto& r : result.runs) {
    csv << r.name << "," << r.recipe << "," << r.format << "," << r.from << "," << r.data << ","
        << r.seed;
    for (const auto& t : tasks) csv << "," << fixed(r.passRate.at(t), 4);
    csv << "," << fixed(r.valLoss, 6) << "," << fixed(r.valKl, 6) << "," << fixed(r.gapRecovered, 4)
        << "," << r.steps << "," << r.tokens << "," << fixed(r.seconds, 1) << "," << r.runDir
        << "\n";
  }
  result.reportCsv = csv.str();
  result.reportMarkdown = markdownReport(result, config, commandLine);
}

}  // namespace fp4lab::run
