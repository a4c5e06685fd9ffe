// Bucketing and smoothing of full-resolution curves for drawing.
#include "fp4lab/widgets/curve_buckets.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "fp4lab/widgets/run_charts.h"

namespace fp4lab::widgets {

namespace {

template <typename P>
std::pair<double, double> asDouble(const P& p) {
  return {double(p.first), double(p.second)};
}

template <typename PointList>
BucketedCurve bucketAny(const PointList& points, double x0, double x1, int buckets) {
  using Point = typename PointList::value_type;
  BucketedCurve out;
  if (points.empty()) return out;
  buckets = std::max(1, buckets);
  if (!(x0 <= x1)) std::swap(x0, x1);
  const auto byX = [](const Point& p, double x) { return double(p.first) < x; };
  // [first, last): the points inside [x0, x1], widened by one on each side.
  auto first = std::lower_bound(points.begin(), points.end(), x0, byX);
  auto last =
      std::upper_bound(points.begin(), points.end(), x1,
                       [](double x, const std::pair<double, double>& p) { return x < p.first; });
  const bool before = first != points.begin(), after = last != points.end();
  const size_t inside = size_t(last - first);
  if (inside <= size_t(2 * buckets)) {
    for (auto it = before ? first - 1 : first; it != (after ? last + 1 : last); ++it)
      out.line.push_back(asDouble(*it));
    return out;
  }
  if (before) out.line.push_back(asDouble(*(first - 1)));
  // Bucket of a point: floor((x - x0) / width), the last bucket closed at x1.
  const double width = (x1 - x0) / buckets;
  const auto bucketOf = [&](double x) {
    return width > 0 ? std::clamp(int(std::floor((x - x0) / width)), 0, buckets - 1) : 0;
  };
  // Each bucket's end by bisection (bucketOf is non-decreasing in x), then one tight pass over
  // its values: the per-point work is a min and a max, not a division.
  out.line.reserve(size_t(buckets) + 2), out.low.reserve(size_t(buckets));
  out.high.reserve(size_t(buckets));
  auto it = first;
  while (it != last) {
    const int b = bucketOf(double(it->first));
    const auto end = std::partition_point(
        it, last, [&](const Point& p) { return bucketOf(double(p.first)) <= b; });
    auto lo = it->second, hi = it->second;
    for (auto p = it + 1; p != end; ++p) {
      lo = p->second < lo ? p->second : lo;
      hi = p->second > hi ? p->second : hi;
    }
    const std::pair<double, double> lastPoint = asDouble(*(end - 1));
    out.line.push_back(lastPoint);
    out.low.emplace_back(lastPoint.first, double(lo));
    out.high.emplace_back(lastPoint.first, double(hi));
    it = end;
  }
  if (after) out.line.push_back(asDouble(*last));
  return out;
}

template <typename PointList>
double valueAtAny(const PointList& points, double x) {
  using Point = typename PointList::value_type;
  const auto it = std::upper_bound(points.begin(), points.end(), x,
                                   [](double v, const Point& p) { return v < double(p.first); });
  if (it == points.begin()) return std::numeric_limits<double>::quiet_NaN();
  return double((it - 1)->second);
}

}  // namespace

BucketedCurve bucketCurve(const Points& points, double x0, double x1, int buckets) {
  return bucketAny(points, x0, x1, buckets);
}

BucketedCurve bucketCurve(const FloatPoints& points, double x0, double x1, int buckets) {
  return bucketAny(points, x0, x1, buckets);
}

double valueAt(const Points& points, double x) {
  return valueAtAny(points, x);
}
double valueAt(const FloatPoints& points, double x) {
  return valueAtAny(points, x);
}

std::vector<double> movingAverage(const std::vector<double>& y, int window) {
  if (window <= 1) return y;
  std::vector<double> out(y.size());
  // Sum over the last `window` finite values, kept as a running sum of a sliding window.
  std::vector<double> recent;
  recent.reserve(size_t(window));
  size_t head = 0;
  double sum = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    if (!std::isfinite(y[i])) {
      out[i] = y[i];
      continue;
    }
    if (recent.size() < size_t(window)) {
      recent.push_back(y[i]);
    } else {
      sum -= recent[head];
      recent[head] = y[i];
      head = (head + 1) % size_t(window);
    }
    sum += y[i];
    out[i] = sum / double(recent.size());
  }
  return out;
}

Points smoothCurve(const Points& points, double emaWeight, int movingAverageWindow) {
  if (!(emaWeight > 0) && movingAverageWindow <= 1) return points;
  std::vector<double> y;
  y.reserve(points.size());
  for (const auto& p : points) y.push_back(p.second);
  if (emaWeight > 0) y = detail::debiasedEma(y, emaWeight);
  y = movingAverage(y, movingAverageWindow);
  Points out = points;
  for (size_t i = 0; i < out.size(); ++i) out[i].second = y[i];
  return out;
}

}  // namespace fp4lab::widgets
