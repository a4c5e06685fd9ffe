// Bucketing and smoothing of full-resolution curves for drawing.
#include "fp4lab/widgets/curve_buckets.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "fp4lab/widgets/run_charts.h"

namespace fp4lab::widgets {

BucketedCurve bucketCurve(const Points& points, double x0, double x1, int buckets) {
  BucketedCurve out;
  if (points.empty()) return out;
  buckets = std::max(1, buckets);
  if (!(x0 <= x1)) std::swap(x0, x1);
  const auto byX = [](const std::pair<double, double>& p, double x) { return p.first < x; };
  // [first, last): the points inside [x0, x1], widened by one on each side.
  auto first = std::lower_bound(points.begin(), points.end(), x0, byX);
  auto last =
      std::upper_bound(points.begin(), points.end(), x1,
                       [](double x, const std::pair<double, double>& p) { return x < p.first; });
  const bool before = first != points.begin(), after = last != points.end();
  const size_t inside = size_t(last - first);
  if (inside <= size_t(2 * buckets)) {
    out.line.assign(before ? first - 1 : first, after ? last + 1 : last);
    return out;
  }
  if (before) out.line.push_back(*(first - 1));
  // Bucket of a point: floor((x - x0) / width), the last bucket closed at x1.
  const double width = (x1 - x0) / buckets;
  const auto bucketOf = [&](double x) {
    return width > 0 ? std::clamp(int(std::floor((x - x0) / width)), 0, buckets - 1) : 0;
  };
  auto it = first;
  while (it != last) {
    const int b = bucketOf(it->first);
    double lo = it->second, hi = it->second;
    auto end = it + 1;
    for (; end != last && bucketOf(end->first) == b; ++end) {
      lo = std::min(lo, end->second);
      hi = std::max(hi, end->second);
    }
    const auto& lastPoint = *(end - 1);
    out.line.push_back(lastPoint);
    out.low.emplace_back(lastPoint.first, lo);
    out.high.emplace_back(lastPoint.first, hi);
    it = end;
  }
  if (after) out.line.push_back(*last);
  return out;
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

double valueAt(const Points& points, double x) {
  const auto it =
      std::upper_bound(points.begin(), points.end(), x,
                       [](double v, const std::pair<double, double>& p) { return v < p.first; });
  if (it == points.begin()) return std::numeric_limits<double>::quiet_NaN();
  return (it - 1)->second;
}

}  // namespace fp4lab::widgets
