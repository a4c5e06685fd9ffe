// fp4lab_analyze: see fp4lab/analyze/analyze.h.
#include "fp4lab/analyze/analyze.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "fp4lab/common/files.h"
#include "fp4lab/error.h"
#include "fp4lab/export/fused_groups.h"
#include "fp4lab/common/glob.h"
#include "fp4lab/io/safetensors.h"
#include "fp4lab/kernels/formats.h"
#include "fp4lab/run/run_config.h"

namespace fp4lab::analyze {
namespace {

using json = nlohmann::json;

bool matchesAny(const std::vector<std::string>& patterns, const std::string& name) {
  for (const std::string& p : patterns)
    if (globMatch(p, name)) return true;  // the recipes' and the exporter's matcher
  return false;
}

bool endsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

json readJsonFile(const std::string& path) {
  json j = json::parse(files::readFile(path), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw Error("malformed JSON (not an object)", path, "is the file complete?");
  return j;
}

// The folder's safetensors files and where each tensor is.
struct Folder {
  std::vector<std::unique_ptr<io::SafetensorsFile>> files;
  std::vector<std::pair<size_t, const io::TensorInfo*>> tensors;  // file, then data order
};

Folder openFolder(const std::string& dir) {
  if (!files::isDirectory(dir))
    throw Error(files::exists(dir) ? "not a folder" : "model folder does not exist", dir,
                "pass a Hugging Face model folder");
  const std::vector<std::string> shards = io::modelWeightFiles(dir);
  Folder f;
  for (const std::string& name : shards) {
    f.files.push_back(std::make_unique<io::SafetensorsFile>(files::join(dir, name)));
    for (const io::TensorInfo& t : f.files.back()->tensors())
      f.tensors.push_back({f.files.size() - 1, &t});
  }
  return f;
}

std::vector<Layer> selectFrom(const Folder& folder, const Options& options) {
  const run::RunConfig defaults;
  const std::vector<std::string> include =
      options.include.empty() ? run::splitList(defaults.quantInclude) : options.include;
  std::vector<std::string> exclude = run::splitList(defaults.quantExclude);
  exclude.insert(exclude.end(), options.exclude.begin(), options.exclude.end());
  std::vector<Layer> layers;
  for (const auto& [file, t] : folder.tensors) {
    if (!endsWith(t->name, ".weight") || t->shape.size() != 2 || !io::isFloatingPoint(t->dtype))
      continue;
    const std::string module = t->name.substr(0, t->name.size() - 7);
    if (module.find("embed") != std::string::npos || module.find("wte") != std::string::npos)
      continue;
    if (!matchesAny(include, module) || matchesAny(exclude, module)) continue;
    layers.push_back({module, t->name, t->shape[0], t->shape[1]});
  }
  if (layers.empty())
    throw Error("no linear layer selected", options.modelDir,
                "check --include / --exclude (module names such as model.layers.0.mlp.down_proj)");
  return layers;
}

// sqrt(mean w^2), the amax, the outlier counts and the signed weight histogram, in two passes.
LayerOutliers outliersOf(const std::vector<float>& w) {
  LayerOutliers o;
  double sum2 = 0;
  int64_t n = 0;
  for (float v : w)
    if (std::isfinite(v)) sum2 += double(v) * v, ++n, o.amax = std::max(o.amax, std::fabs(v));
  o.rms = n > 0 ? std::sqrt(sum2 / double(n)) : 0.0;
  const LogBins& bins = weightBins();
  o.negative.assign(size_t(bins.size()), 0);
  o.positive.assign(size_t(bins.size()), 0);
  const double t3 = 3 * o.rms, t6 = 6 * o.rms, t10 = 10 * o.rms;
  for (float v : w) {
    (std::signbit(v) ? o.negative : o.positive)[size_t(bins.index(std::fabs(v)))]++;
    if (!std::isfinite(v)) continue;
    const double a = std::fabs(double(v));
    o.over3 += a > t3;
    o.over6 += a > t6;
    o.over10 += a > t10;
  }
  return o;
}

// Significand thresholds 2^(j / binsPerOctave), j = 0 .. binsPerOctave - 1, as floats.
constexpr int kMaxBinsPerOctave = 16;
const std::vector<float>& octaveThresholds(int binsPerOctave) {
  static const std::vector<std::vector<float>> table = [] {
    std::vector<std::vector<float>> t(kMaxBinsPerOctave + 1);
    for (int b = 1; b <= kMaxBinsPerOctave; ++b)
      for (int j = 0; j < b; ++j) t[size_t(b)].push_back(float(std::exp2(double(j) / b)));
    return t;
  }();
  if (binsPerOctave < 1 || binsPerOctave > kMaxBinsPerOctave)
    throw Error("bins per octave out of range: " + std::to_string(binsPerOctave));
  return table[size_t(binsPerOctave)];
}

// The same thresholds as mantissa bits (all lie in [1, 2): one exponent).
const uint32_t* significandThresholds(int binsPerOctave) {
  static const std::vector<std::vector<uint32_t>> table = [] {
    std::vector<std::vector<uint32_t>> t(kMaxBinsPerOctave + 1);
    for (int b = 1; b <= kMaxBinsPerOctave; ++b)
      for (float f : octaveThresholds(b)) t[size_t(b)].push_back(floatBits(f) & 0x7FFFFFu);
    return t;
  }();
  if (binsPerOctave < 1 || binsPerOctave > kMaxBinsPerOctave)
    throw Error("bins per octave out of range: " + std::to_string(binsPerOctave));
  return table[size_t(binsPerOctave)].data();
}

// Runs fn(i) for i in [0, n) on `threads` threads; the first exception is rethrown.
template <typename Fn>
void parallelFor(size_t n, int threads, const std::atomic<bool>* cancel, Fn fn) {
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex m;
  auto work = [&] {
    for (;;) {
      if (failed || (cancel && *cancel)) return;
      const size_t i = next++;
      if (i >= n) return;
      try {
        fn(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(m);
        if (!error) error = std::current_exception();
        failed = true;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads && size_t(t) < n; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
  if (cancel && *cancel) throw Error("analysis cancelled");
}

json number(double v) {
  return std::isfinite(v) ? json(v) : json(nullptr);
}

}  // namespace

int LogBins::index(float v) const {
  // Exactly from the bits (no libm call per element): NaN, zero, the exponent for the octave
  // (subnormals read as 2^-127, below any minExp >= -126), the significand for the bin in it.
  const uint32_t bits = floatBits(v) & 0x7FFFFFFFu;
  if (bits > 0x7F800000u) return size() - 1;
  if (bits == 0) return 0;
  const int e = int(bits >> 23) - 127;
  if (e >= maxExp) return size() - 2;  // Inf included
  if (e < minExp) return 1;
  const uint32_t mantissa = bits & 0x7FFFFFu;
  const uint32_t* t = significandThresholds(binsPerOctave);
  int sub = 0;
  for (int j = 1; j < binsPerOctave; ++j) sub += mantissa >= t[j];
  return 2 + (e - minExp) * binsPerOctave + sub;
}

double LogBins::lowerEdge(int bin) const {
  if (bin <= 1) return 0.0;
  if (bin >= size() - 1) return std::nan("");
  const int k = bin - 2, e = minExp + k / binsPerOctave, j = k % binsPerOctave;
  return std::ldexp(double(octaveThresholds(binsPerOctave)[size_t(j)]), e);
}

const LogBins& weightBins() {
  static const LogBins bins{-24, 8, 4};
  return bins;
}

const LogBins& amaxRatioBins() {
  static const LogBins bins{-16, 0, 4};
  return bins;
}

const std::vector<double>& outlierMultiples() {
  static const std::vector<double> k = {3, 6, 10};
  return k;
}

int64_t Entry::blockCount() const {
  int64_t n = 0;
  for (int64_t c : scaleHist) n += c;
  return n;
}

std::vector<std::string> formatNames() {
  return {"mxfp4", "mxfp4-floor", "nvfp4", "nvfp4-2d"};
}

fp4_config formatConfig(const std::string& name) {
  if (name == "mxfp4" || name == "mxfp4-floor") {
    fp4_config c = fp4_default_config(FP4_FORMAT_MXFP4);
    c.scale_rule = name == "mxfp4" ? FP4_SCALE_RULE_CEIL : FP4_SCALE_RULE_FLOOR;
    return c;
  }
  if (name == "nvfp4" || name == "nvfp4-2d") {
    fp4_config c = fp4_default_config(FP4_FORMAT_NVFP4);
    c.nvfp4_2d_blocks = name == "nvfp4-2d";
    return c;
  }
  throw Error("unknown format '" + name + "'", "--formats",
              "use mxfp4, mxfp4-floor, nvfp4 or nvfp4-2d");
}

const std::vector<std::string>& metricNames() {
  // The weight metrics of the run log's /quant group (engine/quant/quantize_model.cpp).
  static const std::vector<std::string> names = {"rel_l2",  "sqnr_db",   "mse",      "cosine",
                                                 "max_abs", "clip_frac", "zero_frac"};
  return names;
}

std::vector<double> metricValues(const fp4_error_stats& s) {
  return {fp4_stats_rel_l2(&s),       fp4_stats_sqnr_db(&s), fp4_stats_mse(&s),
          fp4_stats_cosine(&s),       s.max_abs_err,         fp4_stats_clip_fraction(&s),
          fp4_stats_zero_fraction(&s)};
}

std::vector<Layer> selectLayers(const Options& options) {
  return selectFrom(openFolder(files::withoutTrailingSlash(options.modelDir)), options);
}

Analysis analyzeModel(const Options& options, const std::function<void(const Progress&)>& progress,
                      const std::atomic<bool>* cancel) {
  const auto start = std::chrono::steady_clock::now();
  if (options.formats.empty()) throw Error("no format to analyse", "--formats");
  std::vector<fp4_config> configs;
  for (const std::string& f : options.formats) configs.push_back(formatConfig(f));
  const std::string dir = files::withoutTrailingSlash(options.modelDir);
  const Folder folder = openFolder(dir);
  Analysis a;
  a.modelDir = dir;
  a.formats = options.formats;
  a.layers = selectFrom(folder, options);
  std::map<std::string, std::pair<size_t, const io::TensorInfo*>> where;
  for (const auto& ft : folder.tensors) where[ft.second->name] = ft;
  auto read = [&](const Layer& l) {
    const auto& [file, info] = where.at(l.tensor);
    return folder.files[file]->toFloat32(*info);
  };
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  a.threads = options.threads > 0 ? options.threads : int(hw);
  const size_t n = a.layers.size();
  a.outliers.resize(n);
  a.entries.resize(n * configs.size());

  // Pass 1 (when an NVFP4 format is asked for): the amaxes, for the fused groups' shared scale.
  const bool nvfp4 = std::any_of(configs.begin(), configs.end(),
                                 [](const fp4_config& c) { return c.format == FP4_FORMAT_NVFP4; });
  std::vector<float> amax(n, -1.0f);
  if (nvfp4) {
    parallelFor(n, a.threads, cancel, [&](size_t i) {
      const std::vector<float> w = read(a.layers[i]);
      amax[i] = fp4_tensor_amax(w.data(), int64_t(w.size()));
    });
  }
  std::vector<float> tensorAmax = amax;
  if (nvfp4 && options.sharedGroupScale) {
    std::map<std::string, float> group;
    for (size_t i = 0; i < n; ++i) {
      const std::string g = exporter::fusedGroupOf(a.layers[i].module);
      if (!g.empty()) group[g] = std::max(group[g], amax[i]);
    }
    for (size_t i = 0; i < n; ++i) {
      const std::string g = exporter::fusedGroupOf(a.layers[i].module);
      if (!g.empty()) tensorAmax[i] = group[g];
    }
  }

  std::mutex progressMutex;
  int64_t done = 0;
  parallelFor(n, a.threads, cancel, [&](size_t i) {
    const Layer& l = a.layers[i];
    const std::vector<float> w = read(l);
    a.outliers[i] = outliersOf(w);
    for (size_t f = 0; f < configs.size(); ++f) {
      Entry& e = a.entries[i * configs.size() + f];
      e.layer = i;
      e.format = options.formats[f];
      fp4_stats_clear(&e.stats);
      const bool nv = configs[f].format == FP4_FORMAT_NVFP4;
      e.tensorAmax = nv ? tensorAmax[i] : a.outliers[i].amax;
      if (l.cols % fp4_block_size(configs[f].format) != 0) continue;
      if (nv && configs[f].nvfp4_2d_blocks && l.rows % 16 != 0) continue;
      const int64_t block = fp4_block_size(configs[f].format), blocks = l.rows * l.cols / block;
      std::vector<float> blockSq(static_cast<size_t>(blocks)),
          blockAmax(static_cast<size_t>(blocks));
      const fp4_status st =
          fp4_fake_quantize(&configs[f], w.data(), l.rows, l.cols, nv ? tensorAmax[i] : -1.0f,
                            nullptr, &e.stats, blockSq.data(), blockAmax.data());
      if (st != FP4_OK)
        throw Error(std::string("fake quantization failed: ") + fp4_last_error(),
                    l.tensor + " (" + e.format + ")");
      e.measured = true;
      // Each block's scale code from its amax, as the kernels derive it (ref.cpp's blockScale).
      const float s2 = nv ? fp4_nvfp4_global_scale(tensorAmax[i]) : 1.0f;
      const ScaleRule rule =
          configs[f].scale_rule == FP4_SCALE_RULE_FLOOR ? ScaleRule::Floor : ScaleRule::Ceil;
      const LogBins& ratioBins = amaxRatioBins();
      e.scaleHist.assign(256, 0);
      e.amaxHist.assign(size_t(ratioBins.size()), 0);
      if (options.blocks) e.blockMse.resize(size_t(blocks));
      const float inv = 1.0f / float(block);  // a power of two: exact, as the run log's division
      for (int64_t b = 0; b < blocks; ++b) {
        const float amax = blockAmax[size_t(b)];
        uint8_t code;
        if (std::isnan(amax))
          code = nv ? kE4M3NaN : kE8M0NaN;
        else if (nv)
          code = e4m3EncodeScale(amax / (6.0f * s2));
        else
          code = uint8_t(mxfp4SharedExponent(amax, rule) + kE8M0Bias);
        e.scaleHist[code]++;
        const float ratio =
            e.tensorAmax > 0.0f ? amax / e.tensorAmax : (std::isnan(amax) ? amax : 0.0f);
        e.amaxHist[size_t(ratioBins.index(ratio))]++;
        if (options.blocks) e.blockMse[size_t(b)] = blockSq[size_t(b)] * inv;
      }
    }
    if (progress) {
      std::lock_guard<std::mutex> lock(progressMutex);
      progress({++done, int64_t(n), l.module});
    }
  });
  a.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return a;
}

std::string formatTable(const Analysis& a) {
  size_t width = 6;
  for (const Layer& l : a.layers) width = std::max(width, l.module.size());
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-*s  %-11s %10s %9s %9s %10s %9s %9s %9s %9s %6s %6s %6s\n",
                int(width), "module", "format", "shape", "sqnr_db", "rel_l2", "mse", "cosine",
                "max_abs", "clip_frac", "zero_frac", ">3rms", ">6rms", ">10rms");
  out += line;
  for (const Entry& e : a.entries) {
    const Layer& l = a.layers[e.layer];
    const std::string shape = std::to_string(l.rows) + "x" + std::to_string(l.cols);
    if (!e.measured) {
      std::snprintf(line, sizeof line,
                    "%-*s  %-11s %10s  (not measured: columns/rows not a "
                    "multiple of the block)\n",
                    int(width), l.module.c_str(), e.format.c_str(), shape.c_str());
      out += line;
      continue;
    }
    const std::vector<double> m = metricValues(e.stats);
    std::snprintf(line, sizeof line,
                  "%-*s  %-11s %10s %9.3f %9.5f %10.3e %9.6f %9.3e %9.2e %9.2e %6lld %6lld %6lld\n",
                  int(width), l.module.c_str(), e.format.c_str(), shape.c_str(), m[1], m[0], m[2],
                  m[3], m[4], m[5], m[6], (long long)a.outliers[e.layer].over3,
                  (long long)a.outliers[e.layer].over6, (long long)a.outliers[e.layer].over10);
    out += line;
  }
  return out;
}

std::string toJson(const Analysis& a, int indent) {
  json layers = json::array();
  for (const Entry& e : a.entries) {
    const Layer& l = a.layers[e.layer];
    const LayerOutliers& o = a.outliers[e.layer];
    json j = {{"module", l.module},
              {"format", e.format},
              {"rows", l.rows},
              {"cols", l.cols},
              {"measured", e.measured},
              {"tensor_amax", number(e.tensorAmax)},
              {"weight_amax", number(o.amax)},
              {"weight_rms", number(o.rms)},
              {"outliers_3rms", o.over3},
              {"outliers_6rms", o.over6},
              {"outliers_10rms", o.over10}};
    const std::vector<double> m = metricValues(e.stats);
    for (size_t k = 0; k < m.size(); ++k)
      j[metricNames()[k]] = e.measured ? number(m[k]) : json(nullptr);
    j["count"] = e.stats.count;
    j["clipped"] = e.stats.clipped;
    j["flushed"] = e.stats.flushed;
    j["nonfinite"] = e.stats.nonfinite;
    j["blocks"] = e.blockCount();
    // The block with the largest MSE (NaN blocks skipped): where the layer's error sits.
    int64_t worst = -1;
    for (size_t b = 0; b < e.blockMse.size(); ++b)
      if (std::isfinite(e.blockMse[b]) && (worst < 0 || e.blockMse[b] > e.blockMse[size_t(worst)]))
        worst = int64_t(b);
    j["worst_block"] = worst >= 0 ? json(worst) : json(nullptr);
    j["worst_block_mse"] = worst >= 0 ? number(e.blockMse[size_t(worst)]) : json(nullptr);
    layers.push_back(j);
  }
  json root = {{"model", a.modelDir},
               {"formats", a.formats},
               {"seconds", a.seconds},
               {"threads", a.threads},
               {"layers", layers}};
  return root.dump(indent, ' ', false, json::error_handler_t::replace);
}

}  // namespace fp4lab::analyze
