// report.md of the experiment: the runs, the summaries across seeds, the goals and the
// configuration, from an assessed ExperimentResult.
#include <cmath>
#include <sstream>

#include "fp4lab/data/builtin_tasks.h"
#include "run/experiment_internal.h"

namespace fp4lab::run::experiment_detail {

std::string markdownReport(const ExperimentResult& result, const ExperimentConfig& config,
                           const std::string& commandLine) {
  const std::vector<std::string> tasks = splitList(config.tasks);
  std::ostringstream md;
  md << "# fp4lab experiment report\n\n";
  if (!commandLine.empty()) md << "Command: `" << commandLine << "`\n\n";
  int reused = 0;
  double runSeconds = 0;
  for (const auto& r : result.runs) {
    reused += r.reused;
    if (std::isfinite(r.seconds)) runSeconds += r.seconds;
  }
  md << "Folder: `" << result.dir << "`; total time " << fixed(result.seconds, 0) << " s";
  if (reused)
    md << " (" << reused << " of " << result.runs.size()
       << " runs reused from an earlier invocation; the runs' own times add up to "
       << fixed(runSeconds, 0) << " s)";
  md << ". Quantization: "
     << (config.activations ? "W4A4 (weights and input activations" : "W4A16 (weights only")
     << " of every linear layer in the transformer blocks; "
        "lm_head and embeddings stay BF16). Pass rates: greedy generation on "
     << config.taskItems << " held-out items per task.\n\n";
  md << "## Runs\n\n| run | recipe | format | from | data |";
  for (const auto& t : tasks) md << " " << t << " |";
  md << " val loss | KL to SFT | gap recovered | steps | tokens | time (s) "
        "|\n|---|---|---|---|---|";
  for (size_t i = 0; i < tasks.size(); ++i) md << "---|";
  md << "---|---|---|---|---|---|\n";
  for (const auto& r : result.runs) {
    const std::string data = r.data == "offdomain" ? config.offdomainData
                             : r.data == "random"  ? std::string("random tokens")
                                                   : std::string("SFT data");
    md << "| " << r.name << " | " << r.recipe << " | " << r.format << " | " << r.from << " | "
       << data << " |";
    for (const auto& t : tasks) md << " " << percent(r.passRate.at(t)) << " |";
    md << " " << fixed(r.valLoss, 4) << " | " << fixed(r.valKl, 5) << " | "
       << (std::isfinite(r.gapRecovered) ? percent(r.gapRecovered) : "") << " | " << r.steps
       << " | " << r.tokens << " | " << fixed(r.seconds, 0) << (r.reused ? " (reused)" : "")
       << " |\n";
  }
  md << "\nGap recovered = (PTQ - X) / (PTQ - SFT) on validation loss, against the same format's "
        "PTQ run at the same seed. Every run is scored on the SFT data's validation rows, also "
        "those trained on other data.\n\n";
  if (config.repeats > 1) {
    md << "## Across seeds\n\nThe runs from the SFT model at " << config.repeats << " run seeds ("
       << config.seed << " to " << config.seed + uint64_t(config.repeats) - 1
       << "; the same data, validation rows and task items): mean ± sample standard deviation (for "
          "pass rates and gap recovered in percentage points). "
          "The goals below read these means.\n\n| run | seeds |";
    for (const auto& t : tasks) md << " " << t << " |";
    md << " val loss | KL to SFT | gap recovered (min..max) |\n|---|---|";
    for (size_t i = 0; i < tasks.size(); ++i) md << "---|";
    md << "---|---|---|\n";
    for (const auto& s : result.summaries) {
      if (s.count < 2) continue;
      md << "| " << s.mean.name << " | " << s.count << " |";
      for (const auto& t : tasks)
        md << " "
           << withSd(percent(s.mean.passRate.at(t), 1), s.passRateSd.at(t),
                     fixed(100 * s.passRateSd.at(t), 1))
           << " |";
      md << " " << withSd(fixed(s.mean.valLoss, 4), s.valLossSd, fixed(s.valLossSd, 4)) << " | "
         << withSd(fixed(s.mean.valKl, 5), s.valKlSd, fixed(s.valKlSd, 5)) << " | ";
      if (s.mean.recipe != "ptq" && std::isfinite(s.mean.gapRecovered))
        md << withSd(percent(s.mean.gapRecovered), s.gapSd, fixed(100 * s.gapSd, 0) + " points")
           << " (" << percent(s.gapMin) << ".." << percent(s.gapMax) << ")";
      md << " |\n";
    }
    md << "\n";
  }
  md << "## Goals\n\n| goal | measured | met |\n|---|---|---|\n";
  for (const auto& g : result.goals)
    md << "| " << g.goal << " | " << g.measured << " | " << (g.met ? "yes" : "**no**") << " |\n";
  md << "\n## Configuration\n\n```yaml\n" << config.toYaml() << "```\n";
  bool changed = false;
  for (const auto& r : result.runs) changed = changed || !r.differingKeys.empty();
  if (changed) {
    md << "\nReused although they ran another configuration (`--reuse-changed`); their rows above "
          "are what they ran:\n\n";
    for (const auto& r : result.runs)
      if (!r.differingKeys.empty()) {
        md << "- " << r.name << ":";
        for (const auto& k : r.differingKeys) md << " `" << k << "`";
        md << "\n";
      }
  }
  return md.str();
}

}  // namespace fp4lab::run::experiment_detail
