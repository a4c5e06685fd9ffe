// The thread count of a run with train.threads=0: every core it may use while that is the fastest,
// fewer while other programs keep cores busy.
//
// A desktop workbench shares its machine (the window draws while a run trains; the user compiles,
// browses, runs a second job). LibTorch's OpenMP regions split their work evenly over the threads
// and wait for the last one, so a thread whose core another program holds stalls every region: on
// the 2-core build machine with one core busy, two threads trained the built-in model at about
// half the speed of one (docs/performance.md, "Under load"). The tuner times the steps it runs,
// tries a neighbouring count now and then, and keeps whichever is faster. It is told how busy
// other programs kept the cores during each step (OtherCpuLoad): with none, fewer threads cannot
// be faster and are not tried (an idle machine pays nothing); when others release cores, more
// threads are tried at once rather than at the next periodic probe. Training computes the
// same bits at every thread count (the engine's loops and the FP4 kernels chunk by size, not by
// thread; test_trainer checks a run that switches against one that does not), so the choice
// changes speed only.
//
// Plain C++: the trainer applies the count (LibTorch's pool and the FP4 kernels' own).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace fp4lab::train {

class ThreadTuner {
 public:
  struct Options {
    int warmupSteps = 2;         // not timed: the first steps allocate and fault in memory
    int windowSteps = 6;         // steps at the chosen count that a probe is compared against
    int probeSteps = 3;          // steps at the count being tried (their median is compared)
    int firstInterval = 6;       // steps at the chosen count before the first probe
    int maxInterval = 128;       // a probe that loses doubles the interval, up to this
    double switchGain = 1.1;     // a probe must be this much faster to be adopted
    double driftRatio = 1.3;     // the chosen count's steps this much slower or faster: probe now
    double idleOthers = 0.25;    // other programs using fewer cores than this: the machine is ours
    double releasedCores = 0.5;  // others using this many cores fewer than when fewer threads won
  };

  explicit ThreadTuner(int maxThreads) : ThreadTuner(maxThreads, Options{}) {}
  ThreadTuner(int maxThreads, Options options);

  // The count to run the next step at (the chosen one, or the one being tried).
  int threadsForNextStep() const { return m_probing ? m_candidate : m_chosen; }
  // The step just run took `seconds` at threadsForNextStep(), while other programs kept
  // `otherCores` cores busy (NaN: unknown; then fewer threads are tried periodically all the same).
  void record(double seconds, double otherCores = NAN);
  // The count adopted between steps; changes only when a probe wins.
  int chosen() const { return m_chosen; }
  // What the last decision that changed the chosen count measured, once (empty otherwise).
  std::string takeNote();

 private:
  int nextCandidate();
  void startProbe();

  int m_max;
  Options m_options;
  int m_chosen;
  int m_candidate = 0;
  bool m_probing = false;
  bool m_tryLower = true;  // alternates the direction of probes away from the ends
  int64_t m_steps = 0;
  int64_t m_sinceProbe = 0;
  int64_t m_interval;
  std::vector<double> m_window;  // recent step times at the chosen count (the last windowSteps)
  std::vector<double> m_others;  // the other programs' cores during those steps
  std::vector<double> m_probe;   // step times of the current probe
  std::vector<double> m_probeOthers;
  double m_othersWhenFewer = NAN;  // others' cores when a lower count last won
  double m_baseline = 0;           // the chosen count's median step when it was last compared
  std::string m_note;
};

}  // namespace fp4lab::train
