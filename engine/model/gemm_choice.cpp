// Choosing the BF16 GEMM by timing both on the model's products (see gemm_choice.h).
#include "model/gemm_choice.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include "fp4lab/common/files.h"
#include "fp4lab/common/time.h"
#include "model/fused_ops.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>

namespace fp4lab::model {
namespace {

std::atomic<int> g_gemm{int(Bf16Gemm::LibTorch)};

// FP4LAB_BF16_GEMM, read once (linear() asks on every call).
std::optional<Bf16Gemm> forcedGemm() {
  static const std::optional<Bf16Gemm> forced = []() -> std::optional<Bf16Gemm> {
    const char* value = std::getenv("FP4LAB_BF16_GEMM");
    const std::string f = value ? value : "";
    if (f == "bf16") return Bf16Gemm::LibTorch;
    if (f == "fp32") return Bf16Gemm::Fp32;
    return std::nullopt;  // unset, empty, "auto": measured
  }();
  return forced;
}

// The first processor's lines of /proc/cpuinfo that name it.
struct CpuInfo {
  std::string vendor, family, model, stepping, name, flags;
};

CpuInfo readCpuInfo() {
  CpuInfo info;
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() && !info.name.empty()) break;  // the first processor's block only
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
    std::string value = line.substr(std::min(line.size(), colon + 2));
    if (key == "vendor_id")
      info.vendor = value;
    else if (key == "cpu family")
      info.family = value;
    else if (key == "model")
      info.model = value;
    else if (key == "stepping")
      info.stepping = value;
    else if (key == "model name")
      info.name = value;
    else if (key == "flags")
      info.flags = value;
  }
  return info;
}

const CpuInfo& cpuInfo() {
  static const CpuInfo info = readCpuInfo();
  return info;
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

void setAutocastBf16(bool on) {
  at::autocast::set_autocast_enabled(c10::DeviceType::CPU, on);
  if (on) at::autocast::set_autocast_dtype(c10::DeviceType::CPU, at::kBFloat16);
}

// One product as a training step runs it under BF16 autocast: x (BF16 activations) times the fp32
// master weight, forward and (with `backward`) the two backward products.
double timeProduct(Bf16Gemm gemm, const torch::Tensor& x, const torch::Tensor& w,
                   const torch::Tensor& g, bool backward) {
  const bool wasOn = at::autocast::is_autocast_enabled(c10::DeviceType::CPU);
  const auto started = std::chrono::steady_clock::now();
  {
    std::optional<torch::NoGradGuard> noGrad;
    if (!backward) noGrad.emplace();
    setAutocastBf16(true);
    at::autocast::increment_nesting();
    torch::Tensor y =
        gemm == Bf16Gemm::LibTorch ? torch::linear(x, w) : bf16LinearViaFp32(x, w, torch::Tensor());
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    setAutocastBf16(wasOn);
    if (backward) y.backward(g);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (backward) {
    x.mutable_grad().reset();
    w.mutable_grad().reset();
  }
  return seconds;
}

std::string shapesText(const std::vector<GemmShape>& shapes) {
  std::vector<GemmShape> sorted = shapes;
  std::sort(sorted.begin(), sorted.end(), [](const GemmShape& a, const GemmShape& b) {
    return std::tie(a.rows, a.in, a.out, a.count) < std::tie(b.rows, b.in, b.out, b.count);
  });
  std::string text;
  for (const GemmShape& s : sorted)
    text += (text.empty() ? "" : ",") + std::to_string(s.rows) + "x" + std::to_string(s.in) + "x" +
            std::to_string(s.out) + "*" + std::to_string(s.count);
  return text;
}

// Shapes that are the same product are added up (a model lists q_proj and o_proj alike).
std::vector<GemmShape> merged(const std::vector<GemmShape>& shapes) {
  std::map<std::tuple<int64_t, int64_t, int64_t>, int64_t> counts;
  for (const GemmShape& s : shapes)
    if (s.rows > 0 && s.in > 0 && s.out > 0 && s.count > 0)
      counts[{s.rows, s.in, s.out}] += s.count;
  std::vector<GemmShape> result;
  for (const auto& [k, count] : counts)
    result.push_back({std::get<0>(k), std::get<1>(k), std::get<2>(k), count});
  return result;
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, s < 0.01 ? "%.2g s" : "%.3g s", s);
  return buf;
}

std::mutex g_mutex;
std::map<std::string, Bf16GemmChoice>& processCache() {
  static std::map<std::string, Bf16GemmChoice> cache;
  return cache;
}

// An exclusive lock on FILE.lock while it is held; none where it cannot be made (a read-only
// cache folder: then nothing is written either).
class CacheLock {
 public:
  explicit CacheLock(const std::string& file) {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(file).parent_path(), ec);
    m_fd = ::open((file + ".lock").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    if (m_fd >= 0) ::flock(m_fd, LOCK_EX);
  }
  ~CacheLock() {
    if (m_fd < 0) return;
    ::flock(m_fd, LOCK_UN);
    ::close(m_fd);
  }
  CacheLock(const CacheLock&) = delete;
  CacheLock& operator=(const CacheLock&) = delete;

 private:
  int m_fd = -1;
};

std::optional<Bf16GemmChoice> readCached(const std::string& file, const std::string& key) {
  std::ifstream in(file);
  if (!in) return std::nullopt;
  // A damaged or foreign cache file is no answer: measure again (and rewrite it).
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("entries") || !j["entries"].is_object() ||
      !j["entries"].contains(key))
    return std::nullopt;
  const nlohmann::json& e = j["entries"][key];
  if (!e.is_object() || !e.value("bf16_s", nlohmann::json()).is_number() ||
      !e.value("fp32_s", nlohmann::json()).is_number())
    return std::nullopt;
  Bf16GemmChoice c;
  c.libTorchSeconds = e["bf16_s"].get<double>();
  c.fp32Seconds = e["fp32_s"].get<double>();
  c.gemm = c.fp32Seconds < c.libTorchSeconds ? Bf16Gemm::Fp32 : Bf16Gemm::LibTorch;
  c.source = "cached";
  return c;
}

