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

LayerOutliers outliersOf(const std::vector<float>& w) {
  LayerOutliers o;
  double sum2 = 0;
  int64_t n = 0;
  for (float v : w)
    if (std::isfinite(v)) sum2 += double(v) * v, ++n, o.amax = std::max(o.amax, std::fabs(v));
  o.rms = n > 0 ? std::sqrt(sum2 / double(n)) : 0.0;
  for (float v : w) {
    if (!std::isfinite(v)) continue;
    const double a = std::fabs(double(v));
    if (a > 3 * o.rms) ++o.over3;
    if (a > 6 * o.rms) ++o.over6;
  }
  return o;
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
      const fp4_status st =
          fp4_fake_quantize(&configs[f], w.data(), l.rows, l.cols, nv ? tensorAmax[i] : -1.0f,
                            nullptr, &e.stats, nullptr, nullptr);
      if (st != FP4_OK)
        throw Error(std::string("fake quantization failed: ") + fp4_last_error(),
                    l.tensor + " (" + e.format + ")");
      e.measured = true;
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
  std::snprintf(line, sizeof line, "%-*s  %-11s %10s %9s %9s %10s %9s %9s %9s %9s %6s %6s\n",
                int(width), "module", "format", "shape", "sqnr_db", "rel_l2", "mse", "cosine",
                "max_abs", "clip_frac", "zero_frac", ">3rms", ">6rms");
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
                  "%-*s  %-11s %10s %9.3f %9.5f %10.3e %9.6f %9.3e %9.2e %9.2e %6lld %6lld\n",
                  int(width), l.module.c_str(), e.format.c_str(), shape.c_str(), m[1], m[0], m[2],
                  m[3], m[4], m[5], m[6], (long long)a.outliers[e.layer].over3,
                  (long long)a.outliers[e.layer].over6);
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
              {"outliers_6rms", o.over6}};
    const std::vector<double> m = metricValues(e.stats);
    for (size_t k = 0; k < m.size(); ++k)
      j[metricNames()[k]] = e.measured ? number(m[k]) : json(nullptr);
    j["count"] = e.stats.count;
    j["clipped"] = e.stats.clipped;
    j["flushed"] = e.stats.flushed;
    j["nonfinite"] = e.stats.nonfinite;
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
