// What the charts plot: one run's log as read so far, at full resolution, and the follower that
// reads it incrementally. Live and finished runs take the same path (a finished run is a live run
// that stopped growing). Plain C++ over the fp4lab_log reader: no Qt, so a GUI worker thread can
// own a follower and hand copies of its curves to the GUI thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "fp4lab/log/run_log.h"

namespace fp4lab::widgets {

// (x, y) points of one curve, in log order.
using Points = std::vector<std::pair<double, double>>;

// What a curve is plotted against: the optimizer step, the tokens seen, or the wall time of the
// row (seconds since the run started).
enum class XAxis { Step, Tokens, WallSeconds };

struct RunCurves {
  std::string name;  // shown in legends; keys the run's colour
  // The run this one repeats at another seed ("qat-mxfp4" for "qat-mxfp4-seed1235"); its colour is
  // used. Empty: the run is not a repeat.
  std::string group;
  std::string recipe, format;  // the log's root attributes (sft/ptq/qat/qad; bf16, "MXFP4 ...")
  std::string createdUtc;      // when the log was created (its root attribute)
  std::vector<log::TrainRow> train;
  std::vector<std::string> evalColumns;  // val_loss, val_ppl, val_kl, pass_rate_<task>, ...
  std::vector<log::EvalRow> eval;
  std::vector<std::string> quantLayers, quantMetrics;
  std::vector<int64_t> quantSteps;
  std::map<std::string, std::vector<float>> quant;  // metric -> row-major [rows, layers]
  std::vector<std::string> events;                  // /events: start, resume, checkpoint, ...

  // The curve of a series as RunLogReader::listSeries names it ("train/loss", "train/lr",
  // "train/grad_norm", "train/tok_per_s", "eval/<column>") against the optimizer step. Rows where
  // the value is NaN or infinite ("not measured") are left out. Unknown names give no points.
  // "train/ce_loss" is train/loss of a run whose loss is a cross-entropy (every recipe but QAD),
  // "train/distill_loss" that of a QAD run (its KL to the teacher); each is empty for the others.
  Points series(const std::string& name, XAxis x = XAxis::Step) const;
  // The largest training step logged (0 for a run without training rows, e.g. PTQ).
  int64_t lastTrainStep() const;
  // True for a repeat of another run at another seed (group set and not the name).
  bool isRepeat() const { return !group.empty() && group != name; }
  // One value per layer from the last /quant row (NaN where not measured); empty without rows
  // or without that metric.
  std::vector<float> lastQuantRow(const std::string& metric) const;
};

// Reads one run's log: everything present at construction, then only the rows added since, at
// each poll(). Throws fp4lab::Error (from the reader) for a missing, foreign or damaged log.
// One follower per thread at a time, like the reader it wraps.
class RunLogFollower {
 public:
  RunLogFollower(std::string runName, std::string logPath);

  // Refreshes the log and appends the rows written since the last read. Returns true when the
  // curves changed. A log that shrank (a resume dropped rows under this reader) is reopened and
  // read again from the start.
  bool poll();
  const RunCurves& curves() const { return m_curves; }
  const std::string& path() const { return m_path; }

 private:
  void readHeader();  // attributes and schema: fixed for the life of a log
  void readNewRows();

  std::string m_path;
  log::RunLogReader m_reader;
  RunCurves m_curves;
};

// Reads a finished (or live) log once: RunLogFollower(name, path).curves().
RunCurves readRunCurves(const std::string& runName, const std::string& logPath);

}  // namespace fp4lab::widgets
