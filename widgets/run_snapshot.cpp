// Summary numbers of a run for the runs table and the status bar.
#include "fp4lab/widgets/run_snapshot.h"

#include <algorithm>

namespace fp4lab::widgets {

RunSummary summarize(const run::RunFolder& folder, const RunCurves* curves) {
  RunSummary s;
  s.step = folder.step;
  // status.json's count where there is one (0 for PTQ, which trains no steps whatever run.yaml's
  // train.max_steps says); run.yaml's for a folder without it.
  s.maxSteps = folder.state != RunState::Unknown ? folder.maxSteps
                                                 : (folder.hasConfig ? folder.config.maxSteps : 0);
  if (!curves) return s;
  s.createdUtc = curves->createdUtc;
  if (!curves->train.empty()) {
    const log::TrainRow& last = curves->train.back();
    s.step = std::max(s.step, last.step);
    s.lastTrainLoss = last.loss;
    s.tokensPerSecond = last.tokensPerSecond;
    s.wallSeconds = last.wallSeconds;
  }
  const auto column = [&](const std::string& name) -> int {
    const auto it = std::find(curves->evalColumns.begin(), curves->evalColumns.end(), name);
    return it == curves->evalColumns.end() ? -1 : int(it - curves->evalColumns.begin());
  };
  const int loss = column("val_loss"), kl = column("val_kl");
  for (const log::EvalRow& row : curves->eval) {
    if (!(row.wallSeconds <= s.wallSeconds)) s.wallSeconds = row.wallSeconds;
    if (loss >= 0 && std::isfinite(row.values[loss])) {
      s.lastValLoss = row.values[loss];
      if (!(s.bestValLoss <= s.lastValLoss)) s.bestValLoss = s.lastValLoss;
    }
    if (kl >= 0 && std::isfinite(row.values[kl])) s.lastKl = row.values[kl];
    for (size_t c = 0; c < curves->evalColumns.size(); ++c) {
      const std::string& name = curves->evalColumns[c];
      if (name.rfind("pass_rate_", 0) == 0 && std::isfinite(row.values[c]))
        s.passRates[name.substr(10)] = row.values[c];
    }
  }
  return s;
}

std::string stateLabel(const RunSnapshot& r) {
  std::string label =
      r.starting && r.state() == RunState::Queued ? "starting" : toString(r.state());
  if (r.damaged()) label += " (damaged)";
  return label;
}

std::string damageText(const RunSnapshot& r) {
  std::string text;
  auto add = [&](const char* file, const std::string& why) {
    if (why.empty()) return;
    if (!text.empty()) text += "\n";
    text += std::string(file) + ": " + why;
  };
  add("status.json", r.folder.statusError);
  add("log", r.logError);
  add("run.yaml", r.folder.configError);
  return text;
}

std::string formatLabel(const run::RunConfig& c) {
  if (c.quantFormat == "none" || c.quantFormat.empty()) return "BF16";
  std::string label = c.quantFormat == "mxfp4"   ? "MXFP4"
                      : c.quantFormat == "nvfp4" ? "NVFP4"
                                                 : c.quantFormat;
  if (c.quantFormat == "nvfp4" && c.blocks2d) label += " 2D";
  label += c.quantActivations ? " W4A4" : " W4A16";
  if (c.quantFormat == "mxfp4" && c.scaleRule != "ceil") label += " " + c.scaleRule;
  return label;
}

}  // namespace fp4lab::widgets
