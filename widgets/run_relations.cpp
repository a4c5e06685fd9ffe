// How runs relate: the references of a quantized run and the groups of seed repeats, from the runs'
// configurations (model.path, quant.*, run.seed).
#include "fp4lab/widgets/run_relations.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <limits>

#include "fp4lab/common/files.h"

namespace fp4lab::widgets {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<std::string> components(const std::string& path) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    std::string part = path.substr(start, end - start);
    if (!part.empty() && part != ".") out.push_back(std::move(part));
    start = end + 1;
  }
  return out;
}

// "/a/./b/../c/" -> "/a/c"; ".." above the root stays at the root. Lexical: links are not read.
std::string normalAbsolute(const std::string& path) {
  std::vector<std::string> out;
  for (std::string& part : components(path)) {
    if (part == "..") {
      if (!out.empty()) out.pop_back();
    } else {
      out.push_back(std::move(part));
    }
  }
  std::string s;
  for (const auto& part : out) s += "/" + part;
  return s.empty() ? "/" : s;
}

std::string currentDirectory() {
  char buffer[PATH_MAX];
  return ::getcwd(buffer, sizeof buffer) ? std::string(buffer) : std::string("/");
}

// builtin:tiny, scratch:tiny, hf:...: a name, not a file.
bool isSpecialModel(const std::string& path) {
  const size_t colon = path.find(':'), slash = path.find('/');
  return colon != std::string::npos && (slash == std::string::npos || colon < slash);
}

bool quantized(const run::RunConfig& c) {
  return c.quantFormat != "none" && !c.quantFormat.empty();
}

// What the searches need of each run, computed once per call.
struct RunPaths {
  bool readable = false;
  std::string dir;       // the run folder, normalised
  std::string model;     // model.path, absolute and normalised ("" for builtin:... names)
  std::string rawModel;  // model.path as written
  bool relativeModel = false;
};

// The folder a relative model.path was written against: the folder the run was launched from,
// which is its folder minus run.output_dir/<name> when output_dir is relative and matches;
// otherwise this process's working directory.
std::string launchDirectory(const RunSnapshot& r, const std::string& dir) {
  const std::string& out = r.folder.config.outputDir;
  if (!out.empty() && out[0] != '/') {
    const std::vector<std::string> parent = components(files::parentOf(dir));
    const std::vector<std::string> outParts = components(normalAbsolute("/" + out));
    if (!outParts.empty() && outParts.size() <= parent.size() &&
        std::equal(outParts.rbegin(), outParts.rend(), parent.rbegin())) {
      std::string base;
      for (size_t i = 0; i + outParts.size() < parent.size(); ++i) base += "/" + parent[i];
      return base.empty() ? "/" : base;
    }
  }
  static const std::string cwd = currentDirectory();
  return cwd;
}

RunPaths pathsOf(const RunSnapshot& r) {
  RunPaths p;
  p.dir = normalAbsolute(r.id.empty() ? r.folder.dir : r.id);
  p.readable = r.folder.hasConfig;
  if (!p.readable) return p;
  p.rawModel = r.folder.config.modelPath;
  if (p.rawModel.empty() || isSpecialModel(p.rawModel)) return p;
  p.relativeModel = p.rawModel[0] != '/';
  p.model =
      normalAbsolute(p.relativeModel ? launchDirectory(r, p.dir) + "/" + p.rawModel : p.rawModel);
  return p;
}

std::vector<RunPaths> pathsOf(const RunSnapshots& runs) {
  std::vector<RunPaths> out;
  out.reserve(runs.size());
  for (const auto& r : runs) out.push_back(pathsOf(r));
  return out;
}

// Whether `model` (normalised) is the folder `dir`, its model/ or one of its checkpoints.
bool namesRunFolder(const std::string& model, const std::string& dir) {
  if (model == dir || model == dir + "/model") return true;
  const std::string prefix = dir + "/checkpoints/";
  return model.size() > prefix.size() && model.compare(0, prefix.size(), prefix) == 0 &&
         model.find('/', prefix.size()) == std::string::npos;
}

