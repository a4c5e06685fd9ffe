// Small facts about the process and strings that several commands need.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace fp4lab {

// The cores this process may run on (taskset, cgroup cpusets), not every core of the machine:
// more threads than cores spin against each other. At least 1.
int usableCores();

// The most resident memory this process has held at once (getrusage's ru_maxrss), in bytes.
int64_t peakResidentBytes();

// Whether this process allocates through tcmalloc (linked, or preloaded: it exports tc_malloc
// beside malloc) rather than glibc's malloc.
bool usingTcmalloc();

// How busy other programs keep this machine's cores: the CPU time the machine spent on anything
// but this process (and, on a VM, the time its hypervisor gave to others: steal) between two
// calls of sample(), in cores. NaN on the first call and where /proc cannot be read.
class OtherCpuLoad {
 public:
  double sample();

 private:
  bool m_valid = false;
  uint64_t m_busy = 0, m_self = 0;  // clock ticks, machine-wide and this process's
  std::chrono::steady_clock::time_point m_at{};
};

inline bool endsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace fp4lab
