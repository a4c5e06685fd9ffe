// What `fp4lab train` and `fp4lab experiment` show on a terminal: a progress bar per run, and the
// Ctrl-C / SIGTERM handling that asks a run to checkpoint and stop.
#pragma once

#include <atomic>
#include <string>

#include "fp4lab/run/runner.h"

namespace fp4lab::cli {

// Set by the first SIGINT/SIGTERM (a second Ctrl-C kills the process).
const std::atomic<bool>& stopRequested();
void installStopHandlers();

std::string duration(double seconds);  // "3m07s", "1h02m"

// Renders RunEvents on stderr: a bar (step/total, loss, lr, tokens/s, ETA) redrawn in place on a
// terminal, one line per 5% otherwise; evals with every metric they carry.
class Progress {
 public:
  explicit Progress(bool tty, std::string prefix = {}) : m_tty(tty), m_prefix(std::move(prefix)) {}
  void operator()(const run::RunEvent& e);

 private:
  bool m_tty;
  std::string m_prefix;
  bool m_barOpen = false;
};

}  // namespace fp4lab::cli
