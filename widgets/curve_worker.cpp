// The chart worker thread and the frame it computes.
#include "fp4lab/widgets/curve_worker.h"
#include "fp4lab/widgets/vector_state.h"

#include <algorithm>
#include <utility>

namespace fp4lab::widgets {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::shared_ptr<const FloatPoints> toFloat(const Points& p) {
  auto out = std::make_shared<FloatPoints>();
  out->reserve(p.size());
  for (const auto& [x, y] : p) out->emplace_back(float(x), float(y));
  return out;
}

// A zigzag through each bucket's min and max: buckets two pixels apart fill in as a band, at the
// cost of one line series (an area series costs ten times as much to paint).
Points zigzag(const BucketedCurve& b) {
  Points out;
  out.reserve(2 * b.low.size());
  for (size_t i = 0; i < b.low.size(); ++i) {
    const bool up = i % 2 == 0;
    const double x = b.low[i].first, lo = b.low[i].second, hi = b.high[i].second;
    out.emplace_back(x, up ? lo : hi);
    out.emplace_back(x, up ? hi : lo);
  }
  return out;
}

}  // namespace

size_t CurveFrame::points() const {
  size_t n = 0;
  for (const Run& r : runs) n += r.line.size() + r.faint.size() + r.band.size();
  return n;
}

Points chartPoints(const RunCurves& curves, const std::string& series, const CurveSettings& s) {
  Points raw = curves.series(series, s.x);
  const auto byX = [](const auto& a, const auto& b) { return a.first < b.first; };
  if (!std::is_sorted(raw.begin(), raw.end(), byX)) std::stable_sort(raw.begin(), raw.end(), byX);
  if (s.logY) {
    Points positive;
    positive.reserve(raw.size());
    for (const auto& [x, y] : raw)
      if (y > 0) positive.emplace_back(x, std::log10(y));
    raw = std::move(positive);
  }
  return raw;
}

CurveFrame computeFrame(const CurveRequest& request, CurveCache& cache) {
  CurveFrame frame;
  frame.settings = request.settings;
  const CurveSettings& s = request.settings;
  std::vector<const RunSnapshot*> runs;
  if (request.runs) {
    for (const RunSnapshot& run : *request.runs)
      if (request.shown.count(run.id) && run.curves) runs.push_back(&run);
  }
  const bool smoothing = s.smoothed();
  const auto inDetail = [&](const std::string& id) {
    return id == request.selected || runs.size() <= kDetailedRuns;
  };
  // The transformed curves: rebuilt for a run that grew or under new settings.
  std::map<std::string, CurveCache::Entry> kept;
  for (const RunSnapshot* run : runs) {
    CurveCache::Entry entry;
    if (auto it = cache.runs.find(run->id); it != cache.runs.end()) entry = std::move(it->second);
    const bool stale = entry.source != run->curves || entry.settings != s || !entry.shown;
    const bool wantRaw = smoothing && inDetail(run->id);
    if (stale || (wantRaw && !entry.raw)) {
      const Points raw = chartPoints(*run->curves, request.series, s);
      if (stale) {
        entry.source = run->curves;
        entry.settings = s;
        entry.shown = toFloat(smoothCurve(raw, s.smoothing, s.movingAverage));
        entry.raw.reset();
      }
      if (wantRaw) entry.raw = toFloat(raw);
    }
    if (!wantRaw) entry.raw.reset();
    kept.emplace(run->id, std::move(entry));
  }
  cache.runs = std::move(kept);

  // x: the data's range while following, else the one asked for.
  double x0 = request.x0, x1 = request.x1;
  if (request.follow) {
    double lo = kInf, hi = -kInf;
    for (const auto& [id, e] : cache.runs) {
      if (e.shown->empty()) continue;
      lo = std::min(lo, double(e.shown->front().first));
      hi = std::max(hi, double(e.shown->back().first));
    }
    if (!(lo <= hi)) lo = 0, hi = 1;
    if (hi == lo) lo -= 0.5, hi += 0.5;
    x0 = lo, x1 = hi;
  }
  frame.x0 = x0, frame.x1 = x1;
  // One bucket per two pixels, within the chart's point budget.
  frame.buckets = std::clamp(kChartPointBudget / std::max<int>(1, int(runs.size())), 50,
                             std::max(50, request.plotWidth / 2));

  for (const RunSnapshot* run : runs) {
    const CurveCache::Entry& e = cache.runs.at(run->id);
    CurveFrame::Run r;
    r.id = run->id;
    r.name = run->name;
    r.source = run->curves;
    r.shown = e.shown;
    r.selected = run->id == request.selected;
    r.detail = inDetail(run->id);
    BucketedCurve b = bucketCurve(*e.shown, x0, x1, frame.buckets);
    for (const auto& [x, y] : b.line)
      if (x >= x0 && x <= x1) r.yLo = std::min(r.yLo, y), r.yHi = std::max(r.yHi, y);
    // In detail: the raw curve faint under a smoothed one, and the min/max band when bucketed.
    if (r.detail) {
      if (smoothing && e.raw) {
        BucketedCurve raw = bucketCurve(*e.raw, x0, x1, frame.buckets);
        if (raw.bucketed()) r.band = zigzag(raw);
        r.faint = std::move(raw.line);
      } else if (b.bucketed()) {
        r.band = zigzag(b);
      }
    }
    r.line = std::move(b.line);
    frame.runs.push_back(std::move(r));
  }
  return frame;
}