// The run whose folder model.path of run `index` names, or -1.
int sourceRun(const RunSnapshots& runs, const std::vector<RunPaths>& paths, std::size_t index) {
  const RunPaths& p = paths[index];
  if (p.model.empty()) return -1;
  for (size_t j = 0; j < runs.size(); ++j)
    if (j != index && namesRunFolder(p.model, paths[j].dir)) return int(j);
  // Links (a run root reached through a symlink): the real paths.
  for (size_t j = 0; j < runs.size(); ++j) {
    if (j == index) continue;
    const std::string& dir = paths[j].dir;
    if (files::samePath(p.model, dir) || files::samePath(p.model, dir + "/model")) return int(j);
  }
  // A relative path written from another folder: its trailing components, when one run fits.
  if (p.relativeModel) {
    const std::vector<std::string> tail = components(p.rawModel);
    if (std::find(tail.begin(), tail.end(), "..") != tail.end()) return -1;
    int found = -1;
    for (size_t j = 0; j < runs.size(); ++j) {
      if (j == index) continue;
      const std::vector<std::string> dir = components(paths[j].dir);
      for (const std::vector<std::string>& form : {dir, [&] {
                                                     auto d = dir;
                                                     d.push_back("model");
                                                     return d;
                                                   }()}) {
        if (tail.size() <= form.size() && std::equal(tail.rbegin(), tail.rend(), form.rbegin())) {
          if (found >= 0 && found != int(j)) return -1;  // ambiguous
          found = int(j);
        }
      }
    }
    return found;
  }
  return -1;
}

bool sameModel(const RunPaths& a, const RunPaths& b) {
  if (a.model.empty() || b.model.empty())
    return a.model.empty() && b.model.empty() && !a.rawModel.empty() && a.rawModel == b.rawModel;
  return a.model == b.model || files::samePath(a.model, b.model);
}

// The quantization a PTQ reference must share (quant.backward only matters to training).
const char* const kQuantKeys[] = {"quant.format",      "quant.scale_rule", "quant.blocks_2d",
                                  "quant.activations", "quant.amax",       "quant.include",
                                  "quant.exclude"};
// The validation set: a loss is only comparable on the same one.
const char* const kDataKeys[] = {
    "data.train",          "data.validation",   "data.validation_fraction",
    "data.validation_max", "data.seq_len",      "data.seed",
    "data.pack",           "train.eval_batches"};

bool sameValues(const run::RunConfig& a, const run::RunConfig& b, const char* const* keys,
                size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (a.valueOf(keys[i]) != b.valueOf(keys[i])) return false;
  return true;
}

}  // namespace

RunReferences findReferences(const RunSnapshots& runs, std::size_t index) {
  RunReferences refs;
  if (index >= runs.size()) return refs;
  const RunSnapshot& run = runs[index];
  if (!run.folder.hasConfig || run.recipe() == "sft" || !quantized(run.folder.config)) return refs;
  const std::vector<RunPaths> paths = pathsOf(runs);
  const run::RunConfig& config = run.folder.config;

  // BF16: the unquantized run at the start of the chain of model.path (QAD from a QAT model reads
  // through the QAT run to the SFT run it started from).
  int from = sourceRun(runs, paths, index);
  std::vector<bool> seen(runs.size(), false);
  seen[index] = true;
  while (from >= 0 && !seen[size_t(from)]) {
    seen[size_t(from)] = true;
    const RunSnapshot& r = runs[size_t(from)];
    if (!r.folder.hasConfig) break;
    if (!quantized(r.folder.config)) {
      refs.bf16 = from;
      break;
    }
    from = sourceRun(runs, paths, size_t(from));
  }
  // A model that is no run's (builtin:tiny, a Hugging Face folder): an evaluation of it, i.e. an
  // unquantized run of the same model.path without training steps ("base" in the experiment).
  if (refs.bf16 < 0 && sourceRun(runs, paths, index) < 0) {
    for (size_t j = 0; j < runs.size(); ++j) {
      const RunSnapshot& r = runs[j];
      if (j == index || !r.folder.hasConfig || quantized(r.folder.config) ||
          r.folder.config.maxSteps != 0 || !sameModel(paths[j], paths[index]))
        continue;
      refs.bf16 = int(j);  // the newest such run wins (ids sort by time within a root)
    }
  }

  // PTQ: the same model and quantization; preferring the same seed, validation set and
  // calibration, then one with a validation loss, then the newest.
  if (run.recipe() == "ptq") {
    refs.ptq = int(index);
    return refs;
  }
  int bestScore = -1;
  for (size_t j = 0; j < runs.size(); ++j) {
    const RunSnapshot& r = runs[j];
    if (j == index || !r.folder.hasConfig || r.recipe() != "ptq") continue;
    const run::RunConfig& c = r.folder.config;
    if (!sameValues(c, config, kQuantKeys, std::size(kQuantKeys)) ||
        !sameModel(paths[j], paths[index]))
      continue;
    int score = 0;
    if (c.seed == config.seed) score += 8;
    if (sameValues(c, config, kDataKeys, std::size(kDataKeys))) score += 4;
    if (c.calibBatches == config.calibBatches) score += 2;
    if (std::isfinite(r.summary.lastValLoss)) score += 1;
    if (score >= bestScore) bestScore = score, refs.ptq = int(j);
  }
  return refs;
}

