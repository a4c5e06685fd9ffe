// The cores this process may run on.
#include "fp4lab/common/system.h"

#include <dlfcn.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>

namespace fp4lab {

int usableCores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

int64_t peakResidentBytes() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return int64_t(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

bool usingTcmalloc() {
  return dlsym(RTLD_DEFAULT, "tc_malloc") != nullptr;
}

namespace {

// /proc/stat's first line: user nice system idle iowait irq softirq steal ... (clock ticks).
bool machineBusyTicks(uint64_t& busy) {
  std::ifstream in("/proc/stat");
  std::string cpu;
  uint64_t user, nice, system, idle, iowait, irq, softirq, steal = 0;
  if (!(in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq) || cpu != "cpu")
    return false;
  in >> steal;
  busy = user + nice + system + irq + softirq + steal;
  return true;
}

// /proc/self/stat: utime and stime, fields 14 and 15, after the parenthesised command name.
bool selfTicks(uint64_t& ticks) {
  std::ifstream in("/proc/self/stat");
  std::string stat;
  if (!std::getline(in, stat)) return false;
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream fields(stat.substr(close + 1));
  std::string field;
  for (int i = 3; i < 14 && fields >> field; ++i) {
  }
  uint64_t utime, stime;
  if (!(fields >> utime >> stime)) return false;
  ticks = utime + stime;
  return true;
}

}  // namespace

double OtherCpuLoad::sample() {
  uint64_t busy, self;
  const auto now = std::chrono::steady_clock::now();
  if (!machineBusyTicks(busy) || !selfTicks(self)) {
    m_valid = false;
    return NAN;
  }
  double cores = NAN;
  const double seconds = std::chrono::duration<double>(now - m_at).count();
  if (m_valid && seconds > 0 && busy >= m_busy && self >= m_self) {
    const double others = double(busy - m_busy) - double(self - m_self);
    cores = std::max(0.0, others / double(::sysconf(_SC_CLK_TCK)) / seconds);
  }
  m_valid = true;
  m_busy = busy, m_self = self, m_at = now;
  return cores;
}

}  // namespace fp4lab