void writeCached(const std::string& file, const std::string& key, const Bf16GemmChoice& c) {
  // Best effort: a cache that cannot be written costs a measurement next time, nothing else.
  try {
    nlohmann::json j;
    if (std::ifstream in(file); in) j = nlohmann::json::parse(in, nullptr, false);
    if (!j.is_object() || !j.contains("entries") || !j["entries"].is_object())
      j = nlohmann::json{{"entries", nlohmann::json::object()}};
    j["about"] =
        "fp4lab's timings of LibTorch's BF16 GEMM against its fp32 GEMM on BF16 operands "
        "(engine/model/gemm_choice.h); delete this file to measure again";
    j["entries"][key] = {{"gemm", toString(c.gemm)},
                         {"bf16_s", c.libTorchSeconds},
                         {"fp32_s", c.fp32Seconds},
                         {"cpu", cpuName()},
                         {"measured_utc", utcTimestamp()}};
    std::filesystem::create_directories(std::filesystem::path(file).parent_path());
    files::writeFileAtomically(file, j.dump(1) + "\n");
  } catch (const std::exception&) {
  }
}

}  // namespace

const char* toString(Bf16Gemm gemm) {
  return gemm == Bf16Gemm::Fp32 ? "fp32" : "bf16";
}

std::string Bf16GemmChoice::describe() const {
  const bool fp32 = gemm == Bf16Gemm::Fp32;
  std::string text =
      std::string("BF16 linears on ") + (fp32 ? "the fp32 GEMM" : "LibTorch's BF16 GEMM");
  if (std::isfinite(libTorchSeconds) && std::isfinite(fp32Seconds))
    text += ": " + seconds(fp32 ? fp32Seconds : libTorchSeconds) +
            " per step of this model's products, " +
            (fp32 ? "LibTorch's BF16 GEMM " : "the fp32 GEMM ") +
            seconds(fp32 ? libTorchSeconds : fp32Seconds) + " (" + source + ", " +
            std::to_string(threads) + (threads == 1 ? " thread" : " threads") + ", " + cpuName() +
            ")";
  else
    text += " (" + source + ")";
  return text;
}

Bf16Gemm currentBf16Gemm() {
  if (const auto forced = forcedGemm()) return *forced;
  return Bf16Gemm(g_gemm.load(std::memory_order_relaxed));
}

void setBf16Gemm(Bf16Gemm gemm) {
  g_gemm.store(int(gemm), std::memory_order_relaxed);
}

std::string cpuName() {
  const CpuInfo& c = cpuInfo();
  std::string name = c.name.empty() ? "unknown CPU" : c.name;
  if (!c.family.empty()) name += " (family " + c.family + " model " + c.model + ")";
  return name;
}

std::string gemmCacheKey(const std::vector<GemmShape>& shapes, bool backward, int threads) {
  const CpuInfo& c = cpuInfo();
  char flags[17];
  std::snprintf(flags, sizeof flags, "%016llx", static_cast<unsigned long long>(fnv1a(c.flags)));
  return "cpu=" + c.vendor + "/" + c.family + "/" + c.model + "/" + c.stepping + "/" + c.name +
         "/flags-" + flags + ";torch=" + TORCH_VERSION + ";threads=" + std::to_string(threads) +
         (backward ? ";train" : ";forward") + ";shapes=" + shapesText(merged(shapes));
}

int64_t gemmTimingRows(const GemmShape& s, const GemmChoiceOptions& options) {
  const double flops = 2.0 * double(s.in) * double(s.out);
  if (flops * double(s.rows) <= options.maxFlops || s.rows < 4 * options.minRows) return s.rows;
  return std::min(s.rows / 4,
                  std::max<int64_t>(options.minRows, int64_t(options.maxFlops / flops)));
}