double gapRecovered(double ptqLoss, double bf16Loss, double loss) {
  if (!std::isfinite(ptqLoss) || !std::isfinite(bf16Loss) || !std::isfinite(loss) ||
      ptqLoss == bf16Loss)
    return kNaN;
  return (ptqLoss - loss) / (ptqLoss - bf16Loss);
}

double gapRecovered(const RunSnapshots& runs, std::size_t index, RunReferences overrides) {
  if (index >= runs.size()) return kNaN;
  RunReferences refs = findReferences(runs, index);
  const int n = int(runs.size());
  if (overrides.ptq >= 0 && overrides.ptq < n) refs.ptq = overrides.ptq;
  if (overrides.bf16 >= 0 && overrides.bf16 < n) refs.bf16 = overrides.bf16;
  if (refs.ptq == int(index) && runs[index].recipe() == "ptq") return 0;
  if (refs.ptq < 0 || refs.bf16 < 0) return kNaN;
  return gapRecovered(runs[size_t(refs.ptq)].summary.lastValLoss,
                      runs[size_t(refs.bf16)].summary.lastValLoss, runs[index].summary.lastValLoss);
}

GapText gapRecoveredText(const RunSnapshots& runs, std::size_t index) {
  GapText out;
  out.value = gapRecovered(runs, index);
  if (!std::isfinite(out.value)) return out;
  const RunSnapshot& r = runs[index];
  const RunReferences refs = findReferences(runs, index);
  auto fixed = [](double v, int digits) {
    char text[64];
    std::snprintf(text, sizeof text, "%.*f", digits, v);
    return std::string(text);
  };
  const std::string raw = fixed(out.value * 100, 1) + "%";
  if (refs.ptq == int(index) || refs.ptq < 0 || refs.bf16 < 0) {
    out.text = raw;
    out.detail = "a PTQ run is where the gap is measured from: 0% by definition";
    return out;
  }
  const double ptq = runs[size_t(refs.ptq)].summary.lastValLoss;
  const double bf16 = runs[size_t(refs.bf16)].summary.lastValLoss;
  const double loss = r.summary.lastValLoss;
  out.detail = "(PTQ " + fixed(ptq, 4) + " - this run " + fixed(loss, 4) + ") / (PTQ " +
               fixed(ptq, 4) + " - BF16 " + fixed(bf16, 4) + ") = " + raw;
  const bool onlyStepZero = r.curves && !r.curves->eval.empty() && r.curves->eval.back().step == 0;
  if (onlyStepZero && r.recipe() != "ptq" && (r.state() == RunState::Running || r.starting)) {
    out.text = "not yet";
    out.detail = "only the step-0 evaluation so far (the run starts where PTQ is): " + out.detail;
  } else if (std::abs(ptq - bf16) < kMinPtqGap) {
    out.text = "PTQ gap < 0.001";
    out.detail = "PTQ loses only " + fixed(ptq - bf16, 5) +
                 " nats against BF16, too little to recover as a percentage: " + out.detail;
  } else if (out.value > 1) {
    out.text = "beats BF16";
    out.detail = "its validation loss is below the BF16 reference's: " + out.detail;
  } else {
    out.text = raw;
    if (out.value < 0) out.detail = "worse than its PTQ run: " + out.detail;
  }
  return out;
}

std::vector<std::vector<std::size_t>> seedGroups(const RunSnapshots& runs) {
  std::vector<std::vector<std::size_t>> groups;
  auto onlySeed = [&](std::size_t a, std::size_t b) {
    for (const std::string& key :
         run::differingKeys(runs[a].folder.config, runs[b].folder.config, false))
      if (key != "run.seed" && key != "run.name" && key != "run.output_dir") return false;
    return true;
  };
  for (std::size_t i = 0; i < runs.size(); ++i) {
    bool placed = false;
    if (runs[i].folder.hasConfig) {
      for (auto& group : groups) {
        if (runs[group.front()].folder.hasConfig && onlySeed(group.front(), i)) {
          group.push_back(i);
          placed = true;
          break;
        }
      }
    }
    if (!placed) groups.push_back({i});
  }
  for (auto& group : groups)
    std::stable_sort(group.begin(), group.end(), [&](std::size_t a, std::size_t b) {
      return runs[a].folder.config.seed < runs[b].folder.config.seed;
    });
  return groups;
}

}  // namespace fp4lab::widgets
