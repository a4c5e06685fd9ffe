// What the experiment's orchestration, assessment and report share: number formatting and the
// markdown report. Private to engine/run.
#pragma once

#include <string>

#include "fp4lab/run/experiment.h"

namespace fp4lab::run::experiment_detail {

inline std::string fixed(double v, int digits) {
  if (!std::isfinite(v)) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}
inline std::string percent(double v, int digits = 0) {
  return std::isfinite(v) ? fixed(100 * v, digits) + "%" : "n/a";
}
// "0.0521 ± 0.0004" (the spread only where there is one).
inline std::string withSd(const std::string& mean, double sd, const std::string& sdText) {
  return std::isfinite(sd) ? mean + " ± " + sdText : mean;
}

// report.md: the runs, the summaries across seeds, the goals and the configuration.
std::string markdownReport(const ExperimentResult& result, const ExperimentConfig& config,
                           const std::string& commandLine);

}  // namespace fp4lab::run::experiment_detail
