#include "train/thread_tuner.h"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace fp4lab::train {
namespace {

double median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  const size_t n = xs.size();
  return n % 2 ? xs[n / 2] : 0.5 * (xs[n / 2 - 1] + xs[n / 2]);
}

// The mean of the known values; NaN when none is.
double meanKnown(const std::vector<double>& xs) {
  double sum = 0;
  int n = 0;
  for (double x : xs)
    if (std::isfinite(x)) sum += x, ++n;
  return n ? sum / n : NAN;
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g s", s);
  return buf;
}

}  // namespace

ThreadTuner::ThreadTuner(int maxThreads, Options options)
    : m_max(std::max(1, maxThreads)),
      m_options(std::move(options)),
      m_chosen(m_max),
      m_interval(m_options.firstInterval) {}

int ThreadTuner::nextCandidate() {
  if (m_chosen >= m_max) return m_max - 1;
  if (m_chosen <= 1) return 2;
  return m_tryLower ? m_chosen - 1 : m_chosen + 1;
}

void ThreadTuner::startProbe() {
  m_candidate = nextCandidate();
  m_probing = true;
  m_probe.clear();
  m_probeOthers.clear();
}

void ThreadTuner::record(double stepSeconds, double otherCores) {
  if (++m_steps <= m_options.warmupSteps) return;
  if (m_probing) {
    m_probe.push_back(stepSeconds);
    m_probeOthers.push_back(otherCores);
    if (int(m_probe.size()) < m_options.probeSteps) return;
    const double tried = median(m_probe), current = median(m_window);
    m_probing = false;
    m_sinceProbe = 0;
    if (tried * m_options.switchGain < current) {
      m_note = "train.threads=0: now " + std::to_string(m_candidate) + " threads instead of " +
               std::to_string(m_chosen) + " (a step took " + seconds(tried) + " against " +
               seconds(current) +
               "; other programs are using cores or released them); train.threads=N fixes the "
               "count";
      // Keep going the way that won; a probe the other way comes after one that loses.
      m_tryLower = m_candidate < m_chosen;
      if (m_candidate < m_chosen) m_othersWhenFewer = meanKnown(m_probeOthers);
      m_chosen = m_candidate;
      m_window.clear();
      m_others.clear();
      m_interval = m_options.firstInterval;
      m_baseline = tried;
    } else {
      m_interval = std::min<int64_t>(m_options.maxInterval, 2 * m_interval);
      m_baseline = current;
      m_tryLower = !m_tryLower;
    }
    return;
  }
  m_window.push_back(stepSeconds);
  m_others.push_back(otherCores);
  if (int(m_window.size()) > m_options.windowSteps) {
    m_window.erase(m_window.begin());
    m_others.erase(m_others.begin());
  }
  ++m_sinceProbe;
  if (m_max <= 1 || int(m_window.size()) < m_options.windowSteps) return;
  const double current = median(m_window);
  const double others = meanKnown(m_others);
  // Others released cores since fewer threads won: try one more now.
  const double before = m_othersWhenFewer;
  if (m_chosen < m_max && std::isfinite(others) && std::isfinite(before) &&
      (others <= before - m_options.releasedCores ||
       (others < m_options.idleOthers && before >= m_options.idleOthers))) {
    m_tryLower = false;
    m_othersWhenFewer = others;  // one probe per release; a lost one waits for the next release
    m_interval = m_options.firstInterval;
    startProbe();
    return;
  }
  const bool drifted = m_baseline > 0 && (current > m_baseline * m_options.driftRatio ||
                                          current * m_options.driftRatio < m_baseline);
  if (drifted) m_interval = m_options.firstInterval;
  if (!drifted && m_sinceProbe < m_interval) return;
  if (std::isfinite(others)) {
    // Nothing else runs: fewer threads cannot be faster (a slower step is the machine, not us).
    if (others < m_options.idleOthers && nextCandidate() < m_chosen) {
      m_sinceProbe = 0;
      m_baseline = current;
      return;
    }
    // The others still hold what they held when fewer threads won: more threads are tried only
    // at the longest interval (in case that win was the machine's noise); a release is seen above.
    if (nextCandidate() > m_chosen && m_sinceProbe < m_options.maxInterval) return;
  }
  startProbe();
}

std::string ThreadTuner::takeNote() {
  return std::exchange(m_note, std::string());
}

}  // namespace fp4lab::train
