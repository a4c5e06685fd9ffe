// What a live chart draws of a curve kept at full resolution: smoothing over the whole series (so
// it does not depend on zoom or run length), then buckets over the visible x-range at about the
// plot's width in pixels: the last value of each bucket is the line, min and max the faint band.
// Plain C++ (no Qt) so tests can compare it with brute force and the benchmark can time it.
#pragma once

#include <cstddef>
#include <vector>

#include "fp4lab/widgets/run_curves.h"

namespace fp4lab::widgets {

struct BucketedCurve {
  Points line;       // at most 2 * buckets (+2 edge) points, x increasing
  Points low, high;  // min and max of each bucket at the line's x; empty when not bucketed
  bool bucketed() const { return !low.empty(); }
};

// `points` in log order with non-decreasing x and finite values (RunCurves::series). Keeps the
// points in [x0, x1] plus the nearest one outside on each side (so the line reaches the edges).
// When those are at most 2 * buckets, they are returned as they are (no band); otherwise
// [x0, x1] is cut into `buckets` equal buckets and each non-empty bucket gives its last point to
// the line and its min and max to the band. buckets < 1 counts as 1.
BucketedCurve bucketCurve(const Points& points, double x0, double x1, int buckets);
// The same over single-precision points: what a chart keeps per run (half the memory; a float's
// 24-bit mantissa is far finer than a pixel).
using FloatPoints = std::vector<std::pair<float, float>>;
BucketedCurve bucketCurve(const FloatPoints& points, double x0, double x1, int buckets);

// The trailing mean over the last `window` points (fewer at the start); window <= 1 returns the
// values as they are. Non-finite values pass through and are not averaged.
std::vector<double> movingAverage(const std::vector<double>& y, int window);

// What a chart's settings do to a curve before bucketing: TensorBoard's debiased EMA
// (weight > 0), then a moving average (window > 1). Returns the points with the values replaced.
Points smoothCurve(const Points& points, double emaWeight, int movingAverageWindow);

// The y value of the curve at x, by bisection: the last point with x' <= x (NaN before the first
// point or for an empty curve). The hover read-out.
double valueAt(const Points& points, double x);
double valueAt(const FloatPoints& points, double x);

}  // namespace fp4lab::widgets
