// The colour mapping of the quantization inspector's heatmaps, as plain C++ (no Qt), so that tests
// and the benchmark can check it without a widget: a 256-entry colour table whose indices 0..254
// are the scale and whose index 255 is reserved for NaN ("not measured", a neutral grey that is
// no colour of either scale), and the value -> index mapping that fills a QImage Format_Indexed8.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace fp4lab::widgets::heatmap {

// Viridis (sequential) for one run's values; RdBu, symmetric about 0, for a difference A − B:
// blue for negative, white (#f7f7f7) at 0, red for positive.
enum class ColorMap { Viridis, RdBu };

constexpr int kScaleColors = 255;            // indices 0 .. 254
constexpr uint8_t kNanIndex = 255;           // the reserved "not measured" index
constexpr uint32_t kNanColor = 0xff8c8c8cu;  // ARGB grey of NaN cells

// ARGB colours (0xAARRGGBB): [0, 254] the scale from its low to its high end, [255] kNanColor.
const std::array<uint32_t, 256>& colorTable(ColorMap map);

// The value range a colour map spans.
struct Scale {
  double lo = 0, hi = 1;
};
// Viridis: [min, max] of the finite values (a constant map gets ±0.5 around it, or ±5%);
// RdBu: [-m, m] with m the largest |value| (1 when every value is 0). No finite value: [0, 1].
Scale autoScale(const std::vector<float>& values, ColorMap map);
// NaN or ±Inf: kNanIndex; else round((v - lo) / (hi - lo) * 254), clamped to [0, 254]. With a
// symmetric scale, 0 maps to index 127, the middle of the table.
uint8_t colorIndex(float value, Scale scale);
// Fills `out` (values.size() bytes) with colorIndex of each value.
void mapToIndices(const std::vector<float>& values, Scale scale, uint8_t* out);

// Whether a larger value of a /quant metric means a worse layer: false for sqnr_db, act_sqnr_db
// and cosine (worst = lowest), true for the errors (rel_l2, mse, max_abs, clip_frac, zero_frac,
// act_rel_l2, act_clip_frac, and any other name).
bool higherIsWorse(const std::string& metric);

}  // namespace fp4lab::widgets::heatmap
