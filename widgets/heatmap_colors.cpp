// Colour tables and value mapping of the heatmaps (plain C++).
#include "fp4lab/widgets/heatmap_colors.h"

#include <algorithm>
#include <cmath>

namespace fp4lab::widgets::heatmap {

namespace {

// Piecewise-linear interpolation through evenly spaced RGB stops, at t in [0, 1].
uint32_t interpolate(const std::vector<uint32_t>& stops, double t) {
  const double x = std::clamp(t, 0.0, 1.0) * double(stops.size() - 1);
  const size_t i = std::min(size_t(x), stops.size() - 2);
  const double f = x - double(i);
  uint32_t out = 0xff000000u;
  for (int shift : {16, 8, 0}) {
    const double a = double((stops[i] >> shift) & 0xff), b = double((stops[i + 1] >> shift) & 0xff);
    out |= uint32_t(std::lround(a + (b - a) * f)) << shift;
  }
  return out;
}

std::array<uint32_t, 256> build(const std::vector<uint32_t>& stops) {
  std::array<uint32_t, 256> table{};
  for (int i = 0; i < kScaleColors; ++i)
    table[i] = interpolate(stops, double(i) / (kScaleColors - 1));
  table[kNanIndex] = kNanColor;
  return table;
}

}  // namespace

const std::array<uint32_t, 256>& colorTable(ColorMap map) {
  // matplotlib's viridis at t = 0, 1/8, ..., 1.
  static const std::array<uint32_t, 256> viridis = build(
      {0x440154, 0x472c7a, 0x3b518b, 0x2c718e, 0x21908d, 0x27ad81, 0x5cc863, 0xaadc32, 0xfde725});
  // ColorBrewer's 11-class RdBu, reversed: blue (negative) to red (positive), #f7f7f7 in the
  // middle.
  static const std::array<uint32_t, 256> rdbu =
      build({0x053061, 0x2166ac, 0x4393c3, 0x92c5de, 0xd1e5f0, 0xf7f7f7, 0xfddbc7, 0xf4a582,
             0xd6604d, 0xb2182b, 0x67001f});
  return map == ColorMap::Viridis ? viridis : rdbu;
}

Scale autoScale(const std::vector<float>& values, ColorMap map) {
  double lo = INFINITY, hi = -INFINITY, m = 0;
  for (float v : values) {
    if (!std::isfinite(v)) continue;
    lo = std::min(lo, double(v));
    hi = std::max(hi, double(v));
    m = std::max(m, std::fabs(double(v)));
  }
  if (!(lo <= hi)) return {0, 1};
  if (map == ColorMap::RdBu) {
    if (m == 0) m = 1;
    return {-m, m};
  }
  if (lo == hi) {
    const double pad = lo == 0 ? 0.5 : std::fabs(lo) * 0.05;
    return {lo - pad, hi + pad};
  }
  return {lo, hi};
}

uint8_t colorIndex(float value, Scale scale) {
  if (!std::isfinite(value)) return kNanIndex;
  const double span = scale.hi - scale.lo;
  const double t = span > 0 ? (double(value) - scale.lo) / span : 0.5;
  const long i = std::lround(std::clamp(t, 0.0, 1.0) * (kScaleColors - 1));
  return uint8_t(i);
}

void mapToIndices(const std::vector<float>& values, Scale scale, uint8_t* out) {
  for (size_t i = 0; i < values.size(); ++i) out[i] = colorIndex(values[i], scale);
}

bool higherIsWorse(const std::string& metric) {
  return !(metric == "sqnr_db" || metric == "act_sqnr_db" || metric == "cosine");
}

}  // namespace fp4lab::widgets::heatmap
