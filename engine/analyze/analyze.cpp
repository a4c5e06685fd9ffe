// fp4lab_analyze: see fp4lab/analyze/analyze.h.
#include "fp4lab/analyze/analyze.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "fp4lab/common/files.h"
#include "fp4lab/error.h"
#include "fp4lab/export/fused_groups.h"
#include "fp4lab/export/gpt_oss_layout.h"
#include "fp4lab/common/glob.h"
#include "fp4lab/common/system.h"
#include "fp4lab/io/dtype.h"
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

// The folder's safetensors files and where each tensor is.
struct Folder {
  std::vector<std::unique_ptr<io::SafetensorsFile>> files;
  std::vector<std::pair<size_t, const io::TensorInfo*>> tensors;  // file, then data order
  std::string architecture;  // config.json's class name ("" without one)
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
  const std::string config = files::join(dir, "config.json");
  if (files::isRegularFile(config)) {
    const json c = json::parse(files::readFile(config), nullptr, false);
    if (c.is_object() && c.contains("architectures") && c["architectures"].is_array() &&
        !c["architectures"].empty() && c["architectures"][0].is_string())
      f.architecture = c["architectures"][0].get<std::string>();
  }
  return f;
}

std::vector<Layer> selectFrom(const Folder& folder, const Options& options) {
  const run::RunConfig defaults;
  const std::vector<std::string> include =
      options.include.empty()
          ? run::quantIncludePatterns(defaults.quantInclude, folder.architecture)
          : options.include;
  std::vector<std::string> exclude = run::splitList(defaults.quantExclude);
  exclude.insert(exclude.end(), options.exclude.begin(), options.exclude.end());
  std::vector<Layer> layers;
  for (const auto& [file, t] : folder.tensors) {
    if (!io::isFloatingPoint(t->dtype)) continue;
    const bool experts = exporter::isExpertsTensor(t->name, t->shape.size());
    if (!experts && (!endsWith(t->name, ".weight") || t->shape.size() != 2)) continue;
    const std::string module = experts ? t->name : t->name.substr(0, t->name.size() - 7);
    if (module.find("embed") != std::string::npos || module.find("wte") != std::string::npos)
      continue;
    if (!matchesAny(include, module) || matchesAny(exclude, module)) continue;
    if (experts)
      layers.push_back({module, t->name, t->shape[0] * t->shape[2], t->shape[1], t->shape[0]});
    else
      layers.push_back({module, t->name, t->shape[0], t->shape[1]});
  }
  if (layers.empty())
    throw Error("no linear layer selected", options.modelDir,
                "check --include / --exclude (module names such as model.layers.0.mlp.down_proj)");
  return layers;
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

// LogBins::index with the significand thresholds already looked up.
inline int binIndex(const LogBins& bins, const uint32_t* t, float v) {
  // Exactly from the bits (no libm call per element): NaN, zero, the exponent for the octave
  // (subnormals read as 2^-127, below any minExp >= -126), the significand for the bin in it.
  const uint32_t bits = floatBits(v) & 0x7FFFFFFFu;
  if (bits > 0x7F800000u) return bins.size() - 1;
  if (bits == 0) return 0;
  const int e = int(bits >> 23) - 127;
  if (e >= bins.maxExp) return bins.size() - 2;  // Inf included
  if (e < bins.minExp) return 1;
  const uint32_t mantissa = bits & 0x7FFFFFu;
  int sub = 0;
  for (int j = 1; j < bins.binsPerOctave; ++j) sub += mantissa >= t[j];
  return 2 + (e - bins.minExp) * bins.binsPerOctave + sub;
}

constexpr size_t kChunk = 2048;
constexpr int kLanes = 8;  // partial sums of w^2: two AVX2 vectors of doubles

// x86-64: AVX-512 (x86-64-v4) and AVX2 builds of the weight passes next to the baseline one,
// chosen at load time (GCC and Clang function multiversioning; no intrinsics). All give the same
// integers and doubles: w^2 of a float is exact in double (no overflow, no underflow), so an
// FMA contraction of the sums changes nothing.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define FP4LAB_ANALYZE_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define FP4LAB_ANALYZE_CLONES
#endif

// One chunk's bins (binIndex, plus bins.size() for a set sign bit), the largest finite |w|'s
// bits, the finite count and kLanes partial sums of the finite w^2 (element i into lane
// i % kLanes): branch-free arithmetic the compiler vectorizes. B is the bins per octave (a
// template argument so that the threshold loop unrolls). m is a multiple of kLanes.
template <int B>
[[gnu::always_inline]] inline void binChunk(const LogBins& bins, const uint32_t* thresholds,
                                            const float* w, size_t m, uint32_t* idx,
                                            int32_t& amaxBits, int64_t& finite, double* sum2) {
  int32_t t[B > 1 ? B : 2] = {};
  for (int j = 1; j < B; ++j) t[j] = int32_t(thresholds[j]);
  const int32_t minExp = bins.minExp, maxExp = bins.maxExp, size = bins.size();
  int32_t amx = amaxBits, nf = 0;
  for (size_t i = 0; i < m; ++i) {
    uint32_t u;
    std::memcpy(&u, w + i, sizeof u);
    const int32_t a = int32_t(u & 0x7FFFFFFFu);
    const int32_t e = (a >> 23) - 127;
    const int32_t mantissa = a & 0x7FFFFF;
    int32_t sub = 0;
    for (int j = 1; j < B; ++j) sub += mantissa >= t[j] ? 1 : 0;
    int32_t bin = 2 + (e - minExp) * B + sub;
    bin = e < minExp ? 1 : bin;
    bin = e >= maxExp ? size - 2 : bin;
    bin = a == 0 ? 0 : bin;
    bin = a > 0x7F800000 ? size - 1 : bin;
    idx[i] = uint32_t(bin + int32_t(u >> 31) * size);
    const bool fin = a < 0x7F800000;
    amx = std::max(amx, fin ? a : 0);
    nf += fin ? 1 : 0;
  }
  // The partial sums as two 4-double vectors (GCC/Clang vector extensions: the compiler
  // does not vectorize this reduction from a plain loop without reassociating it).
  using U4 = uint32_t __attribute__((vector_size(16)));
  using F4 = float __attribute__((vector_size(16)));
  using D4 = double __attribute__((vector_size(32)));
  D4 lo, hi;
  std::memcpy(&lo, sum2, sizeof lo);
  std::memcpy(&hi, sum2 + 4, sizeof hi);
  const U4 expMask = {0x7F800000u, 0x7F800000u, 0x7F800000u, 0x7F800000u};
  for (size_t i = 0; i < m; i += kLanes) {
    U4 a, b;
    std::memcpy(&a, w + i, sizeof a);
    std::memcpy(&b, w + i + 4, sizeof b);
    // NaN and Inf as +0 (add nothing): all-ones where the exponent is not all ones.
    a &= U4((a & expMask) != expMask);
    b &= U4((b & expMask) != expMask);
    F4 fa, fb;
    std::memcpy(&fa, &a, sizeof fa);
    std::memcpy(&fb, &b, sizeof fb);
    const D4 da = __builtin_convertvector(fa, D4), db = __builtin_convertvector(fb, D4);
    lo += da * da;
    hi += db * db;
  }
  std::memcpy(sum2, &lo, sizeof lo);
  std::memcpy(sum2 + 4, &hi, sizeof hi);
  amaxBits = amx;
  finite += nf;
}

// The largest float <= t (t >= 0), as bits: for a finite float f >= 0, f > t exactly when
// bits(f) > the result (non-negative floats order as their bits).
int32_t floatBitsAtMost(double t) {
  float f = float(t);
  if (double(f) > t) f = std::nextafter(f, -std::numeric_limits<float>::infinity());
  return int32_t(floatBits(f));
}

// The finite |w| over each threshold (as floatBitsAtMost's bits).
FP4LAB_ANALYZE_CLONES
void countOver(const float* w, size_t count, const int32_t (&t)[3], int64_t (&over)[3]) {
  const int32_t t0 = t[0], t1 = t[1], t2 = t[2];  // all >= 0
  for (size_t base = 0; base < count; base += kChunk) {
    const size_t m = std::min(kChunk, count - base);
    const float* x = w + base;
    int32_t c0 = 0, c1 = 0, c2 = 0;
    for (size_t i = 0; i < m; ++i) {
      uint32_t u;
      std::memcpy(&u, x + i, sizeof u);
      const int32_t a = int32_t(u & 0x7FFFFFFFu);
      const int32_t f = a < 0x7F800000 ? a : 0;  // NaN and Inf as 0: over no threshold
      c0 += f > t0 ? 1 : 0;
      c1 += f > t1 ? 1 : 0;
      c2 += f > t2 ? 1 : 0;
    }
    over[0] += c0, over[1] += c1, over[2] += c2;
  }
}

// The histogram, amax, finite count and sum of w^2 of outliersOf's first pass. hist: four
// copies of 2 * size counters (positive, then negative), so that runs of one bin do not chain
// through one counter.
FP4LAB_ANALYZE_CLONES
void weightPass(const float* w, size_t count, int64_t* hist, int32_t& amaxBits, int64_t& n,
                double& sum2) {
  const LogBins& bins = weightBins();
  const size_t size = size_t(bins.size());
  const uint32_t* t = significandThresholds(bins.binsPerOctave);
  int64_t* h[4] = {hist, hist + 2 * size, hist + 4 * size, hist + 6 * size};
  uint32_t idx[kChunk];
  double lanes[kLanes] = {};
  const size_t whole = count - count % kLanes;
  for (size_t base = 0; base < whole; base += kChunk) {
    const size_t m = std::min(kChunk, whole - base);
    const float* x = w + base;
    if (bins.binsPerOctave == 4) {
      binChunk<4>(bins, t, x, m, idx, amaxBits, n, lanes);
    } else {  // not weightBins()' today: the scalar index
      for (size_t i = 0; i < m; ++i) {
        idx[i] = uint32_t(binIndex(bins, t, x[i]) + (std::signbit(x[i]) ? int(size) : 0));
        if (isFiniteFloat(x[i])) {
          ++n;
          amaxBits = std::max(amaxBits, int32_t(floatBits(absFloat(x[i]))));
          lanes[i % kLanes] += double(x[i]) * double(x[i]);
        }
      }
    }
    for (size_t i = 0; i < m; i += 4) {
      h[0][idx[i]]++;
      h[1][idx[i + 1]]++;
      h[2][idx[i + 2]]++;
      h[3][idx[i + 3]]++;
    }
  }
  // The tail (under kLanes elements) into lane 0 and the first copy.
  for (size_t i = whole; i < count; ++i) {
    const float v = w[i];
    h[0][size_t(binIndex(bins, t, v)) + (std::signbit(v) ? size : 0)]++;
    if (isFiniteFloat(v)) {
      ++n;
      amaxBits = std::max(amaxBits, int32_t(floatBits(absFloat(v))));
      lanes[(i - whole) % kLanes] += double(v) * double(v);
    }
  }
  // A fixed order: the result does not depend on the build or the thread count.
  sum2 = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
         ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

// sqrt(mean w^2), the amax, the outlier counts and the signed weight histogram, in two passes:
// the first bins, takes the amax and sums w^2 (in kLanes partial sums, element i into sum
// i % kLanes, added in a fixed order at the end), the second counts |w| > k * rms on the bits.
LayerOutliers outliersOf(const float* w, size_t count) {
  LayerOutliers o;
  const size_t size = size_t(weightBins().size());
  std::vector<int64_t> hist(4 * 2 * size, 0);
  int32_t amaxBits = 0;
  int64_t n = 0;
  double sum2 = 0;
  weightPass(w, count, hist.data(), amaxBits, n, sum2);
  o.amax = bitsToFloat(uint32_t(amaxBits));
  o.rms = n > 0 ? std::sqrt(sum2 / double(n)) : 0.0;
  o.positive.assign(size, 0);
  o.negative.assign(size, 0);
  for (size_t b = 0; b < size; ++b)
    for (size_t k = 0; k < 4; ++k)
      o.positive[b] += hist[2 * size * k + b], o.negative[b] += hist[2 * size * k + size + b];
  const int32_t t[3] = {floatBitsAtMost(3 * o.rms), floatBitsAtMost(6 * o.rms),
                        floatBitsAtMost(10 * o.rms)};
  int64_t over[3] = {0, 0, 0};
  countOver(w, count, t, over);
  o.over3 = over[0], o.over6 = over[1], o.over10 = over[2];
  return o;
}

// Runs fn(i, worker) for i in [0, n) on `threads` threads (worker in [0, threads): which one
// runs it, for per-thread buffers); the first exception is rethrown.
template <typename Fn>
void parallelFor(size_t n, int threads, const std::atomic<bool>* cancel, Fn fn) {
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex m;
  auto work = [&](size_t worker) {
    for (;;) {
      if (failed || (cancel && *cancel)) return;
      const size_t i = next++;
      if (i >= n) return;
      try {
        fn(i, worker);
      } catch (...) {
        std::lock_guard<std::mutex> lock(m);
        if (!error) error = std::current_exception();
        failed = true;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads && size_t(t) < n; ++t) pool.emplace_back(work, size_t(t));
  work(0);
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
  if (cancel && *cancel) throw Error("analysis cancelled");
}

// The tensor as fp32 into `out` (reused between layers: no fresh pages per layer).
void readInto(const io::SafetensorsFile& file, const io::TensorInfo& t, std::vector<float>& out) {
  const size_t element = io::dtypeSize(t.dtype);
  const int64_t count = t.numel();
  if (element == 0 || count < 0 || uint64_t(count) * element != t.bytes()) {
    out = file.toFloat32(t);  // throws its error for a size mismatch
    return;
  }
  if (out.size() < size_t(count)) out.resize(size_t(count));
  io::convertToFloat32(t.dtype, file.data(t), size_t(count), out.data());
}

json number(double v) {
  return std::isfinite(v) ? json(v) : json(nullptr);
}

}  // namespace

int LogBins::index(float v) const {
  return binIndex(*this, significandThresholds(binsPerOctave), v);
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
  a.threads = options.threads > 0 ? options.threads : usableCores();
  const size_t n = a.layers.size();
  a.outliers.resize(n);
  a.entries.resize(n * configs.size());

  // NVFP4's fused groups (q/k/v, gate/up) share the tensor scale of the group's largest amax
  // (the finite weights' max |w|, LayerOutliers::amax, as fp4_tensor_amax computes it). A work
  // item is a group: its members are read to fp32 once, kept while the group's amax is found,
  // then analysed; a group over holdBytes is read twice instead (once for the amaxes).
  const bool nvfp4 = std::any_of(configs.begin(), configs.end(),
                                 [](const fp4_config& c) { return c.format == FP4_FORMAT_NVFP4; });
  const bool grouped = nvfp4 && options.sharedGroupScale;
  std::vector<std::vector<size_t>> items;
  {
    std::map<std::string, size_t> itemOf;
    for (size_t i = 0; i < n; ++i) {
      const std::string g = grouped ? exporter::fusedGroupOf(a.layers[i].module) : std::string();
      if (g.empty()) {
        items.push_back({i});
        continue;
      }
      const auto [it, added] = itemOf.emplace(g, items.size());
      if (added) items.emplace_back();
      items[it->second].push_back(i);
    }
  }
  auto weightsOf = [&](const std::vector<size_t>& item) {
    uint64_t w = 0;
    for (size_t i : item) w += uint64_t(a.layers[i].rows) * uint64_t(a.layers[i].cols);
    return w;
  };
  // Largest first, so that no big layer starts last while the other threads idle.
  std::vector<size_t> order(items.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t x, size_t y) { return weightsOf(items[x]) > weightsOf(items[y]); });
  const uint64_t holdBytes = std::max<uint64_t>(256ull << 20, (2ull << 30) / uint64_t(a.threads));

  std::map<std::string, std::pair<size_t, const io::TensorInfo*>> where;
  for (const auto& ft : folder.tensors) where[ft.second->name] = ft;
  auto read = [&](const Layer& l, std::vector<float>& out) {
    const auto& [file, info] = where.at(l.tensor);
    readInto(*folder.files[file], *info, out);
    if (l.experts > 0) {
      const std::vector<float> stored(out.begin(), out.begin() + l.rows * l.cols);
      exporter::expertsToRows(stored.data(), l.experts, l.cols, l.rows / l.experts, out.data());
    }
  };

  struct Buffers {
    std::vector<std::vector<float>> weights;
    std::vector<float> blockSq, blockAmax;
  };
  std::vector<Buffers> buffers(size_t(std::max(1, a.threads)));
  std::mutex progressMutex;
  int64_t done = 0;
  parallelFor(items.size(), a.threads, cancel, [&](size_t k, size_t worker) {
    const std::vector<size_t>& item = items[order[k]];
    Buffers& buf = buffers[worker];
    const bool hold = item.size() == 1 || weightsOf(item) * sizeof(float) <= holdBytes;
    if (buf.weights.size() < (hold ? item.size() : 1)) buf.weights.resize(hold ? item.size() : 1);
    float groupAmax = 0.0f;
    for (size_t m = 0; m < item.size(); ++m) {
      const Layer& l = a.layers[item[m]];
      std::vector<float>& w = buf.weights[hold ? m : 0];
      read(l, w);
      a.outliers[item[m]] = outliersOf(w.data(), size_t(l.rows * l.cols));
      groupAmax = std::max(groupAmax, a.outliers[item[m]].amax);
    }
    for (size_t m = 0; m < item.size(); ++m) {
      const size_t i = item[m];
      const Layer& l = a.layers[i];
      std::vector<float>& w = buf.weights[hold ? m : 0];
      if (!hold) read(l, w);
      const float tensorAmax = grouped ? groupAmax : a.outliers[i].amax;
      for (size_t f = 0; f < configs.size(); ++f) {
        Entry& e = a.entries[i * configs.size() + f];
        e.layer = i;
        e.format = options.formats[f];
        fp4_stats_clear(&e.stats);
        const bool nv = configs[f].format == FP4_FORMAT_NVFP4;
        e.tensorAmax = nv ? tensorAmax : a.outliers[i].amax;
        if (l.cols % fp4_block_size(configs[f].format) != 0) continue;
        if (nv && configs[f].nvfp4_2d_blocks && l.rows % 16 != 0) continue;
        const int64_t block = fp4_block_size(configs[f].format), blocks = l.rows * l.cols / block;
        if (buf.blockSq.size() < size_t(blocks)) {
          buf.blockSq.resize(size_t(blocks));
          buf.blockAmax.resize(size_t(blocks));
        }
        const float* blockSq = buf.blockSq.data();
        const float* blockAmax = buf.blockAmax.data();
        const fp4_status st =
            fp4_fake_quantize(&configs[f], w.data(), l.rows, l.cols, nv ? tensorAmax : -1.0f,
                              nullptr, &e.stats, buf.blockSq.data(), buf.blockAmax.data());
        if (st != FP4_OK)
          throw Error(std::string("fake quantization failed: ") + fp4_last_error(),
                      l.tensor + " (" + e.format + ")");
        e.measured = true;
        // Each block's scale code from its amax, as the kernels derive it (ref.cpp's blockScale).
        const float s2 = nv ? fp4_nvfp4_global_scale(tensorAmax) : 1.0f;
        const ScaleRule rule =
            configs[f].scale_rule == FP4_SCALE_RULE_FLOOR ? ScaleRule::Floor : ScaleRule::Ceil;
        const LogBins& ratioBins = amaxRatioBins();
        const uint32_t* ratioThresholds = significandThresholds(ratioBins.binsPerOctave);
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
          e.amaxHist[size_t(binIndex(ratioBins, ratioThresholds, ratio))]++;
          if (options.blocks) e.blockMse[size_t(b)] = blockSq[size_t(b)] * inv;
        }
      }
      if (progress) {
        std::lock_guard<std::mutex> lock(progressMutex);
        progress({++done, int64_t(n), l.module});
      }
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
