// train.threads=0's tuner against a simulated machine: each step takes what the thread count it
// ran at costs under the load of the moment, and the tuner has to end up at the faster count,
// follow the load when it comes and goes, and spend few steps trying the slower one.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <map>

#include "fp4lab/common/system.h"
#include "train/thread_tuner.h"

using fp4lab::train::ThreadTuner;

namespace {

// Step seconds on a 2-core machine (the shape of tests/bench/bench_under_load.py's numbers): two
// threads 1.0 s idle, one thread 1.7 s; with another program on one core, two threads 2.9 s and
// one thread still 1.7 s.
double twoCoreMachine(int threads, bool loaded) {
  if (threads == 1) return 1.7;
  return loaded ? 2.9 : 1.0;
}

struct Trace {
  std::map<int, int> stepsAt;  // thread count -> steps run at it
  std::vector<int> chosen;     // after every step
  std::vector<std::string> notes;
};

// `others(step)`: the cores other programs kept busy (NaN: unknown to the tuner).
Trace simulate(ThreadTuner& tuner, int steps,
               const std::function<double(int step, int threads)>& cost,
               const std::function<double(int step)>& others) {
  Trace t;
  for (int s = 0; s < steps; ++s) {
    const int n = tuner.threadsForNextStep();
    t.stepsAt[n] += 1;
    tuner.record(cost(s, n), others(s));
    t.chosen.push_back(tuner.chosen());
    if (std::string note = tuner.takeNote(); !note.empty()) t.notes.push_back(note);
  }
  return t;
}

}  // namespace

double unknown(int) {
  return NAN;
}

TEST_CASE("Thread tuner: an idle machine keeps every core and never tries fewer",
          "[train][threads]") {
  ThreadTuner tuner(2);
  CHECK(tuner.threadsForNextStep() == 2);
  // No other program: even steps 40% slower (the machine's own speed changing) try nothing.
  Trace t = simulate(
      tuner, 600, [](int s, int n) { return twoCoreMachine(n, false) * (s % 100 < 50 ? 1 : 1.4); },
      [](int) { return 0.05; });
  CHECK(tuner.chosen() == 2);
  CHECK(t.notes.empty());
  CHECK(t.stepsAt[1] == 0);
}

TEST_CASE("Thread tuner: without load figures, one thread is tried rarely on an idle machine",
          "[train][threads]") {
  ThreadTuner tuner(2);
  Trace t = simulate(
      tuner, 600, [](int, int n) { return twoCoreMachine(n, false); }, unknown);
  CHECK(tuner.chosen() == 2);
  CHECK(t.notes.empty());
  // Probes of one thread: a few steps every doubling interval, a small share of the run.
  CHECK(t.stepsAt[1] > 0);
  CHECK(t.stepsAt[1] <= 600 * 0.05);
}

TEST_CASE("Thread tuner: with a core busy, one thread is adopted early and kept",
          "[train][threads]") {
  for (bool known : {true, false}) {
    INFO("load figures known: " << known);
    ThreadTuner tuner(2);
    Trace t = simulate(
        tuner, 400, [](int, int n) { return twoCoreMachine(n, true); },
        [&](int) { return known ? 1.0 : NAN; });
    CHECK(tuner.chosen() == 1);
    REQUIRE(t.notes.size() == 1);
    CHECK(t.notes[0].find("now 1 threads instead of 2") != std::string::npos);
    // Adopted at the first probe, and the probes of two threads afterwards stay rare.
    CHECK(t.chosen[15] == 1);
    CHECK(t.stepsAt[2] <= 15 + 400 * 0.05);
  }
}

TEST_CASE("Thread tuner: follows a load that comes and goes", "[train][threads]") {
  const auto busy = [](int s) { return s >= 200 && s < 500; };
  SECTION("with load figures: back as soon as the core is released") {
    ThreadTuner tuner(2);
    Trace t = simulate(
        tuner, 900, [&](int s, int n) { return twoCoreMachine(n, busy(s)); },
        [&](int s) { return busy(s) ? 1.0 : 0.0; });
    CHECK(t.chosen[199] == 2);
    // The load slows the chosen count's steps (drift): probed and switched within a few steps.
    CHECK(t.chosen[200 + 12] == 1);
    CHECK(t.chosen[499] == 1);
    CHECK(t.chosen[500 + 12] == 2);
    CHECK(tuner.chosen() == 2);
    CHECK(t.notes.size() == 2);
  }
  SECTION("without: its end is found by the next periodic probe") {
    ThreadTuner tuner(2);
    Trace t = simulate(
        tuner, 900, [&](int s, int n) { return twoCoreMachine(n, busy(s)); }, unknown);
    CHECK(t.chosen[199] == 2);
    CHECK(t.chosen[200 + 12] == 1);
    CHECK(t.chosen[499] == 1);
    CHECK(t.chosen[500 + 128 + 12] == 2);
    CHECK(t.notes.size() == 2);
  }
}

TEST_CASE("Thread tuner: noise within the switching margin changes nothing", "[train][threads]") {
  ThreadTuner tuner(4);
  // Every count from 3 to 4 costs the same up to +-4% alternating noise; fewer is slower.
  Trace t = simulate(
      tuner, 500,
      [](int s, int n) {
        const double noise = s % 2 ? 1.04 : 0.96;
        return (n >= 3 ? 1.0 : 4.0 / n) * noise;
      },
      [](int) { return 1.0; });
  CHECK(t.notes.empty());
  CHECK(tuner.chosen() == 4);
}

TEST_CASE("Thread tuner: climbs down one count at a time on a bigger machine", "[train][threads]") {
  ThreadTuner tuner(8);
  // Two cores held by other programs: 6 threads are fastest; more stall, fewer under-use.
  Trace t = simulate(
      tuner, 600, [](int, int n) { return n <= 6 ? 6.0 / n : 1.0 + 0.8 * (n - 6); },
      [](int) { return 2.0; });
  CHECK(tuner.chosen() == 6);
  CHECK(t.notes.size() == 2);  // 8 -> 7 -> 6
}

TEST_CASE("Thread tuner: one thread is never tuned", "[train][threads]") {
  ThreadTuner tuner(1);
  Trace t = simulate(
      tuner, 300, [](int, int) { return 1.0; }, [](int) { return 1.0; });
  CHECK(t.stepsAt.size() == 1);
  CHECK(t.stepsAt.at(1) == 300);
  CHECK(t.notes.empty());
}

TEST_CASE("Other programs' CPU load is measured in cores", "[train][threads]") {
  fp4lab::OtherCpuLoad load;
  CHECK(std::isnan(load.sample()));  // nothing to compare with yet
  // Another process spins for 400 ms while this one sleeps: about one core of others' load (more
  // when other tests run alongside; a busy machine may give the child less than a whole core).
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(400);
    volatile uint64_t spin = 0;
    while (std::chrono::steady_clock::now() < until) spin = spin + 1;
    ::_exit(0);
  }
  ::waitpid(child, nullptr, 0);
  const double others = load.sample();
  REQUIRE(std::isfinite(others));
  CHECK(others >= 0.4);
  CHECK(others <= fp4lab::usableCores() + 0.5);
}
