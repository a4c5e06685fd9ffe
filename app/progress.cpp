#include "progress.h"

#include <signal.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>

namespace fp4lab::cli {
namespace {

std::atomic<bool> g_stop{false};

void onSignal(int) {
  if (g_stop.exchange(true)) {  // a second Ctrl-C: stop now
    signal(SIGINT, SIG_DFL);
    raise(SIGINT);
  }
}

}  // namespace

const std::atomic<bool>& stopRequested() {
  return g_stop;
}

void installStopHandlers() {
  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

std::string duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  int s = int(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%dh%02dm", s / 3600, (s / 60) % 60);
  else
    std::snprintf(buf, sizeof buf, "%dm%02ds", s / 60, s % 60);
  return buf;
}

void Progress::operator()(const run::RunEvent& e) {
  const char* p = m_prefix.c_str();
  // A bar drawn in place leaves the cursor on its line: end it before printing anything else.
  if (e.kind != EventKind::Step && m_barOpen) std::fputc('\n', stderr);
  m_barOpen = m_tty && e.kind == EventKind::Step;
  if (e.kind == EventKind::Step) {
    if (!m_tty && e.step % std::max<int64_t>(1, e.maxSteps / 20) != 0 && e.step != e.maxSteps)
      return;
    const int width = 24;
    int filled = int(double(width) * double(e.step) / double(std::max<int64_t>(1, e.maxSteps)));
    std::string bar(size_t(filled), '=');
    if (filled < width) bar += '>' + std::string(size_t(width - filled - 1), ' ');
    std::fprintf(stderr,
                 "%s%s[%s] step %" PRId64 "/%" PRId64 "  loss %.4f  lr %.2e  %.0f tok/s  ETA %s%s",
                 m_tty ? "\r" : "", p, bar.c_str(), e.step, e.maxSteps, e.loss, e.lr,
                 e.tokensPerSecond, duration(e.etaSeconds).c_str(), m_tty ? "   " : "\n");
  } else if (e.kind == EventKind::Eval) {
    std::string metrics;
    for (const auto& [name, value] : e.metrics) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "  %s %.4g", name.c_str(), value);
      metrics += buf;
    }
    std::fprintf(stderr, "%seval at step %" PRId64 ":%s\n", p, e.step, metrics.c_str());
  } else if (e.kind == EventKind::Checkpoint) {
    std::fprintf(stderr, "%scheckpoint: %s\n", p, e.path.c_str());
  } else if (e.kind == EventKind::Warning) {
    std::fprintf(stderr, "%swarning: %s\n", p, e.message.c_str());
  } else if (e.kind == EventKind::Started) {
    std::fprintf(stderr, "%srun folder: %s (%s)\n", p, e.path.c_str(), e.message.c_str());
  } else {
    std::fprintf(stderr, "%s%s%s%s\n", p, toString(e.kind), e.message.empty() ? "" : ": ",
                 e.message.c_str());
  }
  std::fflush(stderr);
}

}  // namespace fp4lab::cli
