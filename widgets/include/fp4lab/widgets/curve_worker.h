// The chart worker: one thread that turns the runs' full-resolution curves into what a CurvePanel
// draws, so the GUI thread only hands Qt Charts a few thousand points. Per frame it transforms
// each shown run's series (x units, log y, smoothing, single precision; cached while the run and
// the settings stay the same), buckets the visible x-range at the plot's width and builds the
// line, the faint raw curve and the min/max band. Requests carry a tag (the panel): a new request
// replaces the queued one with the same tag, so a zoom drag or a burst of log updates never builds
// a backlog (RenderDoc's tagged async invoke; ../shared/design/gui.md). Plain C++: no Qt.
#pragma once

#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "fp4lab/widgets/curve_buckets.h"
#include "fp4lab/widgets/run_snapshot.h"

namespace fp4lab::widgets {

struct CurveSettings {
  XAxis x = XAxis::Step;
  bool logY = true;
  double smoothing = 0;   // debiased EMA weight in [0, 1)
  int movingAverage = 1;  // trailing window in points; 1: off
  bool operator==(const CurveSettings& o) const {
    return x == o.x && logY == o.logY && smoothing == o.smoothing &&
           movingAverage == o.movingAverage;
  }
  bool operator!=(const CurveSettings& o) const { return !(*this == o); }
  bool smoothed() const { return smoothing > 0 || movingAverage > 1; }
};

// What one panel wants drawn.
struct CurveRequest {
  std::string series;  // "train/loss", "eval/val_loss", ...
  RunSnapshotsPtr runs;
  std::set<std::string> shown;  // run ids
  std::string selected;         // drawn thick and in detail
  CurveSettings settings;
  bool follow = true;  // x-range: the data's; false: [x0, x1]
  double x0 = 0, x1 = 1;
  int plotWidth = 600;  // pixels
};

// What the panel hands the chart, computed off the GUI thread.
struct CurveFrame {
  uint64_t generation = 0;
  CurveSettings settings;  // the request's
  double x0 = 0, x1 = 1;   // the range bucketed: the data's when following
  int buckets = 0;
  struct Run {
    std::string id, name;
    std::shared_ptr<const RunCurves> source;
    // The transformed, smoothed curve at full resolution (hover read-out, click to select).
    std::shared_ptr<const FloatPoints> shown;
    bool selected = false, detail = false;
    Points line;   // the bucketed curve
    Points faint;  // the raw curve under a smoothed one (detail only)
    Points band;   // min/max per bucket as a zigzag through each bucket's extremes (detail only)
    double yLo = std::numeric_limits<double>::infinity();  // the line's range inside [x0, x1]
    double yHi = -std::numeric_limits<double>::infinity();
  };
  std::vector<Run> runs;  // the shown runs that have curves, in snapshot order
  size_t points() const;
};

// Runs drawn with their raw curve and min/max band, besides the selected one, when at most this
// many are shown.
constexpr size_t kDetailedRuns = 4;
// Points per chart: Qt Charts spends about 10 us per point on a replace() and its paint
// (docs/performance.md), so 20 runs share 4000.
constexpr int kChartPointBudget = 4000;

// A run's series in the chart's units: x as chosen, sorted (wall time and tokens may step back
// across a resume), log10 of the positive values on a log axis.
Points chartPoints(const RunCurves& curves, const std::string& series, const CurveSettings& s);

// The transformed curves of one panel's runs, kept between its frames.
struct CurveCache {
  struct Entry {
    std::shared_ptr<const RunCurves> source;
    CurveSettings settings;
    std::shared_ptr<const FloatPoints> shown, raw;  // raw: only while drawn in detail, smoothed
  };
  std::map<std::string, Entry> runs;
};

// One frame of `request`, reusing and updating `cache`. The worker's work; callable on any one
// thread at a time per cache (tests compare it with what a panel draws).
CurveFrame computeFrame(const CurveRequest& request, CurveCache& cache);

class CurveWorker {
 public:
  using Tag = const void*;
  // Called on the worker thread with each computed frame of a tag (post it to your thread).
  using Delivery = std::function<void(std::shared_ptr<const CurveFrame>)>;

  CurveWorker();
  ~CurveWorker();  // finishes the frame under way, drops the queued ones
  CurveWorker(const CurveWorker&) = delete;
  CurveWorker& operator=(const CurveWorker&) = delete;

  void setDelivery(Tag tag, Delivery delivery);
  // Queues a frame; replaces the tag's queued request if there is one. Returns its generation
  // (increasing per tag).
  uint64_t submit(Tag tag, CurveRequest request);
  // Blocks until a frame of at least `generation` of the tag is computed and returns it (the
  // synchronous redraw of tests and benchmarks); null when the tag was forgotten.
  std::shared_ptr<const CurveFrame> wait(Tag tag, uint64_t generation);
  // Drops the tag's queued request, cache and delivery; after it returns nothing is delivered to
  // the tag. (A panel calls it from its destructor.)
  void forget(Tag tag);

  // Counters for tests: frames computed and requests replaced before they ran.
  uint64_t computed() const;
  uint64_t replaced() const;

 private:
  struct Client {
    uint64_t serial = 0;  // tells a client from a later one at the same address
    std::unique_ptr<CurveRequest> pending;
    uint64_t lastGeneration = 0, pendingGeneration = 0;
    std::unique_ptr<CurveCache> cache = std::make_unique<CurveCache>();
    Delivery delivery;
    std::shared_ptr<const CurveFrame> latest;
  };
  void run();
  Client& client(Tag tag);  // under the lock

  mutable std::mutex m_mutex;
  std::condition_variable m_wake, m_done;
  std::map<Tag, Client> m_clients;
  std::deque<Tag> m_queue;  // tags with a pending request, oldest first
  bool m_stop = false;
  uint64_t m_computed = 0, m_replaced = 0, m_serials = 0;
  std::thread m_thread;
};

}  // namespace fp4lab::widgets
