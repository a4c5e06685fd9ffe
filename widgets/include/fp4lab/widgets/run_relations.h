// How runs relate, found from their configs: the BF16 reference and the PTQ run a quantized run is
// measured against (gap recovered), and the runs that differ only by seed (drawn as one mean with
// a band). Plain C++ over snapshots: the runs table, the Compare tab and the tests share it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "fp4lab/widgets/run_snapshot.h"

namespace fp4lab::widgets {

// Indexes into the snapshots; -1: not found.
struct RunReferences {
  int bf16 = -1;  // the BF16 model the run started from (the SFT run whose model it loads)
  int ptq = -1;   // the PTQ run of the same model with the same quantization options
};

// For a PTQ, QAT or QAD run: its references among `runs`, from the configs. Model paths compare as
// lexically normalised absolute paths (a relative one against the folder the run was launched
// from, found from run.output_dir), then by their real paths.
// - bf16: the run whose folder, model/ or checkpoints/step-N model.path names, followed through
//   quantized runs (QAD from a QAT model) to the first unquantized one; for a model that is no
//   run's (builtin:tiny, a Hugging Face folder), an unquantized run of the same model.path with
//   train.max_steps = 0 (an evaluation of that model, the experiment's "base").
// - ptq: a PTQ run itself; otherwise the PTQ run of the same model.path and quant.* values (format,
//   scale_rule, blocks_2d, activations, amax, include, exclude), preferring the same run.seed, then
//   the same validation data, then the same calibration batches, then one with a validation loss,
//   then the newest (the last in `runs`).
// Unquantized runs (SFT) and runs without a readable config get {-1, -1}.
RunReferences findReferences(const RunSnapshots& runs, std::size_t index);

// (ptq - x) / (ptq - bf16) on validation loss, as the experiment reports it; NaN when any value is
// missing or ptq == bf16.
double gapRecovered(double ptqLoss, double bf16Loss, double loss);
// Of runs[index] against the references found (or given: overrides >= 0 and in range win), from
// the last validation losses (RunSummary::lastValLoss). A PTQ run measured against itself
// recovers 0 by definition; NaN when a reference is missing.
double gapRecovered(const RunSnapshots& runs, std::size_t index, RunReferences overrides = {});

// The gap recovered as the runs table and Compare show it: "42.0%", or in words where a
// percentage would mislead: "beats BF16" (the run's loss is below the BF16 reference's: the raw
// figure is over 100%), "PTQ gap < 0.001" (PTQ loses less than 0.001 nats, so any difference
// reads as thousands of percent), "not yet" (a run still at its step-0 evaluation). `detail`
// gives the raw figure and the three losses, for a tooltip. Empty when there is no figure.
struct GapText {
  std::string text, detail;
  double value = 0;  // the raw figure (NaN when none)
};
GapText gapRecoveredText(const RunSnapshots& runs, std::size_t index);
// Below this PTQ gap (nats) the gap recovered is not a meaningful percentage.
constexpr double kMinPtqGap = 1e-3;

// Groups of runs whose configs differ only by run.seed (and the keys that do not define a run,
// and run.name / run.output_dir); each group lists indexes into `runs`, the first is the lowest
// seed. Runs without a readable config form groups of one.
std::vector<std::vector<std::size_t>> seedGroups(const RunSnapshots& runs);

}  // namespace fp4lab::widgets