CurveWorker::CurveWorker() : m_thread([this] { run(); }) {}

CurveWorker::~CurveWorker() {
  {
    std::lock_guard lock(m_mutex);
    m_stop = true;
  }
  m_wake.notify_all();
  m_done.notify_all();
  m_thread.join();
}

CurveWorker::Client& CurveWorker::client(Tag tag) {
  Client& c = m_clients[tag];
  if (c.serial == 0) c.serial = ++m_serials;
  return c;
}

void CurveWorker::setDelivery(Tag tag, Delivery delivery) {
  std::lock_guard lock(m_mutex);
  client(tag).delivery = std::move(delivery);
}

uint64_t CurveWorker::submit(Tag tag, CurveRequest request) {
  uint64_t generation = 0;
  {
    std::lock_guard lock(m_mutex);
    Client& c = client(tag);
    generation = ++c.lastGeneration;
    if (c.pending) {
      ++m_replaced;  // the queued request is replaced where it stands in the queue
    } else {
      m_queue.push_back(tag);
    }
    c.pending = std::make_unique<CurveRequest>(std::move(request));
    c.pendingGeneration = generation;
  }
  m_wake.notify_one();
  return generation;
}

std::shared_ptr<const CurveFrame> CurveWorker::wait(Tag tag, uint64_t generation) {
  std::unique_lock lock(m_mutex);
  std::shared_ptr<const CurveFrame> result;
  m_done.wait(lock, [&] {
    const auto it = m_clients.find(tag);
    if (m_stop || it == m_clients.end()) return true;
    if (it->second.latest && it->second.latest->generation >= generation) {
      result = it->second.latest;
      return true;
    }
    return false;
  });
  return result;
}

void CurveWorker::forget(Tag tag) {
  std::lock_guard lock(m_mutex);
  m_clients.erase(tag);
  m_queue.erase(std::remove(m_queue.begin(), m_queue.end(), tag), m_queue.end());
  m_done.notify_all();
}

uint64_t CurveWorker::computed() const {
  std::lock_guard lock(m_mutex);
  return m_computed;
}

uint64_t CurveWorker::replaced() const {
  std::lock_guard lock(m_mutex);
  return m_replaced;
}

void CurveWorker::run() {
  std::unique_lock lock(m_mutex);
  while (true) {
    m_wake.wait(lock, [&] { return m_stop || !m_queue.empty(); });
    if (m_stop) return;
    clearUpperVectorState();  // started from the GUI thread, perhaps mid-paint
    const Tag tag = m_queue.front();
    m_queue.pop_front();
    Client& c = m_clients.at(tag);
    std::unique_ptr<CurveRequest> request = std::move(c.pending);
    const uint64_t generation = c.pendingGeneration, serial = c.serial;
    // The cache travels with the work, so the client may be forgotten meanwhile.
    std::unique_ptr<CurveCache> cache = std::move(c.cache);
    lock.unlock();
    auto frame = std::make_shared<CurveFrame>(computeFrame(*request, *cache));
    frame->generation = generation;
    request.reset();  // drop the snapshots outside the lock
    lock.lock();
    ++m_computed;
    const auto it = m_clients.find(tag);
    // Forgotten while computing (and perhaps a new client at the same address).
    if (it == m_clients.end() || it->second.serial != serial) continue;
    it->second.cache = std::move(cache);
    it->second.latest = frame;
    // Under the lock: forget() cannot return while a delivery to the tag is under way.
    if (it->second.delivery) it->second.delivery(frame);
    m_done.notify_all();
  }
}

}  // namespace fp4lab::widgets