double extrapolateGemmSeconds(double lowSeconds, double highSeconds, int64_t low, int64_t rows) {
  const double perRow = std::max(0.0, (highSeconds - lowSeconds) / double(low));
  return std::max(highSeconds, lowSeconds + perRow * double(rows - low));
}

Bf16GemmChoice measureBf16Gemm(const std::vector<GemmShape>& shapes,
                               const GemmChoiceOptions& options) {
  Bf16GemmChoice choice;
  choice.threads = at::get_num_threads();
  choice.source = "measured";
  choice.libTorchSeconds = choice.fp32Seconds = 0;
  // A generator of its own: the run's seeded one must not move.
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(0);
  // Both paths' fastest times for one product at `rows` rows, after a warm-up round. Where the
  // warm-up already separates them by 4x, the slower one's warm-up time stands (it can only
  // overstate a time that loses anyway: on a CPU without BF16 units LibTorch's BF16 GEMM takes
  // 20-40x the fp32 one, and timing it again would cost most of the measurement); otherwise
  // rounds alternate until one separates them by 2x, or `repeats` rounds.
  auto fastest = [&](const GemmShape& s, int64_t rows) {
    torch::Tensor x =
        torch::randn({rows, s.in}, gen).to(torch::kBFloat16).requires_grad_(options.backward);
    torch::Tensor w = (torch::randn({s.out, s.in}, gen) * 0.05).requires_grad_(options.backward);
    torch::Tensor g = torch::randn({rows, s.out}, gen).to(torch::kBFloat16);
    const auto time = [&](Bf16Gemm gemm) { return timeProduct(gemm, x, w, g, options.backward); };
    std::array<double, 2> warm{}, best = {INFINITY, INFINITY};
    for (Bf16Gemm gemm : {Bf16Gemm::LibTorch, Bf16Gemm::Fp32}) warm[int(gemm)] = time(gemm);
    const int winner = warm[0] < warm[1] ? 0 : 1;
    if (warm[1 - winner] > 4 * warm[winner]) {
      best[1 - winner] = warm[1 - winner];
      best[winner] = time(Bf16Gemm(winner));
      return best;
    }
    for (int rep = 1; rep <= options.repeats; ++rep) {
      for (int k = 0; k < 2; ++k) {  // alternate which path goes first
        const Bf16Gemm gemm = (rep + k) % 2 ? Bf16Gemm::Fp32 : Bf16Gemm::LibTorch;
        best[int(gemm)] = std::min(best[int(gemm)], time(gemm));
      }
      if (std::max(best[0], best[1]) > 2 * std::min(best[0], best[1])) break;
    }
    return best;
  };
  for (const GemmShape& s : merged(shapes)) {
    std::array<double, 2> estimate{};
    if (const int64_t low = gemmTimingRows(s, options); low == s.rows) {
      estimate = fastest(s, s.rows);
    } else {
      const std::array<double, 2> a = fastest(s, low), b = fastest(s, 2 * low);
      for (int p = 0; p < 2; ++p) estimate[p] = extrapolateGemmSeconds(a[p], b[p], low, s.rows);
    }
    choice.libTorchSeconds += double(s.count) * estimate[int(Bf16Gemm::LibTorch)];
    choice.fp32Seconds += double(s.count) * estimate[int(Bf16Gemm::Fp32)];
  }
  choice.gemm = choice.fp32Seconds < choice.libTorchSeconds ? Bf16Gemm::Fp32 : Bf16Gemm::LibTorch;
  return choice;
}

Bf16GemmChoice chooseBf16Gemm(const std::vector<GemmShape>& shapes,
                              const GemmChoiceOptions& options) {
  const int threads = at::get_num_threads();
  if (const auto forced = forcedGemm()) {
    Bf16GemmChoice c;
    c.gemm = *forced;
    c.threads = threads;
    c.source = std::string("forced by FP4LAB_BF16_GEMM=") + toString(*forced);
    return c;
  }
  const std::string key = gemmCacheKey(shapes, options.backward, threads);
  std::lock_guard<std::mutex> lock(g_mutex);
  auto& memo = processCache();
  Bf16GemmChoice choice;
  if (auto it = memo.find(key); it != memo.end()) {
    choice = it->second;
  } else if (options.cacheFile.empty()) {
    choice = measureBf16Gemm(shapes, options);
  } else {
    // One measurement per machine and key: processes starting together (a workbench's queue, a
    // test suite) wait for the first one's answer instead of each taking a different one.
    CacheLock cacheLock(options.cacheFile);
    if (auto cached = readCached(options.cacheFile, key)) {
      choice = *cached;
    } else {
      choice = measureBf16Gemm(shapes, options);
      writeCached(options.cacheFile, key, choice);
    }
  }
  choice.threads = threads;
  memo[key] = choice;
  setBf16Gemm(choice.gemm);
  return choice;
}

}  // namespace fp4lab::model
